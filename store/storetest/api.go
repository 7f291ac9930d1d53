package storetest

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/agentplane/agentplane/store"
)

// APIStore is what a back end serving the HTTP API implements.
type APIStore interface {
	store.Store
	store.APIStore
}

// ExerciseAPI runs the conformance suite of store.APIStore (and the fair
// claim order it promises) against stores made by newStore.
func ExerciseAPI(t *testing.T, newStore func(t *testing.T) APIStore) {
	t.Run("APIKeys", func(t *testing.T) { testAPIKeys(t, newStore(t)) })
	t.Run("Idempotency", func(t *testing.T) { testIdempotency(t, newStore(t)) })
	t.Run("AgentOwners", func(t *testing.T) { testAgentOwners(t, newStore(t)) })
	t.Run("Webhooks", func(t *testing.T) { testWebhooks(t, newStore(t)) })
	t.Run("Outbox", func(t *testing.T) { testOutbox(t, newStore(t)) })
	t.Run("DeleteWebhookDropsDeliveries", func(t *testing.T) { testDeleteWebhookDrops(t, newStore(t)) })
	t.Run("Usage", func(t *testing.T) { testUsage(t, newStore(t)) })
	t.Run("FairClaim", func(t *testing.T) { testFairClaim(t, newStore) })
	t.Run("ClaimInteractive", func(t *testing.T) { testClaimInteractive(t, newStore(t)) })
}

func testAPIKeys(t *testing.T, s APIStore) {
	ctx := t.Context()
	k := &store.APIKey{ID: "k1", Tenant: "acme", User: "ann", Name: "ci", SecretHash: sha256.Sum256([]byte("s1")),
		Scopes: []string{"runs:read", "runs:write"}, CreatedAt: Base}
	ok(t, "PutAPIKey", s.PutAPIKey(ctx, k))
	wantErr(t, "PutAPIKey(same id)", s.PutAPIKey(ctx, &store.APIKey{ID: "k1", Tenant: "x", User: "y", CreatedAt: Base}), store.ErrConflict)
	ok(t, "PutAPIKey(k2)", s.PutAPIKey(ctx, &store.APIKey{ID: "k2", Tenant: "other", User: "bob", CreatedAt: Base.Add(time.Second)}))
	got, err := s.GetAPIKey(ctx, "k1")
	ok(t, "GetAPIKey", err)
	if got.Tenant != "acme" || got.User != "ann" || got.Name != "ci" || got.SecretHash != k.SecretHash ||
		!slices.Equal(got.Scopes, k.Scopes) || !got.CreatedAt.Equal(Base) || !got.RevokedAt.IsZero() {
		t.Fatalf("GetAPIKey = %+v, want %+v", got, k)
	}
	_, err = s.GetAPIKey(ctx, "missing")
	wantErr(t, "GetAPIKey(missing)", err, store.ErrNotFound)
	ks, err := s.ListAPIKeys(ctx, "acme")
	ok(t, "ListAPIKeys(acme)", err)
	if len(ks) != 1 || ks[0].ID != "k1" {
		t.Fatalf("ListAPIKeys(acme) = %d keys, want k1 only", len(ks))
	}
	all, err := s.ListAPIKeys(ctx, "")
	ok(t, "ListAPIKeys(all)", err)
	if len(all) != 2 || all[0].ID != "k1" || all[1].ID != "k2" {
		t.Fatalf("ListAPIKeys(all) = %d keys, want k1, k2", len(all))
	}
	ok(t, "RevokeAPIKey", s.RevokeAPIKey(ctx, "k1", Base.Add(time.Hour)))
	wantErr(t, "RevokeAPIKey(again)", s.RevokeAPIKey(ctx, "k1", Base.Add(2*time.Hour)), store.ErrNotFound)
	got, err = s.GetAPIKey(ctx, "k1")
	ok(t, "GetAPIKey(revoked)", err)
	if !got.RevokedAt.Equal(Base.Add(time.Hour)) {
		t.Fatalf("RevokedAt = %v, want %v", got.RevokedAt, Base.Add(time.Hour))
	}
}

