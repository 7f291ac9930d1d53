// Package store defines the persistence interfaces of agentplane, one per
// aggregate (runs, events, blobs, agents, tools, signals), and the types they
// exchange. Implementations live in sub-packages (store/sqlite is the embedded
// default); store/storetest holds the conformance suite every implementation
// must pass.
//
// All methods take a context first, are safe for concurrent use, and return
// ErrNotFound, ErrConflict, ErrLeaseLost, ErrCorrupt or ErrUnavailable
// (possibly wrapped) for
// the conditions those names describe.
package store

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/agentplane/agentplane/internal/jsonfields"
)

// Sentinel errors. Test with errors.Is.
var (
	ErrNotFound  = errors.New("not found")
	ErrConflict  = errors.New("conflict")
	ErrLeaseLost = errors.New("lease lost: another worker owns this run")
	// ErrCorrupt means stored content no longer matches the hash it is
	// stored under (damaged or tampered with).
	ErrCorrupt = errors.New("stored content does not match its hash")
	// ErrUnavailable means the database cannot answer now (unreachable,
	// its connections exhausted, locked, or out of disk) and the same call
	// may succeed later. The API answers it with 503 and Retry-After.
	ErrUnavailable = errors.New("store unavailable: try again later")
)

// Run statuses.
const (
	StatusQueued           = "queued"
	StatusRunning          = "running"
	StatusWaiting          = "waiting"
	StatusCompleted        = "completed"
	StatusCompletedPartial = "completed_partial"
	StatusFailed           = "failed"
	StatusCancelled        = "cancelled"
)

// Terminal reports whether a run in status s will never run again.
func Terminal(s string) bool {
	switch s {
	case StatusCompleted, StatusCompletedPartial, StatusFailed, StatusCancelled:
		return true
	}
	return false
}

// Run is one execution of a pinned agent version on behalf of a principal.
type Run struct {
	ID           string
	Tenant       string
	User         string
	Agent        string
	AgentVersion int
	Task         string
	Mode         string // "stream" or "async"
	Status       string
	CreatedAt    time.Time
	UpdatedAt    time.Time
	// WakeAt, when set on a waiting run, is when its timer fires.
	WakeAt time.Time
	// LastSeq is the sequence number of the run's newest event.
	LastSeq int64
	// Summary counters, kept current by the engine at each append.
	Steps        int
	InputTokens  int64
	OutputTokens int64
	CostMicros   int64
	Currency     string
	CostUnknown  bool
	// Result is the run's final text or failure reason.
	Result string
	// ParentRunID links a replay to the run it replays.
	ParentRunID string
	// Bindings are argument values this run may act on (for example
	// customer_id), on top of its user's own; set at creation.
	Bindings map[string]string
	// Lease state.
	LeaseOwner   string
	LeaseExpires time.Time
	LeaseEpoch   int64
}

// RunFilter selects runs for listing. Zero fields do not filter.
type RunFilter struct {
	Tenant string
	Agent  string
	Status string
	Limit  int
	// User and AgentVersion (0: any) narrow the list further; Offset skips
	// that many matching runs (pages of the run viewer); Newest lists the
	// newest first instead of the oldest.
	User         string
	AgentVersion int
	Offset       int
	Newest       bool
	// PromptHash selects the runs that sent a prompt with this sha256
	// ("sha256:HEX" as recorded, or the bare lower-case HEX): the
	// prompt_hash of any of their EventModelCall events. A store indexes
	// it when such an event is appended. A value that is not a sha256
	// matches no run.
	PromptHash string
}

// EventModelCall is the type of the event recording a model call (the
// trace package defines its payload); its payload's "prompt_hash" field is
// what RunFilter.PromptHash matches.
const EventModelCall = "model_call"

// PromptHashHex returns the 64 lower-case hex digits of a prompt hash
// written as recorded ("sha256:HEX") or bare, and whether h is one.
func PromptHashHex(h string) (string, bool) {
	if len(h) == 64+len("sha256:") && h[:7] == "sha256:" {
		h = h[7:]
	}
	if len(h) != 64 {
		return "", false
	}
	for i := 0; i < len(h); i++ {
		if c := h[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return "", false
		}
	}
	return h, true
}

