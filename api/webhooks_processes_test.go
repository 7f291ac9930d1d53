package api_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/agentplane/agentplane/api"
	"github.com/agentplane/agentplane/api/apitest"
	"github.com/agentplane/agentplane/internal/platform"
	"github.com/agentplane/agentplane/store"
	"github.com/agentplane/agentplane/store/postgres/pgtest"
)

// TestWebhooksOneProcessDelivers: two API processes on one store, each
// with its dispatcher polling the same outbox. The loopback receiver
// fails each message's first attempt and accepts the second: every
// message must arrive exactly twice (one attempt each time, claimed by
// one dispatcher), and its record shows those two attempts.
func TestWebhooksOneProcessDelivers(t *testing.T) {
	t.Run("sqlite", func(t *testing.T) { testWebhooksOneProcess(t, fixtureOptions{}) })
	t.Run("postgres", func(t *testing.T) {
		dsn := pgtest.DSN(t)
		testWebhooksOneProcess(t, fixtureOptions{platform: func(o *platform.Options) { o.Store = dsn }})
	})
}

// flakyReceiver answers a message's first POST 500 and later ones 204,
// counting POSTs by webhook-id.
type flakyReceiver struct {
	mu    sync.Mutex
	posts map[string]int
}

func (f *flakyReceiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	_, _ = io.Copy(io.Discard, r.Body)
	f.mu.Lock()
	id := r.Header.Get("webhook-id")
	f.posts[id]++
	n := f.posts[id]
	f.mu.Unlock()
	// A slow receiver widens the window in which a second dispatcher
	// could take the same message.
	time.Sleep(30 * time.Millisecond)
	if n == 1 {
		w.WriteHeader(http.StatusInternalServerError)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func testWebhooksOneProcess(t *testing.T, fo fixtureOptions) {
	fo.apiOptions = func(o *api.Options) { o.WebhookBackoff = []time.Duration{20 * time.Millisecond, time.Second} }
	first := apitest.Start(t, fo.apitest())
	second := apitest.Join(t, first, fo.apitest())
	a, b := fixtureOf(t, first), fixtureOf(t, second)
	rc := &flakyReceiver{posts: map[string]int{}}
	srv := httptest.NewServer(rc)
	t.Cleanup(srv.Close)
	if r := a.do(priya, "PUT", "/v1/webhook", map[string]any{"url": srv.URL + "/hooks"}); r.status != http.StatusOK {
		t.Fatalf("PUT /v1/webhook: %s", r)
	}
	const runs = 8
	var ids []string
	for i := range runs {
		f := []*fixture{a, b}[i%2]
		id := f.startAsync(priya)
		if r := f.do(priya, "POST", "/v1/runs/"+id+":cancel", map[string]any{}); r.status != http.StatusAccepted {
			t.Fatalf("cancel %s: %s", id, r)
		}
		ids = append(ids, id)
	}
	for _, id := range ids {
		dl := waitDelivery(t, a, id, func(d api.Delivery) bool { return d.Status == store.DeliveryDelivered })
		if dl.Attempts != 2 || len(dl.AttemptLog) != 2 {
			t.Fatalf("delivery of run %s: %d attempts, %d recorded, want 2 (a 500, then a 204)", id, dl.Attempts, len(dl.AttemptLog))
		}
	}
	// Anything still in flight would land within the backoff.
	time.Sleep(300 * time.Millisecond)
	rc.mu.Lock()
	defer rc.mu.Unlock()
	if len(rc.posts) != runs {
		t.Fatalf("the receiver got %d distinct messages, want %d (one per run)", len(rc.posts), runs)
	}
	for id, n := range rc.posts {
		if n != 2 {
			t.Errorf("message %s was POSTed %d times, want 2 (one dispatcher each attempt)", id, n)
		}
	}
}