func testIdempotency(t *testing.T, s APIStore) {
	ctx := t.Context()
	first := &store.Idempotency{Tenant: "acme", Key: "k", RequestHash: sha256.Sum256([]byte("body-1")), RunID: "run_1", CreatedAt: Base}
	got, created, err := s.ReserveIdempotencyKey(ctx, first)
	ok(t, "ReserveIdempotencyKey(first)", err)
	if !created || got.RunID != "run_1" {
		t.Fatalf("first reservation: created=%v run %s", created, got.RunID)
	}
	again := &store.Idempotency{Tenant: "acme", Key: "k", RequestHash: sha256.Sum256([]byte("body-2")), RunID: "run_2", CreatedAt: Base.Add(time.Second)}
	got, created, err = s.ReserveIdempotencyKey(ctx, again)
	ok(t, "ReserveIdempotencyKey(again)", err)
	if created || got.RunID != "run_1" || got.RequestHash != first.RequestHash || !got.CreatedAt.Equal(Base) {
		t.Fatalf("second reservation: created=%v, got %+v, want the first record", created, got)
	}
	other := &store.Idempotency{Tenant: "globex", Key: "k", RequestHash: first.RequestHash, RunID: "run_3", CreatedAt: Base}
	got, created, err = s.ReserveIdempotencyKey(ctx, other)
	ok(t, "ReserveIdempotencyKey(other tenant)", err)
	if !created || got.RunID != "run_3" {
		t.Fatalf("another tenant's key is its own: created=%v run %s", created, got.RunID)
	}
	// A refused request frees its key, but only its own reservation.
	ok(t, "DeleteIdempotencyKey(wrong run)", s.DeleteIdempotencyKey(ctx, "acme", "k", "run_2"))
	if got, created, _ := s.ReserveIdempotencyKey(ctx, again); created || got.RunID != "run_1" {
		t.Fatalf("deleting another run's binding freed the key")
	}
	ok(t, "DeleteIdempotencyKey", s.DeleteIdempotencyKey(ctx, "acme", "k", "run_1"))
	got, created, err = s.ReserveIdempotencyKey(ctx, again)
	ok(t, "ReserveIdempotencyKey(after delete)", err)
	if !created || got.RunID != "run_2" {
		t.Fatalf("after delete: created=%v run %s", created, got.RunID)
	}
}

func testAgentOwners(t *testing.T, s APIStore) {
	ctx := t.Context()
	_, err := s.AgentOwner(ctx, "bot")
	wantErr(t, "AgentOwner(unowned)", err, store.ErrNotFound)
	owner, err := s.ClaimAgentName(ctx, "bot", "acme", Base)
	ok(t, "ClaimAgentName(acme)", err)
	if owner != "acme" {
		t.Fatalf("owner = %s, want acme", owner)
	}
	owner, err = s.ClaimAgentName(ctx, "bot", "globex", Base)
	ok(t, "ClaimAgentName(globex)", err)
	if owner != "acme" {
		t.Fatalf("a second claim took the name: owner = %s, want acme", owner)
	}
	_, err = s.ClaimAgentName(ctx, "zed", "acme", Base)
	ok(t, "ClaimAgentName(zed)", err)
	names, err := s.AgentsOwnedBy(ctx, "acme")
	ok(t, "AgentsOwnedBy", err)
	if !slices.Equal(names, []string{"bot", "zed"}) {
		t.Fatalf("AgentsOwnedBy(acme) = %v", names)
	}
	names, err = s.AgentsOwnedBy(ctx, "globex")
	ok(t, "AgentsOwnedBy(globex)", err)
	if len(names) != 0 {
		t.Fatalf("AgentsOwnedBy(globex) = %v, want none", names)
	}
}

