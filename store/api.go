package store

import (
	"context"
	"time"
)

// The types and interface below back the HTTP run API (package api): API
// keys, idempotency keys, agent ownership by tenant, webhooks and their
// delivery outbox, admission counts for quotas, and fair claiming across
// tenants. A store that serves the API implements APIStore in addition to
// Store; callers find it by type assertion.

// APIKey is a stored API key. Only a hash of the secret is kept: the key is
// shown once, when it is created.
type APIKey struct {
	// ID is the key's public identifier, the part of the token before the
	// secret; it is how a presented token finds its record.
	ID     string
	Tenant string
	User   string
	Name   string
	// SecretHash is the sha256 of the secret part of the token.
	SecretHash [32]byte
	Scopes     []string
	CreatedAt  time.Time
	// RevokedAt is zero for a live key.
	RevokedAt time.Time
}

// Idempotency binds a tenant's idempotency key to the request it first came
// with (by hash) and the run that request created.
type Idempotency struct {
	Tenant      string
	Key         string
	RequestHash [32]byte
	RunID       string
	CreatedAt   time.Time
}

// Webhook is a tenant's registered endpoint and its signing secret.
type Webhook struct {
	Tenant    string
	URL       string
	Secret    string // "whsec_" + base64 of the key, as Standard Webhooks writes it
	UpdatedAt time.Time
}

// Delivery states.
const (
	DeliveryPending   = "pending"
	DeliveryDelivered = "delivered"
	DeliveryFailed    = "failed"
	// DeliveryDropped: the tenant's webhook was deleted before the
	// delivery succeeded; it is never sent again.
	DeliveryDropped = "dropped"
)

// Delivery is one webhook message: created when a run ends, retried until
// the receiver accepts it or the attempts run out. Its ID is the
// webhook-id header, the same on every attempt, so receivers can drop
// repeats.
type Delivery struct {
	ID            string
	Tenant        string
	RunID         string
	EventType     string
	URL           string
	Payload       []byte
	Status        string
	Attempts      int
	NextAttemptAt time.Time
	CreatedAt     time.Time
	UpdatedAt     time.Time
	LastError     string
}

// DeliveryAttempt records one POST of a delivery.
type DeliveryAttempt struct {
	DeliveryID string
	N          int // 1, 2, ...
	At         time.Time
	StatusCode int // 0 when no response arrived
	Error      string
	DurationMS int64
}

