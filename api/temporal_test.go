package api_test

import (
	"context"
	"testing"
	"time"

	"github.com/agentplane/agentplane/api"
	"github.com/agentplane/agentplane/engine/temporal/temporaltest"
	"github.com/agentplane/agentplane/internal/platform"
	"github.com/agentplane/agentplane/store"
	"github.com/agentplane/agentplane/trace"
)

// TestOnTemporal drives the card-dispute demo through the HTTP API with
// the platform's runs executed by the Temporal engine on a real dev
// server (platform.Options.Engine, as `serve --engine temporal://...`
// sets it): both approvals decided through the API, the run completes,
// its log in agentplane's store verifies and re-runs without going live,
// and the bank counts one dispute, one refund and one e-mail. Streams'
// fallback poll is set to an hour: a second run streamed from its start
// still shows every event of its log, because the appends the Temporal
// engine's workers make in this process wake the streams, as the embedded
// engine's do.
func TestOnTemporal(t *testing.T) {
	srv := temporaltest.Start(t, temporaltest.Options{})
	url := "temporal://" + srv.HostPort + "?namespace=" + temporaltest.Namespace + "&task_queue=api-test"
	f := newFixture(t, fixtureOptions{platform: func(o *platform.Options) { o.Engine = url },
		apiOptions: func(o *api.Options) { o.StreamPoll, o.Heartbeat = time.Hour, time.Hour }})
	if f.p.Embedded != nil {
		t.Fatal("the platform built the embedded engine for a temporal:// engine")
	}
	id := f.startAsync(priya)
	ap := f.waitPending(priya, id, "issue_refund")
	f.decide(meera, ap.ID, map[string]any{"decision": "approve"})
	email := f.waitPending(priya, id, "send_email")
	f.decide(meera, email.ID, map[string]any{"decision": "approve"})
	run := f.waitStatus(priya, id, store.StatusCompleted)
	ctx := context.Background()
	ct, err := bankOf(f.p).CountersForRun(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if ct.DisputesRaised != 1 || ct.RefundsIssued != 1 || ct.EmailsSent != 1 {
		t.Fatalf("bank: %+v, want one dispute, one refund, one e-mail", ct)
	}
	rep, err := trace.Verify(ctx, trace.SourceFor(f.p.Store, bankTenant), id)
	if err != nil || !rep.OK() {
		t.Fatalf("trace verify of the Temporal run: %+v %v", rep, err)
	}
	v, err := f.p.Engine.Verify(ctx, id)
	if err != nil || v.Status != store.StatusCompleted {
		t.Fatalf("engine verify: %+v %v (run %+v)", v, err, run)
	}
	// Nothing but the workers' appends can move this stream.
	streamDemo(t, f, 3*time.Minute)
}