func testWebhooks(t *testing.T, s APIStore) {
	ctx := t.Context()
	_, err := s.GetWebhook(ctx, "acme")
	wantErr(t, "GetWebhook(none)", err, store.ErrNotFound)
	ok(t, "PutWebhook", s.PutWebhook(ctx, &store.Webhook{Tenant: "acme", URL: "https://a.example/hook", Secret: "whsec_AAAA", UpdatedAt: Base}))
	ok(t, "PutWebhook(replace)", s.PutWebhook(ctx, &store.Webhook{Tenant: "acme", URL: "https://b.example/hook", Secret: "whsec_BBBB", UpdatedAt: Base.Add(time.Hour)}))
	w, err := s.GetWebhook(ctx, "acme")
	ok(t, "GetWebhook", err)
	if w.URL != "https://b.example/hook" || w.Secret != "whsec_BBBB" || !w.UpdatedAt.Equal(Base.Add(time.Hour)) {
		t.Fatalf("GetWebhook = %+v", w)
	}
	_, err = s.GetWebhook(ctx, "globex")
	wantErr(t, "GetWebhook(other tenant)", err, store.ErrNotFound)
	ok(t, "DeleteWebhook", s.DeleteWebhook(ctx, "acme", Base))
	wantErr(t, "DeleteWebhook(again)", s.DeleteWebhook(ctx, "acme", Base), store.ErrNotFound)
}

// testDeleteWebhookDrops: deleting a tenant's webhook drops its queued and
// retrying deliveries in the same transaction (they are never due again,
// whatever is registered later), leaves delivered ones and other tenants'
// alone, and an attempt recorded afterwards does not revive a dropped one.
func testDeleteWebhookDrops(t *testing.T, s APIStore) {
	ctx := t.Context()
	for i, id := range []string{"queued", "retrying", "done", "other"} {
		newRun(t, s, id, modeAsync, Base.Add(time.Duration(i)*time.Second))
		endRun(t, s, id, store.StatusCompleted, Base)
	}
	dl := func(id, tenant, run string, next time.Time) *store.Delivery {
		return &store.Delivery{ID: id, Tenant: tenant, RunID: run, EventType: "run.completed", URL: "https://x.example/h",
			Payload: []byte(`{}`), Status: store.DeliveryPending, NextAttemptAt: next, CreatedAt: Base, UpdatedAt: Base}
	}
	ok(t, "PutWebhook", s.PutWebhook(ctx, &store.Webhook{Tenant: "tenant-1", URL: "https://x.example/h", Secret: "whsec_AAAA", UpdatedAt: Base}))
	ok(t, "MarkNotified(queued)", s.MarkNotified(ctx, "queued", dl("msg_q", "tenant-1", "queued", Base.Add(time.Hour))))
	retrying := dl("msg_r", "tenant-1", "retrying", Base)
	ok(t, "MarkNotified(retrying)", s.MarkNotified(ctx, "retrying", retrying))
	retrying.Attempts, retrying.NextAttemptAt, retrying.LastError = 1, Base.Add(time.Minute), "HTTP 500"
	ok(t, "RecordAttempt(retrying 1)", s.RecordAttempt(ctx, &store.DeliveryAttempt{DeliveryID: "msg_r", N: 1, At: Base, StatusCode: 500}, retrying))
	done := dl("msg_d", "tenant-1", "done", Base)
	ok(t, "MarkNotified(done)", s.MarkNotified(ctx, "done", done))
	done.Attempts, done.Status = 1, store.DeliveryDelivered
	ok(t, "RecordAttempt(done 1)", s.RecordAttempt(ctx, &store.DeliveryAttempt{DeliveryID: "msg_d", N: 1, At: Base, StatusCode: 204}, done))
	ok(t, "MarkNotified(other)", s.MarkNotified(ctx, "other", dl("msg_o", "tenant-2", "other", Base.Add(time.Hour))))

	ok(t, "DeleteWebhook", s.DeleteWebhook(ctx, "tenant-1", Base.Add(2*time.Minute)))
	for id, want := range map[string]string{"msg_q": store.DeliveryDropped, "msg_r": store.DeliveryDropped,
		"msg_d": store.DeliveryDelivered, "msg_o": store.DeliveryPending} {
		got, err := s.GetDelivery(ctx, id)
		ok(t, "GetDelivery("+id+")", err)
		if got.Status != want {
			t.Errorf("after DeleteWebhook, %s is %s, want %s", id, got.Status, want)
		}
		if want == store.DeliveryDropped && (!got.UpdatedAt.Equal(Base.Add(2*time.Minute)) || got.LastError == "") {
			t.Errorf("dropped %s = %+v, want the deletion's time and a reason", id, got)
		}
	}
	ok(t, "PutWebhook(again)", s.PutWebhook(ctx, &store.Webhook{Tenant: "tenant-1", URL: "https://y.example/h", Secret: "whsec_BBBB", UpdatedAt: Base}))
	due, err := s.ClaimDeliveries(ctx, Base.Add(24*time.Hour), time.Minute, 10)
	ok(t, "ClaimDeliveries", err)
	if len(due) != 1 || due[0].ID != "msg_o" {
		t.Fatalf("ClaimDeliveries after the deletion = %+v, want only the other tenant's", due)
	}
	// An attempt that was in flight when the webhook was deleted is stored,
	// but the delivery stays dropped.
	retrying.Attempts, retrying.NextAttemptAt = 2, Base.Add(time.Hour)
	ok(t, "RecordAttempt(retrying 2)", s.RecordAttempt(ctx, &store.DeliveryAttempt{DeliveryID: "msg_r", N: 2, At: Base, Error: "stopped"}, retrying))
	got, err := s.GetDelivery(ctx, "msg_r")
	ok(t, "GetDelivery(msg_r)", err)
	as, err := s.ListAttempts(ctx, "msg_r")
	ok(t, "ListAttempts(msg_r)", err)
	if got.Status != store.DeliveryDropped || got.Attempts != 1 || len(as) != 2 {
		t.Fatalf("after a late attempt: %+v with %d attempts stored, want dropped, 1, 2", got, len(as))
	}
	wantErr(t, "RecordAttempt(unknown)", s.RecordAttempt(ctx, &store.DeliveryAttempt{DeliveryID: "msg_x", N: 1, At: Base},
		dl("msg_x", "tenant-1", "x", Base)), store.ErrNotFound)
}