// PromptHashOf returns the hex of the prompt hash ev records when it is an
// EventModelCall, or "" for any other event or a value that is not a
// sha256: what a store indexes for RunFilter.PromptHash.
func PromptHashOf(ev *Event) string {
	if ev.Type != EventModelCall {
		return ""
	}
	// Every model call is appended with its payload: read the one member
	// without decoding the response (as json.Unmarshal into a struct of
	// that field would read it).
	var hash string
	if jsonfields.Decode(ev.Payload, jsonfields.Field{Name: "prompt_hash", Into: &hash}) != nil {
		return ""
	}
	h, _ := PromptHashHex(hash)
	return h
}

// RunUpdate changes a run's mutable fields together with an append. Nil
// pointers leave a field unchanged.
type RunUpdate struct {
	Status       *string
	Steps        *int
	InputTokens  *int64
	OutputTokens *int64
	CostMicros   *int64
	Currency     *string
	CostUnknown  *bool
	Result       *string
	WakeAt       *time.Time
}

// Event is one record of a run's append-only log. Seq starts at 1 and is
// contiguous. Hash = ChainHash(PrevHash, event); PrevHash of seq 1 is all zero.
type Event struct {
	RunID    string
	Seq      int64
	Type     string
	Step     int
	At       time.Time // stored with microsecond precision
	Payload  []byte    // JSON
	PrevHash [32]byte
	Hash     [32]byte
}

// ChainHash computes the hash of ev chained to prev. Only the run id, sequence,
// type, step, time and payload are covered; the stored hashes themselves are not.
func ChainHash(prev [32]byte, ev *Event) [32]byte {
	h := sha256.New()
	h.Write(prev[:])
	var b [8]byte
	writeStr := func(s string) {
		binary.BigEndian.PutUint64(b[:], uint64(len(s)))
		h.Write(b[:])
		h.Write([]byte(s))
	}
	writeStr(ev.RunID)
	binary.BigEndian.PutUint64(b[:], uint64(ev.Seq))
	h.Write(b[:])
	writeStr(ev.Type)
	binary.BigEndian.PutUint64(b[:], uint64(ev.Step))
	h.Write(b[:])
	binary.BigEndian.PutUint64(b[:], uint64(ev.At.UnixMicro()))
	h.Write(b[:])
	binary.BigEndian.PutUint64(b[:], uint64(len(ev.Payload)))
	h.Write(b[:])
	h.Write(ev.Payload)
	var out [32]byte
	copy(out[:], h.Sum(nil))
	return out
}

// AppendRequest appends events to one run's log under the caller's lease.
type AppendRequest struct {
	RunID string
	// Epoch is the lease epoch returned by LeaseStore.ClaimRun (0 for a run
	// never leased); an append under a stale epoch fails with ErrLeaseLost
	// and writes nothing.
	Epoch  int64
	Events []Event
	// Durable makes Append return only after the events are committed to
	// stable storage. Non-durable appends return once queued; they are
	// committed in order with the next commit, and a failure to commit them is
	// reported by the next Append or Flush for the same run.
	Durable bool
	Update  *RunUpdate
	// ConsumeSignals marks these pending signals consumed in the same
	// transaction, so a signal is recorded in the log exactly once.
	ConsumeSignals []int64
}

// RunStore persists runs.
type RunStore interface {
	CreateRun(ctx context.Context, r *Run) error
	GetRun(ctx context.Context, id string) (*Run, error)
	ListRuns(ctx context.Context, f RunFilter) ([]*Run, error)
}

// LeaseStore holds the leases the embedded engine (package engine) runs
// runs under: an owner, an expiry and an epoch that grows with every claim
// and fences appends (AppendRequest.Epoch) of a worker that lost its lease.
// Only the embedded engine needs it; another engine keeps its own leases
// and reads and writes runs through RunStore and EventStore.
type LeaseStore interface {
	// ClaimRun leases one runnable run (queued, running with an expired lease,
	// or waiting whose WakeAt has passed or that has a pending signal) to owner
	// for ttl, preferring the oldest. It returns ErrNotFound when none is
	// runnable. The returned run carries the new LeaseEpoch. A lease expiring
	// farther ahead of now than the TTL it was granted or renewed for (the
	// clock stepped back since) is first bounded to now plus that TTL, so a
	// dead claimer's run is taken over one TTL later whatever the clock did;
	// ClaimRunByID does the same.
	ClaimRun(ctx context.Context, owner string, ttl time.Duration, now time.Time) (*Run, error)
	// ClaimRunByID leases a specific run if it is runnable.
	ClaimRunByID(ctx context.Context, id, owner string, ttl time.Duration, now time.Time) (*Run, error)
	// RenewLease extends the lease; ErrLeaseLost if the epoch is stale.
	RenewLease(ctx context.Context, id string, epoch int64, ttl time.Duration, now time.Time) error
	// ReleaseRun ends the lease, setting status (and WakeAt for waiting runs).
	ReleaseRun(ctx context.Context, id string, epoch int64, u RunUpdate) error
}

