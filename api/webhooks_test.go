package api_test

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/agentplane/agentplane/api"
	"github.com/agentplane/agentplane/store"
)

// receiver is a tenant's webhook endpoint that verifies every request by
// the Standard Webhooks rules (with the scheme's reference library) and
// fails the first failFirst valid attempts with a 500.
type receiver struct {
	t         *testing.T
	mu        sync.Mutex
	verifier  *standardwebhooks.Webhook
	failFirst int
	attempts  int
	refused   int
	accepted  map[string][]byte // webhook-id -> body
	lastReq   *http.Request
	lastBody  []byte
}

func (rc *receiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	rc.mu.Lock()
	defer rc.mu.Unlock()
	if rc.verifier == nil || rc.verifier.Verify(body, r.Header) != nil {
		rc.refused++
		w.WriteHeader(http.StatusUnauthorized)
		return
	}
	rc.attempts++
	rc.lastReq, rc.lastBody = r, body
	if rc.attempts <= rc.failFirst {
		w.WriteHeader(http.StatusInternalServerError)
		return
	}
	id := r.Header.Get("webhook-id")
	if _, dup := rc.accepted[id]; !dup {
		rc.accepted[id] = body
	}
	w.WriteHeader(http.StatusNoContent)
}

// TestWebhooks: an async run's end is POSTed to the tenant's URL, signed by
// the Standard Webhooks scheme; the receiver fails the first two attempts,
// the platform retries with backoff under the same webhook-id, and exactly
// one delivery is accepted; every attempt is recorded; a tampered body is
// refused by the receiver.
func TestWebhooks(t *testing.T) {
	f := newFixture(t, fixtureOptions{apiOptions: func(o *api.Options) {
		o.WebhookBackoff = []time.Duration{100 * time.Millisecond, 200 * time.Millisecond, time.Second}
	}})
	rc := &receiver{t: t, failFirst: 2, accepted: map[string][]byte{}}
	srv := httptest.NewServer(rc)
	defer srv.Close()
	r := f.do(priya, "PUT", "/v1/webhook", map[string]any{"url": srv.URL + "/hooks/agentplane"})
	if r.status != http.StatusOK {
		t.Fatalf("PUT /v1/webhook: %s", r)
	}
	var wh api.Webhook
	r.decode(t, &wh)
	v, err := standardwebhooks.NewWebhook(wh.Secret)
	if err != nil {
		t.Fatal(err)
	}
	rc.mu.Lock()
	rc.verifier = v
	rc.mu.Unlock()
	if g := f.do(priya, "GET", "/v1/webhook", nil); g.status != 200 || bytes.Contains(g.body, []byte(wh.Secret)) {
		t.Fatalf("GET /v1/webhook shows the secret or fails: %s", g)
	}

	id := f.startAsync(priya)
	f.decide(meera, f.waitPending(priya, id, "issue_refund").ID, map[string]any{"decision": "approve"})
	f.decide(meera, f.waitPending(priya, id, "send_email").ID, map[string]any{"decision": "approve"})
	run := f.waitStatus(priya, id, store.StatusCompleted)

	var dl api.Delivery
	deadline := time.Now().Add(15 * time.Second)
	for {
		var list api.DeliveryList
		f.do(priya, "GET", "/v1/webhook/deliveries?run_id="+id, nil).decode(t, &list)
		if len(list.Deliveries) == 1 && list.Deliveries[0].Status != store.DeliveryPending {
			f.do(priya, "GET", "/v1/webhook/deliveries/"+list.Deliveries[0].ID, nil).decode(t, &dl)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("deliveries of run %s: %+v", id, list.Deliveries)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if dl.Status != store.DeliveryDelivered || dl.Attempts != 3 || len(dl.AttemptLog) != 3 {
		t.Fatalf("delivery = %+v", dl)
	}
	for i, a := range dl.AttemptLog {
		want := 500
		if i == 2 {
			want = 204
		}
		if a.N != i+1 || a.StatusCode != want {
			t.Errorf("attempt %d = %+v, want status %d", i+1, a, want)
		}
	}
	// Backoff: the retries waited at least the configured delays.
	if gap := dl.AttemptLog[1].At.Sub(dl.AttemptLog[0].At); gap < 100*time.Millisecond {
		t.Errorf("second attempt %v after the first, want >= 100ms", gap)
	}
	if gap := dl.AttemptLog[2].At.Sub(dl.AttemptLog[1].At); gap < 200*time.Millisecond {
		t.Errorf("third attempt %v after the second, want >= 200ms", gap)
	}

	rc.mu.Lock()
	accepted, attempts, refused := len(rc.accepted), rc.attempts, rc.refused
	body := rc.accepted[dl.ID]
	last, lastBody := rc.lastReq, rc.lastBody
	rc.mu.Unlock()
	if accepted != 1 || attempts != 3 || refused != 0 || body == nil {
		t.Fatalf("receiver: %d accepted, %d valid attempts, %d refused; want 1, 3, 0 (delivery %s)", accepted, attempts, refused, dl.ID)
	}
	var msg api.WebhookMessage
	if err := json.Unmarshal(body, &msg); err != nil {
		t.Fatal(err)
	}
	if msg.Type != "run.completed" || msg.Data.RunID != id || msg.Data.Status != store.StatusCompleted ||
		msg.Data.Usage.Steps != run.Usage.Steps || msg.Data.Output == "" {
		t.Fatalf("message = %+v", msg)
	}

	// A tampered body with the genuine headers is refused.
	tampered := bytes.Replace(lastBody, []byte(`"status":"completed"`), []byte(`"status":"failed"`), 1)
	if bytes.Equal(tampered, lastBody) {
		t.Fatal("tampering changed nothing")
	}
	req, _ := http.NewRequest("POST", srv.URL+"/hooks/agentplane", bytes.NewReader(tampered))
	for _, h := range []string{"webhook-id", "webhook-timestamp", "webhook-signature"} {
		req.Header.Set(h, last.Header.Get(h))
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("tampered body: receiver answered %d", resp.StatusCode)
	}
	// So is the genuine body under a different message id (a replay).
	req, _ = http.NewRequest("POST", srv.URL+"/hooks/agentplane", bytes.NewReader(lastBody))
	for _, h := range []string{"webhook-timestamp", "webhook-signature"} {
		req.Header.Set(h, last.Header.Get(h))
	}
	req.Header.Set("webhook-id", "msg_forged")
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("re-labelled message: receiver answered %d", resp.StatusCode)
	}
	// Our signer agrees with the reference library.
	sig, err := api.SignWebhook(wh.Secret, last.Header.Get("webhook-id"), time.Now(), lastBody)
	if err != nil {
		t.Fatal(err)
	}
	ref, _ := v.Sign(last.Header.Get("webhook-id"), time.Now(), lastBody)
	if sig != ref {
		t.Fatalf("SignWebhook = %s, the reference library %s", sig, ref)
	}
}

// TestWebhookTargets: without AllowPrivateWebhooks, loopback and private
// targets are refused at registration.
func TestWebhookTargets(t *testing.T) {
	f := newFixture(t, fixtureOptions{apiOptions: func(o *api.Options) { o.AllowPrivateWebhooks = false }})
	for _, u := range []string{"http://example.com/h", "https://127.0.0.1/h", "https://localhost/h", "https://10.1.2.3/h",
		"https://[::1]/h", "https://169.254.169.254/latest", "https://user:pw@example.com/h", "ftp://example.com"} {
		if r := f.do(priya, "PUT", "/v1/webhook", map[string]any{"url": u}); r.status != http.StatusBadRequest {
			t.Errorf("PUT %s: %s, want 400", u, r)
		}
	}
	if r := f.do(priya, "PUT", "/v1/webhook", map[string]any{"url": "https://hooks.example-bank.in/agentplane"}); r.status != http.StatusOK {
		t.Errorf("a public https URL: %s", r)
	}
}

// TestClass13WebhookTargets (issue 15, class 13): registration refuses
// every address the egress proxy refuses, in every spelling (the ranges
// the old filter missed: shared address space with Alibaba's metadata,
// Azure's wire server, benchmarking, this-network, NAT64, 6to4, Teredo,
// IPv4-mapped), and names that reach this machine or an address in a
// non-standard form.
func TestClass13WebhookTargets(t *testing.T) {
	f := newFixture(t, fixtureOptions{apiOptions: func(o *api.Options) { o.AllowPrivateWebhooks = false }})
	for _, u := range []string{
		"https://100.100.100.200/latest/meta-data", "https://100.64.0.1/h", "https://168.63.129.16/machine",
		"https://198.18.0.1/h", "https://0.1.2.3/h", "https://192.0.0.192/h", "https://240.0.0.1/h",
		"https://[64:ff9b::a9fe:a9fe]/latest", "https://[64:ff9b::7f00:1]/h", "https://[64:ff9b:1::a00:1]/h",
		"https://[::ffff:169.254.169.254]/latest", "https://[::ffff:100.100.100.200]/h", "https://[2002:a9fe:a9fe::1]/h",
		"https://[2001:0:4136:e378:8000:63bf:3fff:fdd2]/h", "https://[::7f00:1]/h", "https://[fd00:ec2::254]/h",
		"https://[fe80::1%25eth0]/h", "https://localhost./h", "https://api.localhost/h", "https://2130706433/h",
		"https://0x7f.1/h", "https://127.1/h", "https://ex_ample..com/h",
	} {
		if r := f.do(priya, "PUT", "/v1/webhook", map[string]any{"url": u}); r.status != http.StatusBadRequest {
			t.Errorf("PUT %s: %s, want 400", u, r)
		}
	}
	for _, u := range []string{"https://hooks.example-bank.in/agentplane", "https://203.0.113.7/h", "https://[2001:db8::7]/h",
		"https://[64:ff9b::cb00:7107]/h"} {
		if r := f.do(priya, "PUT", "/v1/webhook", map[string]any{"url": u}); r.status != http.StatusOK {
			t.Errorf("PUT %s: %s, want 200", u, r)
		}
	}
}

// countingReceiver answers every request with status and counts them by
// webhook-id.
type countingReceiver struct {
	mu     sync.Mutex
	status int
	ids    []string
}

func (c *countingReceiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	_, _ = io.Copy(io.Discard, r.Body)
	c.mu.Lock()
	c.ids = append(c.ids, r.Header.Get("webhook-id"))
	c.mu.Unlock()
	w.WriteHeader(c.status)
}

func (c *countingReceiver) got() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.ids...)
}