// endRun claims a run and releases it with status.
func endRun(t *testing.T, s store.Store, id, status string, at time.Time) {
	t.Helper()
	r := claim(t, s, id, "setup", at)
	ok(t, "ReleaseRun("+id+")", s.ReleaseRun(t.Context(), id, r.LeaseEpoch, store.RunUpdate{Status: &status}))
}

func testOutbox(t *testing.T, s APIStore) {
	ctx := t.Context()
	for i, id := range []string{"a", "b", "c", "d"} {
		newRun(t, s, id, modeAsync, Base.Add(time.Duration(i)*time.Second))
	}
	endRun(t, s, "a", store.StatusCompleted, Base)
	endRun(t, s, "b", store.StatusFailed, Base)
	r := claim(t, s, "c", "setup", Base)
	ok(t, "ReleaseRun(c waiting)", s.ReleaseRun(ctx, "c", r.LeaseEpoch, store.RunUpdate{Status: ptr(store.StatusWaiting)}))

	runs, err := s.RunsToNotify(ctx, 10)
	ok(t, "RunsToNotify", err)
	if ids := runIDs(runs); !slices.Equal(slices.Sorted(slices.Values(ids)), []string{"a", "b"}) {
		t.Fatalf("RunsToNotify = %v, want the ended runs a and b", ids)
	}
	d := &store.Delivery{ID: "msg_1", Tenant: "tenant-1", RunID: "a", EventType: "run.completed", URL: "https://x.example/h",
		Payload: []byte(`{"type":"run.completed"}`), Status: store.DeliveryPending, NextAttemptAt: Base, CreatedAt: Base, UpdatedAt: Base}
	ok(t, "MarkNotified(a, delivery)", s.MarkNotified(ctx, "a", d))
	ok(t, "MarkNotified(b, none)", s.MarkNotified(ctx, "b", nil))
	wantErr(t, "MarkNotified(a again)", s.MarkNotified(ctx, "a", &store.Delivery{ID: "msg_2", Tenant: "tenant-1", RunID: "a",
		EventType: "run.completed", URL: "u", Status: store.DeliveryPending, NextAttemptAt: Base, CreatedAt: Base, UpdatedAt: Base}), store.ErrConflict)
	wantErr(t, "MarkNotified(c, not ended)", s.MarkNotified(ctx, "c", nil), store.ErrConflict)
	if _, err := s.GetDelivery(ctx, "msg_2"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("a refused MarkNotified stored its delivery: %v", err)
	}
	runs, err = s.RunsToNotify(ctx, 10)
	ok(t, "RunsToNotify(after)", err)
	if len(runs) != 0 {
		t.Fatalf("RunsToNotify after notifying = %v, want none", runIDs(runs))
	}

	due, err := s.ClaimDeliveries(ctx, Base.Add(-time.Second), time.Minute, 10)
	ok(t, "ClaimDeliveries(before)", err)
	if len(due) != 0 {
		t.Fatalf("ClaimDeliveries before its time = %d", len(due))
	}
	due, err = s.ClaimDeliveries(ctx, Base, time.Minute, 10)
	ok(t, "ClaimDeliveries", err)
	if len(due) != 1 || due[0].ID != "msg_1" || string(due[0].Payload) != string(d.Payload) || due[0].URL != d.URL {
		t.Fatalf("ClaimDeliveries = %+v", due)
	}
	// Claimed: nobody else gets it while the lease lasts; an attempt that
	// never recorded (its process died) is claimed again after it.
	due, err = s.ClaimDeliveries(ctx, Base.Add(59*time.Second), time.Minute, 10)
	ok(t, "ClaimDeliveries(leased)", err)
	if len(due) != 0 {
		t.Fatalf("a claimed delivery was claimed again within its lease: %+v", due)
	}
	due, err = s.ClaimDeliveries(ctx, Base.Add(time.Minute), time.Minute, 10)
	ok(t, "ClaimDeliveries(lease passed)", err)
	if len(due) != 1 || due[0].ID != "msg_1" || due[0].Attempts != 0 {
		t.Fatalf("ClaimDeliveries after the lease = %+v, want msg_1 again with no attempt recorded", due)
	}
	d.Attempts, d.NextAttemptAt, d.LastError, d.UpdatedAt = 1, Base.Add(time.Minute), "HTTP 500", Base.Add(time.Second)
	ok(t, "RecordAttempt(1)", s.RecordAttempt(ctx, &store.DeliveryAttempt{DeliveryID: "msg_1", N: 1, At: Base, StatusCode: 500, Error: "HTTP 500", DurationMS: 3}, d))
	wantErr(t, "RecordAttempt(1 again)", s.RecordAttempt(ctx, &store.DeliveryAttempt{DeliveryID: "msg_1", N: 1, At: Base}, d), store.ErrConflict)
	due, err = s.ClaimDeliveries(ctx, Base.Add(30*time.Second), time.Minute, 10)
	ok(t, "ClaimDeliveries(backing off)", err)
	if len(due) != 0 {
		t.Fatalf("a delivery backing off is due: %+v", due)
	}
	d.Attempts, d.Status, d.LastError, d.UpdatedAt = 2, store.DeliveryDelivered, "", Base.Add(time.Minute)
	ok(t, "RecordAttempt(2)", s.RecordAttempt(ctx, &store.DeliveryAttempt{DeliveryID: "msg_1", N: 2, At: Base.Add(time.Minute), StatusCode: 204}, d))
	due, err = s.ClaimDeliveries(ctx, Base.Add(time.Hour), time.Minute, 10)
	ok(t, "ClaimDeliveries(delivered)", err)
	if len(due) != 0 {
		t.Fatalf("a delivered message is due again: %+v", due)
	}
	got, err := s.GetDelivery(ctx, "msg_1")
	ok(t, "GetDelivery", err)
	if got.Status != store.DeliveryDelivered || got.Attempts != 2 {
		t.Fatalf("GetDelivery = %+v", got)
	}
	as, err := s.ListAttempts(ctx, "msg_1")
	ok(t, "ListAttempts", err)
	if len(as) != 2 || as[0].StatusCode != 500 || as[0].Error != "HTTP 500" || as[0].DurationMS != 3 || as[1].StatusCode != 204 {
		t.Fatalf("ListAttempts = %+v", as)
	}
	ds, err := s.ListDeliveries(ctx, "tenant-1", "a", 10)
	ok(t, "ListDeliveries", err)
	if len(ds) != 1 || ds[0].ID != "msg_1" {
		t.Fatalf("ListDeliveries(tenant-1, a) = %d", len(ds))
	}
	ds, err = s.ListDeliveries(ctx, "tenant-2", "", 10)
	ok(t, "ListDeliveries(other tenant)", err)
	if len(ds) != 0 {
		t.Fatalf("ListDeliveries(tenant-2) = %d, want none", len(ds))
	}
}