// EventStore persists run event logs.
type EventStore interface {
	Append(ctx context.Context, req AppendRequest) error
	// Flush waits until every queued append of the run is committed.
	Flush(ctx context.Context, runID string) error
	// Events returns events with Seq > after, in order, at most limit (0 = all).
	Events(ctx context.Context, runID string, after int64, limit int) ([]Event, error)
}

// CommitFeed is implemented by an event store that can hand each append's
// events, once committed, to the process that appended them (the SQLite
// store's single writer does), so that followers such as the telemetry
// tail need not read back what they were just given. It is optional: a
// follower finds it by type assertion and reads the log otherwise.
type CommitFeed interface {
	// FeedCommits calls fn with the events of every append of this
	// process that committed, after the commit and before the append's
	// Durable caller returns, in commit order (per run, in seq order), from
	// the committing goroutine: fn must not block or call back into the
	// store, and must not change the events. The returned stop ends the
	// calls.
	FeedCommits(fn func(runID string, evs []Event)) (stop func())
	// Flush waits until every queued append of the run ("" = of every
	// run) is committed, and so handed to fn.
	Flush(ctx context.Context, runID string) error
}

// BlobStore is one tenant's content-addressed store of payloads keyed by
// sha256. It is obtained from Blobs.Blobs(tenant) and sees only what that
// tenant put: a hash another tenant stored is, to it, a hash nobody stored.
type BlobStore interface {
	// PutBlob stores data durably and returns its sha256. It writes the
	// bytes even when a blob of that hash exists, so a damaged copy is
	// replaced by the next put of the right content, and a put does the same
	// work whether or not anyone stored the content before. Data larger
	// than MaxBlobSize is refused.
	PutBlob(ctx context.Context, data []byte) ([32]byte, error)
	// GetBlob returns the blob's bytes after checking they hash to sum:
	// bytes that do not are never returned (an error wrapping ErrCorrupt).
	// A hash the tenant never put is ErrNotFound, whoever else put it.
	GetBlob(ctx context.Context, sum [32]byte) ([]byte, error)
	// BlobSize reports the stored size, or ErrNotFound as GetBlob does.
	BlobSize(ctx context.Context, sum [32]byte) (int64, error)
}

// Blobs keeps every tenant's blobs, each tenant's apart from the others',
// so that no tenant can read another's content, or learn that it exists,
// by its hash. Which runs of a tenant may read one of its blobs is decided
// above the store, from the run's log (trace.BlobRefs).
//
// Blobs is chosen independently of the rest of the Store (the blob folder
// of the data directory, or an S3-compatible bucket) and is safe for
// concurrent use.
type Blobs interface {
	// Blobs returns tenant's blob store. A tenant name that is not valid
	// (CheckTenant) gives a store whose every call fails with an error
	// wrapping ErrInvalidTenant.
	Blobs(tenant string) BlobStore
}

// RefuseBlobs returns a BlobStore whose every call fails with err: what
// Blobs returns for a tenant name it refuses.
func RefuseBlobs(err error) BlobStore { return refusedBlobs{err} }

type refusedBlobs struct{ err error }

func (r refusedBlobs) PutBlob(context.Context, []byte) ([32]byte, error) { return [32]byte{}, r.err }
func (r refusedBlobs) GetBlob(context.Context, [32]byte) ([]byte, error) { return nil, r.err }
func (r refusedBlobs) BlobSize(context.Context, [32]byte) (int64, error) { return 0, r.err }

// MaxBlobSize bounds one blob: puts of more are refused and reads never
// take more than this from a back end.
const MaxBlobSize = 64 << 20

// ErrInvalidTenant is wrapped by every call on the blob store of a tenant
// name that CheckTenant refuses.
var ErrInvalidTenant = errors.New("invalid tenant name")

// validTenant matches ^[A-Za-z0-9][A-Za-z0-9._@+-]{0,127}$ (every blob
// view checks it, so it is not a regular expression).
func validTenant(t string) bool {
	if len(t) == 0 || len(t) > 128 {
		return false
	}
	for i := 0; i < len(t); i++ {
		c := t[i]
		switch {
		case c >= 'A' && c <= 'Z', c >= 'a' && c <= 'z', c >= '0' && c <= '9':
		case i > 0 && (c == '.' || c == '_' || c == '@' || c == '+' || c == '-'):
		default:
			return false
		}
	}
	return true
}

