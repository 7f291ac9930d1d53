package api

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/agentplane/agentplane/internal/addrpolicy"
	"github.com/agentplane/agentplane/store"
)

// Webhooks follow the Standard Webhooks scheme (standardwebhooks.com): each
// POST carries webhook-id (the delivery's id, the same on every retry),
// webhook-timestamp (Unix seconds) and webhook-signature ("v1," + base64 of
// HMAC-SHA256 over "id.timestamp.body" keyed by the secret's bytes). The
// body is {"type", "timestamp", "data"}.

// SignWebhook returns the webhook-signature header value for a message.
func SignWebhook(secret, msgID string, ts time.Time, body []byte) (string, error) {
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, "whsec_"))
	if err != nil || len(key) == 0 {
		return "", errors.New("webhook secret: want whsec_ followed by base64")
	}
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(msgID + "." + strconv.FormatInt(ts.Unix(), 10) + "."))
	mac.Write(body)
	return "v1," + base64.StdEncoding.EncodeToString(mac.Sum(nil)), nil
}

func newWebhookSecret() string {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	return "whsec_" + base64.StdEncoding.EncodeToString(b)
}

// webhookPolicy is the address policy webhook delivery follows: the
// platform's one policy (internal/addrpolicy, shared with the sandbox
// egress proxy), with loopback and private networks opened by
// AllowPrivateWebhooks. Metadata, link-local, multicast, reserved and
// embedded forms stay refused either way.
func webhookPolicy(allowPrivate bool) *addrpolicy.Policy {
	if allowPrivate {
		return &addrpolicy.Policy{Loopback: true,
			Internal: []netip.Prefix{netip.MustParsePrefix("0.0.0.0/0"), netip.MustParsePrefix("::/0")}}
	}
	return &addrpolicy.Policy{}
}

// checkWebhookURL refuses, at registration, a URL that cannot be a
// tenant's public endpoint. A name is not resolved here (its answer may
// change): the dialer checks every resolved address when it connects.
func (s *Server) checkWebhookURL(raw string) error {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" || (u.Scheme != "https" && u.Scheme != "http") || u.User != nil || u.Fragment != "" {
		return badRequest("url must be an absolute http(s) URL without credentials or fragment")
	}
	if len(raw) > 2048 {
		return badRequest("url is longer than 2048 characters")
	}
	if !s.o.AllowPrivateWebhooks && u.Scheme != "https" {
		return badRequest("url must use https")
	}
	host := strings.ToLower(u.Hostname())
	if ip, err := netip.ParseAddr(host); err == nil {
		if err := s.hooks.policy.Check(ip); err != nil {
			var re *addrpolicy.RefusedError
			errors.As(err, &re)
			return badRequest("url must not point at a %s address", re.Class)
		}
		return nil
	}
	host = strings.TrimSuffix(host, ".")
	if !s.o.AllowPrivateWebhooks && (host == "localhost" || strings.HasSuffix(host, ".localhost")) {
		return badRequest("url must not point at this machine")
	}
	labels := strings.Split(host, ".")
	for _, l := range labels {
		if l == "" || len(l) > 63 || strings.Trim(l, "abcdefghijklmnopqrstuvwxyz0123456789-_") != "" {
			return badRequest("url host %q is not a DNS name or an IP address", host)
		}
	}
	// A name whose last label is a number is an IPv4 address in a form
	// some resolvers accept (2130706433, 0x7f.1, 127.1): refuse it rather
	// than guess what it reaches.
	if last := labels[len(labels)-1]; strings.Trim(last, "0123456789") == "" || strings.HasPrefix(last, "0x") {
		return badRequest("url host %q is an IP address in a non-standard form", host)
	}
	return nil
}