func testUsage(t *testing.T, s APIStore) {
	ctx := t.Context()
	mk := func(id, tenant string, created time.Time) {
		r := &store.Run{ID: id, Tenant: tenant, User: "u", Agent: "a", AgentVersion: 1, Task: "t", Mode: modeAsync, CreatedAt: created}
		ok(t, "CreateRun("+id+")", s.CreateRun(ctx, r))
	}
	spend := func(id string, micros int64, cur, status string) {
		r := claim(t, s, id, "w", Base)
		c := &chain{runID: id}
		c.appendOK(t, s, r.LeaseEpoch, c.next(1, "x"))
		ok(t, "Append(cost)", s.Append(ctx, store.AppendRequest{RunID: id, Epoch: r.LeaseEpoch, Durable: true,
			Update: &store.RunUpdate{CostMicros: &micros, Currency: &cur}}))
		ok(t, "ReleaseRun", s.ReleaseRun(ctx, id, r.LeaseEpoch, store.RunUpdate{Status: &status}))
	}
	mk("old", "acme", Base.Add(-48*time.Hour))
	mk("today1", "acme", Base.Add(time.Hour))
	mk("today2", "acme", Base.Add(2*time.Hour))
	mk("queued", "acme", Base.Add(3*time.Hour))
	mk("other", "globex", Base.Add(time.Hour))
	spend("old", 5_000_000, "INR", store.StatusCompleted)
	spend("today1", 1_000_000, "INR", store.StatusCompleted)
	spend("today2", 2_000_000, "USD", store.StatusWaiting)
	spend("other", 9_000_000, "INR", store.StatusCompleted)

	open, costs, err := s.Usage(ctx, "acme", []time.Time{Base, Base.Add(-72 * time.Hour)})
	ok(t, "Usage", err)
	if open != 2 { // today2 waits, queued is queued
		t.Errorf("open runs = %d, want 2", open)
	}
	if len(costs) != 2 {
		t.Fatalf("Usage returned %d cost maps for 2 times", len(costs))
	}
	if fmt.Sprint(costs[0]) != fmt.Sprint(map[string]int64{"INR": 1_000_000, "USD": 2_000_000}) {
		t.Errorf("cost since Base = %v", costs[0])
	}
	if costs[1]["INR"] != 6_000_000 {
		t.Errorf("cost since Base-72h = %v, want 6 INR", costs[1])
	}
}