// CheckTenant refuses a tenant name that could not have been created
// (package authz allows letters, digits and . _ @ + -, starting with a
// letter or digit, at most 128), so that a name never climbs out of its own
// folder or key prefix.
func CheckTenant(tenant string) error {
	if !validTenant(tenant) {
		return fmt.Errorf("%w %q: want letters, digits and . _ @ + -, starting with a letter or digit, at most 128", ErrInvalidTenant, tenant)
	}
	return nil
}

// AgentVersion is one immutable agent definition.
type AgentVersion struct {
	Name      string
	Version   int
	Spec      []byte // canonical JSON of the definition
	SpecHash  [32]byte
	CreatedAt time.Time
	// RetiredAt is when the version was retired (zero while it is live).
	// A retired version starts no new run; runs already pinned to it
	// finish on it.
	RetiredAt time.Time
}

// Alias points a name such as prod at a version, optionally sending a
// deterministic share of new runs to a canary version.
type Alias struct {
	Agent         string
	Alias         string
	Version       int
	CanaryVersion int
	CanaryPercent int
	UpdatedAt     time.Time
}

// AgentStore persists agent versions and aliases.
type AgentStore interface {
	// PutAgentVersion stores v. Storing identical content again is a no-op
	// (created=false); different content under an existing version is
	// ErrConflict.
	PutAgentVersion(ctx context.Context, v *AgentVersion) (created bool, err error)
	GetAgentVersion(ctx context.Context, name string, version int) (*AgentVersion, error)
	ListAgentVersions(ctx context.Context, name string) ([]*AgentVersion, error) // name "" = all
	// RetireAgentVersion marks a stored version retired at at. Retiring a
	// retired version again keeps the first time; a missing version is
	// ErrNotFound. Retirement cannot be undone.
	RetireAgentVersion(ctx context.Context, name string, version int, at time.Time) error
	SetAlias(ctx context.Context, a *Alias) error
	GetAlias(ctx context.Context, agent, alias string) (*Alias, error)
	ListAliases(ctx context.Context, agent string) ([]*Alias, error)
}

// ToolRecord is a stored tool manifest, content-addressed.
type ToolRecord struct {
	Name      string
	Manifest  []byte // canonical JSON
	Hash      [32]byte
	CreatedAt time.Time
}

// ToolStore persists tool manifests; the newest per name is current.
type ToolStore interface {
	PutTool(ctx context.Context, t *ToolRecord) error
	GetTool(ctx context.Context, name string) (*ToolRecord, error)
	GetToolByHash(ctx context.Context, sum [32]byte) (*ToolRecord, error)
	ListTools(ctx context.Context) ([]*ToolRecord, error)
}

// Signal is an external input to a run (a user message, a cancel, an approval
// decision). The engine records a signal in the run's log when the loop
// consumes it, in the order consumed.
type Signal struct {
	ID      int64
	RunID   string
	Kind    string
	Payload []byte
	// Key, when set, makes the signal unique for its run: a second signal
	// to the same run with the same key is refused with ErrConflict,
	// whether or not the first was consumed. A decision on an approval is
	// sent keyed by the approval, so the database lets the first decision
	// win however many processes receive one.
	Key       string
	CreatedAt time.Time
	Consumed  bool
}

// SignalStore persists pending signals.
type SignalStore interface {
	// SendSignal stores a signal and makes a waiting run runnable. A
	// signal whose Key the run already has is ErrConflict.
	SendSignal(ctx context.Context, s *Signal) error
	PendingSignals(ctx context.Context, runID string) ([]*Signal, error)
	MarkSignalConsumed(ctx context.Context, id int64) error
}

// Store is everything agentplane persists.
type Store interface {
	RunStore
	LeaseStore
	EventStore
	Blobs
	AgentStore
	ToolStore
	SignalStore
	Close() error
}

// Principal is a user of a tenant with the permissions the platform knows
// for them: what an agent acting on their behalf may do (see package authz).
type Principal struct {
	Tenant string
	User   string
	// Scopes are resource:action pairs such as refunds:write, sorted.
	Scopes []string
	// Groups name the groups the user belongs to (approvers, for
	// example), sorted.
	Groups []string
	// Bindings restrict the calls made on the user's behalf: for each
	// name, a tool argument of that name must have exactly that value
	// (customer_id=c_88213 keeps a customer to their own account).
	Bindings  map[string]string
	UpdatedAt time.Time
}

