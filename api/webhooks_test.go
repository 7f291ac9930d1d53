package api_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
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