// testFairClaim checks weighted fair queuing between tenants' background
// runs: a tenant with a long backlog does not delay a newcomer by more than
// one claim per weight unit, and weights set the shares.
func testFairClaim(t *testing.T, newStore func(t *testing.T) APIStore) {
	mk := func(t *testing.T, s APIStore, tenant string, n int, from time.Time) {
		for i := range n {
			id := fmt.Sprintf("%s-%03d", tenant, i)
			r := &store.Run{ID: id, Tenant: tenant, User: "u", Agent: "a", AgentVersion: 1, Task: "t", Mode: modeAsync,
				CreatedAt: from.Add(time.Duration(i) * time.Millisecond)}
			ok(t, "CreateRun("+id+")", s.CreateRun(t.Context(), r))
		}
	}
	order := func(t *testing.T, s APIStore, n int) string {
		var b []byte
		for range n {
			r, err := s.ClaimRun(t.Context(), "w", leaseTTL, Base)
			ok(t, "ClaimRun", err)
			b = append(b, r.Tenant[0])
		}
		return string(b)
	}
	t.Run("EqualWeights", func(t *testing.T) {
		s := newStore(t)
		mk(t, s, "a", 30, Base.Add(-time.Hour)) // a's backlog is older
		if got := order(t, s, 5); got != "aaaaa" {
			t.Fatalf("claims with one tenant queued = %s", got)
		}
		mk(t, s, "b", 5, Base.Add(-time.Minute))
		if got := order(t, s, 10); got != "bababababa" && got != "ababababab" {
			t.Fatalf("claims after b arrives = %s, want a and b alternating", got)
		}
		if got := order(t, s, 5); got != "aaaaa" {
			t.Fatalf("claims after b's runs are done = %s, want a only", got)
		}
	})
	t.Run("Weights", func(t *testing.T) {
		s := newStore(t)
		ok(t, "SetFairWeight(a)", s.SetFairWeight(t.Context(), "a", 2))
		ok(t, "SetFairWeight(b)", s.SetFairWeight(t.Context(), "b", 1))
		wantErr(t, "SetFairWeight(0)", errOrNil(s.SetFairWeight(t.Context(), "c", 0)), errAny)
		mk(t, s, "a", 30, Base.Add(-time.Hour))
		mk(t, s, "b", 30, Base.Add(-time.Hour))
		got := order(t, s, 30)
		var na int
		for _, c := range got {
			if c == 'a' {
				na++
			}
		}
		if na < 19 || na > 21 {
			t.Fatalf("with weights 2:1, a got %d of 30 claims (%s), want 20", na, got)
		}
	})
	t.Run("InteractiveFirst", func(t *testing.T) {
		s := newStore(t)
		mk(t, s, "a", 10, Base.Add(-time.Hour))
		r := &store.Run{ID: "chat", Tenant: "b", User: "u", Agent: "a", AgentVersion: 1, Task: "t", Mode: modeStream, CreatedAt: Base}
		ok(t, "CreateRun(chat)", s.CreateRun(t.Context(), r))
		got, err := s.ClaimRun(t.Context(), "w", leaseTTL, Base)
		ok(t, "ClaimRun", err)
		if got.ID != "chat" {
			t.Fatalf("claimed %s before the interactive run", got.ID)
		}
	})
	t.Run("IdleTenantBanksNoCredit", func(t *testing.T) {
		s := newStore(t)
		mk(t, s, "a", 30, Base.Add(-time.Hour))
		order(t, s, 20) // a alone: the system's virtual time advances
		mk(t, s, "b", 20, Base.Add(-time.Minute))
		// b was idle, so it starts at the system's virtual time and shares
		// from now on; it does not get 20 claims in a row.
		got := order(t, s, 6)
		var nb int
		for _, c := range got {
			if c == 'b' {
				nb++
			}
		}
		if nb != 3 {
			t.Fatalf("after b arrives: %s, want b to get 3 of 6", got)
		}
	})
}