// PrincipalStore persists principals. It is optional: a Store that also
// implements it is the embedded default directory of users.
type PrincipalStore interface {
	// PutPrincipal creates or replaces the principal (tenant, user).
	PutPrincipal(ctx context.Context, p *Principal) error
	// GetPrincipal returns the principal or ErrNotFound.
	GetPrincipal(ctx context.Context, tenant, user string) (*Principal, error)
	// ListPrincipals lists the principals of tenant ("" = all), ordered
	// by tenant and user.
	ListPrincipals(ctx context.Context, tenant string) ([]*Principal, error)
	// DeletePrincipal removes the principal or returns ErrNotFound.
	DeletePrincipal(ctx context.Context, tenant, user string) error
}

// TenantSettings is a tenant's own configuration of how the platform
// treats its runs. The zero value is the default.
type TenantSettings struct {
	Tenant string
	// LinkDomains are the domains (and their subdomains) that model text
	// shown to this tenant's users may link to; links elsewhere are shown
	// inert. Lower-case ASCII, sorted, no repeats.
	LinkDomains []string
	// RequireAlias makes callers without the admin scope start runs only
	// through an alias (name@prod, or a bare name while prod is set),
	// never by version number or latest.
	RequireAlias bool
	UpdatedAt    time.Time
}

// TenantStore persists tenant settings. It is optional: a Store that
// also implements it lets tenants configure themselves.
type TenantStore interface {
	// GetTenantSettings returns the tenant's settings, or ErrNotFound when
	// none were ever stored (the caller then uses the zero value).
	GetTenantSettings(ctx context.Context, tenant string) (*TenantSettings, error)
	// PutTenantSettings creates or replaces the tenant's settings.
	PutTenantSettings(ctx context.Context, s *TenantSettings) error
}

// Connector is a tenant's registered MCP server (package mcphost gives the
// bytes their meaning). Connector names are unique across the deployment,
// as tool names are: agent definitions grant tools by connector name.
type Connector struct {
	Tenant string
	Name   string
	// Spec is the connector's definition as canonical JSON: transport,
	// endpoint or command and image, auth method, network allowlist.
	Spec []byte
	// Overlays is the manifest overlay file of its tools, as written.
	Overlays []byte
	// Snapshot is the reviewed snapshot of the server's tools (canonical
	// JSON) and SnapshotHash its hex sha256; both empty until the first
	// review. ReviewedBy and ReviewedAt say who approved it and when.
	Snapshot     []byte
	SnapshotHash string
	ReviewedBy   string
	ReviewedAt   time.Time
	CreatedAt    time.Time
	UpdatedAt    time.Time
}

// ConnectorStore persists connectors. It is optional: a Store that also
// implements it can host MCP connectors.
type ConnectorStore interface {
	// PutConnector creates or replaces the connector (tenant, name). A
	// name another tenant holds is ErrConflict.
	PutConnector(ctx context.Context, c *Connector) error
	// GetConnector returns the tenant's connector, or ErrNotFound (also
	// when another tenant holds the name).
	GetConnector(ctx context.Context, tenant, name string) (*Connector, error)
	// ListConnectors lists the connectors of tenant ("" = all), ordered by
	// name.
	ListConnectors(ctx context.Context, tenant string) ([]*Connector, error)
	// DeleteConnector removes the connector or returns ErrNotFound.
	DeleteConnector(ctx context.Context, tenant, name string) error
}

// Change says that a run's log or status changed: events up to Seq were
// committed (Seq 0: only its status changed). The zero Change (RunID "")
// means changes may have been missed (the feed reconnected): a listener
// re-reads whatever it follows.
type Change struct {
	RunID string
	Seq   int64
}

// ChangeFeed is implemented by a store that tells every process of the
// appends and releases committed by any process (PostgreSQL's
// LISTEN/NOTIFY), so streams wake without polling. It is optional: a
// store without it (SQLite) is polled, and the process's own workers wake
// streams directly.
type ChangeFeed interface {
	// Watch calls fn for each change committed after it started, from
	// one goroutine, until ctx ends; it then returns nil. A change may be
	// announced more than once, or not at all while the feed is
	// reconnecting: fn then gets the zero Change once the feed is back (and
	// once at the start), and a listener falls back to polling until then.
	Watch(ctx context.Context, fn func(Change)) error
}