func handlePutWebhook(s *Server, w http.ResponseWriter, r *http.Request, p *Principal, _ map[string]string) {
	var req PutWebhookRequest
	if err := decodeBody(r, &req); err != nil {
		s.fail(w, r, err)
		return
	}
	if err := s.checkWebhookURL(req.URL); err != nil {
		s.fail(w, r, err)
		return
	}
	secret := ""
	if old, err := s.st.GetWebhook(r.Context(), p.Tenant); err == nil && !req.RotateSecret {
		secret = old.Secret
	} else if err != nil && !errors.Is(err, store.ErrNotFound) {
		s.fail(w, r, err)
		return
	}
	if secret == "" {
		secret = newWebhookSecret()
	}
	wh := &store.Webhook{Tenant: p.Tenant, URL: req.URL, Secret: secret, UpdatedAt: s.clock().UTC()}
	if err := s.st.PutWebhook(r.Context(), wh); err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, Webhook{URL: wh.URL, Secret: wh.Secret, UpdatedAt: wh.UpdatedAt})
}

func handleGetWebhook(s *Server, w http.ResponseWriter, r *http.Request, p *Principal, _ map[string]string) {
	wh, err := s.st.GetWebhook(r.Context(), p.Tenant)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, Webhook{URL: wh.URL, UpdatedAt: wh.UpdatedAt})
}

// handleDeleteWebhook removes the endpoint and, in the same transaction,
// drops the tenant's pending deliveries (queued or retrying), then stops
// this process's attempts in flight; a later registration never receives
// them.
func handleDeleteWebhook(s *Server, w http.ResponseWriter, r *http.Request, p *Principal, _ map[string]string) {
	if err := s.st.DeleteWebhook(r.Context(), p.Tenant, s.clock().UTC()); err != nil {
		s.fail(w, r, err)
		return
	}
	s.hooks.stopTenant(p.Tenant)
	w.WriteHeader(http.StatusNoContent)
}

func toDelivery(d *store.Delivery) Delivery {
	out := Delivery{ID: d.ID, RunID: d.RunID, Type: d.EventType, URL: d.URL, Status: d.Status, Attempts: d.Attempts,
		CreatedAt: d.CreatedAt, LastError: d.LastError}
	if d.Status == store.DeliveryPending {
		t := d.NextAttemptAt
		out.NextAttemptAt = &t
	}
	return out
}

func handleListDeliveries(s *Server, w http.ResponseWriter, r *http.Request, p *Principal, _ map[string]string) {
	limit, err := intParam(r.URL.Query().Get("limit"), 100, 1000)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	ds, err := s.st.ListDeliveries(r.Context(), p.Tenant, r.URL.Query().Get("run_id"), limit)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	out := DeliveryList{Deliveries: make([]Delivery, 0, len(ds))}
	for _, d := range ds {
		out.Deliveries = append(out.Deliveries, toDelivery(d))
	}
	writeJSON(w, http.StatusOK, out)
}

func handleGetDelivery(s *Server, w http.ResponseWriter, r *http.Request, p *Principal, params map[string]string) {
	d, err := s.st.GetDelivery(r.Context(), params["delivery_id"])
	if err != nil || d.Tenant != p.Tenant {
		s.fail(w, r, notFound("delivery"))
		return
	}
	as, err := s.st.ListAttempts(r.Context(), d.ID)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	out := toDelivery(d)
	out.Payload = json.RawMessage(d.Payload)
	for _, a := range as {
		out.AttemptLog = append(out.AttemptLog, DeliveryAttempt{N: a.N, At: a.At, StatusCode: a.StatusCode, Error: a.Error, DurationMS: a.DurationMS})
	}
	writeJSON(w, http.StatusOK, out)
}

// dispatcher turns ended runs into deliveries (the outbox) and delivers
// them with retries. Deliveries live in the store, so a restart resumes
// them; each attempt is claimed in the store first (ClaimDeliveries), so
// of many processes' dispatchers one makes it; an attempt cut short by a
// crash is made again under the same webhook-id, which receivers use to
// drop repeats.
type dispatcher struct {
	s      *Server
	client *http.Client
	policy *addrpolicy.Policy
	poll   time.Duration

	mu       sync.Mutex
	inFlight map[string]*inFlight // by delivery id
	sem      chan struct{}
}