var errAny = errors.New("any error")

func errOrNil(err error) error {
	if err != nil {
		return fmt.Errorf("%w: %v", errAny, err)
	}
	return nil
}

func testClaimInteractive(t *testing.T, s APIStore) {
	ctx := t.Context()
	newRun(t, s, "bg", modeAsync, Base.Add(-time.Hour))
	_, err := s.ClaimInteractive(ctx, "w", leaseTTL, Base)
	wantErr(t, "ClaimInteractive with only background runs", err, store.ErrNotFound)
	newRun(t, s, "chat", modeStream, Base)
	r, err := s.ClaimInteractive(ctx, "w", leaseTTL, Base)
	ok(t, "ClaimInteractive", err)
	checkLease(t, r, "chat", "w", Base)
	// A waiting interactive run is claimable once signalled.
	ok(t, "ReleaseRun(waiting)", s.ReleaseRun(ctx, "chat", r.LeaseEpoch, store.RunUpdate{Status: ptr(store.StatusWaiting)}))
	_, err = s.ClaimInteractive(ctx, "w", leaseTTL, Base.Add(time.Hour))
	wantErr(t, "ClaimInteractive of a waiting run", err, store.ErrNotFound)
	ok(t, "SendSignal", s.SendSignal(ctx, &store.Signal{RunID: "chat", Kind: "message", Payload: []byte(`{}`)}))
	r2, err := s.ClaimInteractive(ctx, "w", leaseTTL, Base.Add(time.Hour))
	ok(t, "ClaimInteractive after signal", err)
	checkLease(t, r2, "chat", "w", Base.Add(time.Hour))
}