// TestClass13WebhookDialerChecksResolvedAddress: the dialer judges the
// address a name resolves to when it connects, so a name that passed
// registration and now resolves to a refused address (DNS rebinding; here
// localhost, stored as if it had passed) is never connected to.
func TestClass13WebhookDialerChecksResolvedAddress(t *testing.T) {
	f := newFixture(t, fixtureOptions{apiOptions: func(o *api.Options) {
		o.AllowPrivateWebhooks = false
		o.WebhookBackoff = []time.Duration{}
	}})
	rc := &countingReceiver{status: http.StatusNoContent}
	srv := httptest.NewServer(rc)
	defer srv.Close()
	_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
	if err := f.p.Store.PutWebhook(t.Context(), &store.Webhook{Tenant: bankTenant, URL: "http://localhost:" + port + "/h",
		Secret: "whsec_" + base64.StdEncoding.EncodeToString([]byte("0123456789abcdef0123456789abcdef")), UpdatedAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	id := f.startAsync(priya)
	f.waitPending(priya, id, "issue_refund")
	if r := f.do(priya, "POST", "/v1/runs/"+id+":cancel", nil); r.status != http.StatusAccepted {
		t.Fatalf("cancel: %s", r)
	}
	dl := waitDelivery(t, f, id, func(d api.Delivery) bool { return d.Status != store.DeliveryPending })
	if dl.Status != store.DeliveryFailed || len(dl.AttemptLog) != 1 || !strings.Contains(dl.AttemptLog[0].Error, "refused: loopback") {
		t.Fatalf("delivery to a name resolving to loopback: %+v", dl)
	}
	if got := rc.got(); len(got) != 0 {
		t.Fatalf("the loopback receiver got %d requests", len(got))
	}
}

// waitDelivery polls the run's one delivery until ok holds and returns it
// with its attempts.
func waitDelivery(t *testing.T, f *fixture, runID string, ok func(api.Delivery) bool) api.Delivery {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		var list api.DeliveryList
		f.do(priya, "GET", "/v1/webhook/deliveries?run_id="+runID, nil).decode(t, &list)
		if len(list.Deliveries) == 1 && ok(list.Deliveries[0]) {
			var dl api.Delivery
			f.do(priya, "GET", "/v1/webhook/deliveries/"+list.Deliveries[0].ID, nil).decode(t, &dl)
			return dl
		}
		if time.Now().After(deadline) {
			t.Fatalf("deliveries of run %s: %+v", runID, list.Deliveries)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestClass13DeletedWebhookDropsDeliveries: a delivery retrying against a
// webhook that is then deleted is dropped: it is not sent to the old URL,
// nor to a webhook registered afterwards, even once its retry is due.
func TestClass13DeletedWebhookDropsDeliveries(t *testing.T) {
	f := newFixture(t, fixtureOptions{apiOptions: func(o *api.Options) {
		o.WebhookBackoff = []time.Duration{time.Hour, time.Hour}
	}})
	old := &countingReceiver{status: http.StatusInternalServerError}
	oldSrv := httptest.NewServer(old)
	defer oldSrv.Close()
	next := &countingReceiver{status: http.StatusNoContent}
	nextSrv := httptest.NewServer(next)
	defer nextSrv.Close()
	cancelRun := func() string {
		id := f.startAsync(priya)
		f.waitPending(priya, id, "issue_refund")
		if r := f.do(priya, "POST", "/v1/runs/"+id+":cancel", nil); r.status != http.StatusAccepted {
			t.Fatalf("cancel: %s", r)
		}
		return id
	}

	if r := f.do(priya, "PUT", "/v1/webhook", map[string]any{"url": oldSrv.URL + "/h"}); r.status != http.StatusOK {
		t.Fatalf("PUT /v1/webhook: %s", r)
	}
	first := cancelRun()
	dl := waitDelivery(t, f, first, func(d api.Delivery) bool { return d.Attempts == 1 })
	if dl.Status != store.DeliveryPending || dl.NextAttemptAt == nil {
		t.Fatalf("after a 500 the delivery should be retrying: %+v", dl)
	}
	if r := f.do(priya, "DELETE", "/v1/webhook", nil); r.status != http.StatusNoContent {
		t.Fatalf("DELETE /v1/webhook: %s", r)
	}
	if r := f.do(priya, "PUT", "/v1/webhook", map[string]any{"url": nextSrv.URL + "/h"}); r.status != http.StatusOK {
		t.Fatalf("PUT /v1/webhook again: %s", r)
	}
	f.clock.Advance(2 * time.Hour) // the dropped delivery's retry would be due
	// A run that ends now is delivered to the new webhook: once it is, the
	// dispatcher has looked at due deliveries after the clock moved.
	second := cancelRun()
	sent := waitDelivery(t, f, second, func(d api.Delivery) bool { return d.Status == store.DeliveryDelivered })

	dl = waitDelivery(t, f, first, func(api.Delivery) bool { return true })
	if dl.Status != store.DeliveryDropped || dl.Attempts != 1 {
		t.Errorf("the deleted webhook's delivery: %+v, want dropped after 1 attempt", dl)
	}
	if got := old.got(); len(got) != 1 {
		t.Errorf("the deleted webhook's receiver got %d requests, want the 1 before deletion", len(got))
	}
	if got := next.got(); len(got) != 1 || got[0] != sent.ID {
		t.Errorf("the new webhook's receiver got %v, want only %s", got, sent.ID)
	}
}
