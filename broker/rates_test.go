package broker_test

import (
	"context"
	"testing"
	"time"

	"github.com/agentplane/agentplane/broker"
	"github.com/agentplane/agentplane/store/sqlite"
	"github.com/agentplane/agentplane/trace"
)

// TestRateLimitsSharedThroughTheStore: two brokers, as in two processes,
// keep their per-user and per-tenant windows in one store (two handles on
// one SQLite directory), so a user's allowance is one allowance whichever
// process decides; a store that cannot answer denies the call (fail
// closed).
func TestRateLimitsSharedThroughTheStore(t *testing.T) {
	dir := t.TempDir()
	open := func() *sqlite.Store {
		s, err := sqlite.Open(context.Background(), sqlite.Options{Dir: dir})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
	sa, sb := open(), open()
	a, b := newFixtureRates(t, nil, sa), newFixtureRates(t, nil, sb)
	ctx := context.Background()
	look := func(f *fixture, user string) trace.Decision {
		return f.b.Decide(ctx, f.proposal(user, "lookup", `{"q":"x"}`))
	}
	if d := look(a, "priya"); !d.Allowed {
		t.Fatalf("first call (process a): %+v", d)
	}
	if d := look(b, "priya"); !d.Allowed {
		t.Fatalf("second call (process b): %+v", d)
	}
	if d := look(a, "priya"); d.Allowed || d.Control != broker.ControlRateLimit || d.Rule != "rate_limit:2/min per user" {
		t.Fatalf("third call by priya, on either process: %+v, want the per-user limit", d)
	}
	if d := look(b, "ravi"); !d.Allowed {
		t.Fatalf("ravi: %+v", d)
	}
	if d := look(a, "intern"); d.Allowed || d.Rule != "rate_limit:3/min per tenant" {
		t.Fatalf("intern, tenant exhausted across processes: %+v", d)
	}
	a.advance(61 * time.Second)
	if d := look(a, "priya"); !d.Allowed {
		t.Fatalf("after the window: %+v", d)
	}
	sb.Close()
	if d := look(b, "ravi"); d.Allowed || d.Rule != "rate_limit:unavailable" {
		t.Fatalf("with the store closed: %+v, want a denial", d)
	}
}