// APIStore persists what the HTTP API needs beyond the core aggregates.
// Methods follow the package conventions: ctx first, safe for concurrent
// use, ErrNotFound and ErrConflict for the conditions they name.
type APIStore interface {
	// PutAPIKey stores a new key; an existing ID is ErrConflict.
	PutAPIKey(ctx context.Context, k *APIKey) error
	// GetAPIKey returns a key by ID, revoked or not.
	GetAPIKey(ctx context.Context, id string) (*APIKey, error)
	// ListAPIKeys lists a tenant's keys ("" = every tenant), oldest first.
	ListAPIKeys(ctx context.Context, tenant string) ([]*APIKey, error)
	// RevokeAPIKey marks a key revoked at the given time.
	RevokeAPIKey(ctx context.Context, id string, at time.Time) error

	// ReserveIdempotencyKey stores rec unless rec.Tenant already used
	// rec.Key; it returns the record in force and whether it is rec.
	ReserveIdempotencyKey(ctx context.Context, rec *Idempotency) (*Idempotency, bool, error)
	// DeleteIdempotencyKey frees a reservation that created nothing (the
	// request was refused); it deletes only the record binding key to runID.
	DeleteIdempotencyKey(ctx context.Context, tenant, key, runID string) error

	// ClaimAgentName makes tenant the owner of agent unless the name is
	// owned already; it returns the owner in force.
	ClaimAgentName(ctx context.Context, agent, tenant string, at time.Time) (string, error)
	// AgentOwner returns the tenant owning agent, or ErrNotFound when the
	// agent was not created through the API (a platform agent).
	AgentOwner(ctx context.Context, agent string) (string, error)
	// AgentsOwnedBy lists the names a tenant owns, sorted.
	AgentsOwnedBy(ctx context.Context, tenant string) ([]string, error)

	// PutWebhook registers (or replaces) a tenant's endpoint.
	PutWebhook(ctx context.Context, w *Webhook) error
	GetWebhook(ctx context.Context, tenant string) (*Webhook, error)
	// DeleteWebhook removes the endpoint and, in the same transaction,
	// marks the tenant's pending deliveries DeliveryDropped at at.
	DeleteWebhook(ctx context.Context, tenant string, at time.Time) error

	// RunsToNotify returns runs that ended and have not been handed to the
	// webhook outbox yet, oldest first.
	RunsToNotify(ctx context.Context, limit int) ([]*Run, error)
	// MarkNotified hands an ended run to the outbox: it stores d (if not
	// nil) and marks the run notified, in one transaction. A run already
	// notified is left alone and d is not stored (ErrConflict).
	MarkNotified(ctx context.Context, runID string, d *Delivery) error
	// ClaimDeliveries takes up to limit pending deliveries whose next
	// attempt is due at now, for the caller to attempt: it moves their
	// next attempt to now+lease in the same statement, so no other caller
	// (in any process) gets them until then. The attempt's RecordAttempt
	// sets the real next attempt; an attempt whose process died is made
	// again once the lease has passed, under the same webhook-id.
	ClaimDeliveries(ctx context.Context, now time.Time, lease time.Duration, limit int) ([]*Delivery, error)
	// RecordAttempt stores an attempt and the delivery's new state
	// together. A delivery that is no longer pending (dropped while the
	// attempt ran) keeps its state; the attempt is still stored.
	RecordAttempt(ctx context.Context, a *DeliveryAttempt, d *Delivery) error
	// ListDeliveries lists a tenant's deliveries, newest first; runID ""
	// means every run.
	ListDeliveries(ctx context.Context, tenant, runID string, limit int) ([]*Delivery, error)
	GetDelivery(ctx context.Context, id string) (*Delivery, error)
	ListAttempts(ctx context.Context, deliveryID string) ([]*DeliveryAttempt, error)

	// Usage reports how many of a tenant's runs are open (queued, running
	// or waiting) and, for each time in since, the recorded cost of its runs
	// created at or after it, by currency in micro-units.
	Usage(ctx context.Context, tenant string, since []time.Time) (open int, cost []map[string]int64, err error)

	// AdmitRun decides whether tenant may start the run runID, in one
	// transaction under a lock on the tenant that every process's AdmitRun
	// for that tenant takes: it reads the tenant's open runs (queued,
	// running or waiting, plus the runs admitted in the last
	// AdmissionHold that do not exist yet, runID aside) and, for each
	// time in since, the cost of its runs created at or after it, by
	// currency in micro-units; calls decide with them; and, when decide
	// returns nil, records runID as admitted. decide's error is returned
	// as is. The caller then creates the run, or calls ForgetAdmission.
	AdmitRun(ctx context.Context, tenant, runID string, since []time.Time, now time.Time,
		decide func(open int, cost []map[string]int64) error) error
	// ForgetAdmission frees the admission of a run that was not created
	// after all (the request was refused).
	ForgetAdmission(ctx context.Context, runID string) error

	// SetFairWeight sets a tenant's share of background work (default 1).
	SetFairWeight(ctx context.Context, tenant string, weight float64) error
	// ClaimInteractive is ClaimRun restricted to interactive (stream) runs:
	// the reserve of workers that keeps chat runs starting while background
	// work fills every other worker.
	ClaimInteractive(ctx context.Context, owner string, ttl time.Duration, now time.Time) (*Run, error)
}

// AdmissionHold is how long an admitted run whose row was never created
// (its process died in between) counts against its tenant's open runs.
const AdmissionHold = time.Minute

// RateWindow is one rate limit a call must fit: at most N calls in any
// window of length Per, counted under Key.
type RateWindow struct {
	Key string
	N   int
	Per time.Duration
}

// RateStore keeps rate-limit windows that every process shares. It is
// optional: a store that implements it lets the tool broker count per-user
// and per-tenant limits across processes.
type RateStore interface {
	// TakeRate checks every window at now and returns the index of the
	// first that is full, or -1. When all have room and charge is set, the
	// call is counted in each, in the same transaction, so that concurrent
	// callers in any process cannot both take a window's last slot.
	TakeRate(ctx context.Context, windows []RateWindow, now time.Time, charge bool) (int, error)
}