// inFlight is an attempt this process is making.
type inFlight struct {
	tenant string
	cancel context.CancelFunc
}

func newDispatcher(s *Server) *dispatcher {
	policy := webhookPolicy(s.o.AllowPrivateWebhooks)
	// Every address the dialer connects to, after resolution, passes the
	// policy: a name that resolved to a public address at registration and
	// to a refused one now (DNS rebinding) is refused when dialled.
	dialer := &net.Dialer{Timeout: 5 * time.Second, Control: policy.Control}
	// No proxy: the dialer must see the target's own address.
	tr := &http.Transport{Proxy: nil, DialContext: dialer.DialContext, TLSHandshakeTimeout: 5 * time.Second,
		MaxIdleConnsPerHost: 4, IdleConnTimeout: 30 * time.Second}
	return &dispatcher{s: s, policy: policy, poll: 200 * time.Millisecond, inFlight: map[string]*inFlight{},
		sem: make(chan struct{}, 8),
		client: &http.Client{Transport: tr, Timeout: s.o.WebhookTimeout,
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
}

// lease is how long a claimed delivery is this process's to attempt: the
// attempt's reads, its POST and its record fit well within it. An attempt
// that never recorded (the process died, or stopped mid-attempt) is
// claimed again by any process once it has passed.
func (d *dispatcher) lease() time.Duration { return 2*d.s.o.WebhookTimeout + 10*time.Second }

// stopTenant cancels this process's attempts in flight for tenant.
func (d *dispatcher) stopTenant(tenant string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, f := range d.inFlight {
		if f.tenant == tenant {
			f.cancel()
		}
	}
}

func (d *dispatcher) run(ctx context.Context) {
	t := time.NewTicker(d.poll)
	defer t.Stop()
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if err := d.enqueue(ctx); err != nil && ctx.Err() == nil {
			d.s.log.Error("webhook outbox", "err", err)
		}
		due, err := d.s.st.ClaimDeliveries(ctx, d.s.clock(), d.lease(), 64)
		if err != nil {
			if ctx.Err() == nil {
				d.s.log.Error("webhook deliveries", "err", err)
			}
			continue
		}
		for _, dl := range due {
			actx, cancel := context.WithCancel(ctx)
			d.mu.Lock()
			_, busy := d.inFlight[dl.ID]
			if !busy {
				d.inFlight[dl.ID] = &inFlight{tenant: dl.Tenant, cancel: cancel}
			}
			d.mu.Unlock()
			if busy {
				cancel()
				continue
			}
			select {
			case d.sem <- struct{}{}:
			case <-ctx.Done():
				cancel()
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer func() { <-d.sem }()
				d.attempt(ctx, actx, dl)
				d.mu.Lock()
				delete(d.inFlight, dl.ID)
				d.mu.Unlock()
				cancel()
			}()
		}
	}
}

// enqueue hands ended runs to the outbox: a delivery for tenants with a
// webhook, a mark for the others.
func (d *dispatcher) enqueue(ctx context.Context) error {
	runs, err := d.s.st.RunsToNotify(ctx, 100)
	if err != nil {
		return err
	}
	for _, run := range runs {
		var dl *store.Delivery
		wh, err := d.s.st.GetWebhook(ctx, run.Tenant)
		switch {
		case errors.Is(err, store.ErrNotFound):
		case err != nil:
			return err
		default:
			now := d.s.clock().UTC()
			msg := WebhookMessage{Type: "run." + run.Status, Timestamp: run.UpdatedAt, Data: WebhookData{
				RunID: run.ID, Agent: run.Agent, AgentVersion: run.AgentVersion, User: run.User, Status: run.Status,
				Output: run.Result, Usage: toRun(run).Usage, LastEventID: run.LastSeq}}
			body, err := json.Marshal(msg)
			if err != nil {
				return err
			}
			dl = &store.Delivery{ID: "msg_" + randomToken(12), Tenant: run.Tenant, RunID: run.ID, EventType: msg.Type,
				URL: wh.URL, Payload: body, Status: store.DeliveryPending, NextAttemptAt: now, CreatedAt: now, UpdatedAt: now}
		}
		if err := d.s.st.MarkNotified(ctx, run.ID, dl); err != nil && !errors.Is(err, store.ErrConflict) {
			return err
		}
	}
	return nil
}

// attempt POSTs a delivery once and records the attempt and what follows:
// delivered on a 2xx, otherwise a retry after the next backoff or, when
// the retries are used up, failed. ctx is the dispatcher's; actx is this
// attempt's, cancelled when the tenant's webhook is deleted.
func (d *dispatcher) attempt(ctx, actx context.Context, dl *store.Delivery) {
	n := dl.Attempts + 1
	start := d.s.clock()
	code, errText := 0, ""
	wh, err := d.s.st.GetWebhook(actx, dl.Tenant)
	switch {
	case errors.Is(err, store.ErrNotFound):
		errText = "the tenant's webhook was removed"
	case err != nil:
		return // the store is unwell, or the webhook was deleted; see next round
	}
	if wh != nil {
		// The delivery is read again after the webhook: a deletion that
		// committed since ClaimDeliveries (and a registration after it) has
		// dropped it, and a dropped delivery is never sent.
		cur, err := d.s.st.GetDelivery(actx, dl.ID)
		if err != nil || cur.Status != store.DeliveryPending {
			return
		}
		dl.URL = wh.URL
		code, errText = d.post(actx, wh, dl)
	}
	if ctx.Err() != nil {
		return // shutting down: the attempt did not finish
	}
	if actx.Err() != nil {
		errText = "stopped: the tenant's webhook was deleted"
	}
	now := d.s.clock()
	a := &store.DeliveryAttempt{DeliveryID: dl.ID, N: n, At: start.UTC(), StatusCode: code, Error: errText,
		DurationMS: now.Sub(start).Milliseconds()}
	dl.Attempts, dl.UpdatedAt, dl.LastError = n, now.UTC(), errText
	switch {
	case errText == "" && code >= 200 && code < 300:
		dl.Status = store.DeliveryDelivered
	case wh == nil:
		dl.Status = store.DeliveryDropped
	case n > len(d.s.o.WebhookBackoff):
		dl.Status = store.DeliveryFailed
	default:
		dl.NextAttemptAt = now.Add(d.s.o.WebhookBackoff[n-1]).UTC()
	}
	if err := d.s.st.RecordAttempt(context.WithoutCancel(ctx), a, dl); err != nil {
		d.s.log.Error("record webhook attempt", "delivery", dl.ID, "err", err)
	}
}

func (d *dispatcher) post(ctx context.Context, wh *store.Webhook, dl *store.Delivery) (int, string) {
	// The signature's timestamp is the wall clock: receivers compare it
	// with theirs.
	ts := time.Now()
	sig, err := SignWebhook(wh.Secret, dl.ID, ts, dl.Payload)
	if err != nil {
		return 0, err.Error()
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, wh.URL, bytes.NewReader(dl.Payload))
	if err != nil {
		return 0, err.Error()
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "agentplane-webhooks/1")
	req.Header.Set("webhook-id", dl.ID)
	req.Header.Set("webhook-timestamp", strconv.FormatInt(ts.Unix(), 10))
	req.Header.Set("webhook-signature", sig)
	resp, err := d.client.Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode < 200 || resp.StatusCode >= 300 {
		return resp.StatusCode, "HTTP " + resp.Status
	}
	return resp.StatusCode, ""
}
