package api_test

import (
	"bytes"
	"net/http"
	"testing"

	"github.com/agentplane/agentplane/api"
	"github.com/agentplane/agentplane/store"
	"github.com/agentplane/agentplane/trace"
)

// TestEraseOverHTTP: an admin erases a run of their tenant; its log
// still verifies and carries the erasure record, its payloads are gone;
// an open run is refused, another tenant's run is not found, and a
// request naming neither a run nor a user is malformed.
func TestEraseOverHTTP(t *testing.T) {
	f := newFixture(t, fixtureOptions{})
	admin := []string{"Authorization", "Bearer " + f.adminKey(bankTenant, meera)}
	id := f.startAsync(priya)
	f.waitStatus(priya, id, store.StatusWaiting) // the refund waits for an approval

	wantError(t, "erase an open run", f.do("", "POST", "/v1/erasures", map[string]any{"run_id": id}, admin...), http.StatusConflict, "conflict")
	if r := f.do(priya, "POST", "/v1/runs/"+id+":cancel", map[string]any{}); r.status >= 300 {
		t.Fatalf("cancel: %s", r)
	}
	f.waitStatus(priya, id, store.StatusCancelled)

	wantError(t, "erase nothing named", f.do("", "POST", "/v1/erasures", map[string]any{}, admin...), http.StatusBadRequest, "invalid_request")
	other := []string{"Authorization", "Bearer " + f.adminKey(otherTenant, gus)}
	wantError(t, "erase another tenant's run", f.do("", "POST", "/v1/erasures", map[string]any{"run_id": id}, other...), http.StatusNotFound, "not_found")
	wantError(t, "erase without tenant:admin", f.do(priya, "POST", "/v1/erasures", map[string]any{"run_id": id}), http.StatusForbidden, "forbidden")

	r := f.do("", "POST", "/v1/erasures", map[string]any{"run_id": id, "reason": "customer request 81"}, admin...)
	if r.status != http.StatusOK {
		t.Fatalf("erase: %s", r)
	}
	var res api.EraseResult
	r.decode(t, &res)
	if len(res.Erasures) != 1 || res.Erasures[0].RunID != id || res.Erasures[0].RequestedBy != meera || res.Erasures[0].Events == 0 {
		t.Fatalf("erase result %+v", res)
	}
	rep, err := trace.Verify(t.Context(), trace.SourceFor(f.p.Store, bankTenant), id)
	if err != nil || !rep.OK() || rep.Erased != res.Erasures[0].Events || len(rep.Erasures) != 1 || rep.Erasures[0].Reason != "customer request 81" {
		t.Fatalf("verify after erasure: %+v, %v", rep, err)
	}
	evs, err := f.p.Store.Events(t.Context(), id, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, ev := range evs {
		if bytes.Contains(ev.Payload, []byte(demoTask)) || trace.ErasureOf(&ev) == "" {
			t.Fatalf("seq %d after erasure: %s", ev.Seq, ev.Payload)
		}
	}
	// The erased run's events read over the API as erased payloads, not errors.
	if r := f.do(priya, "GET", "/v1/runs/"+id+"/events", nil); r.status != http.StatusOK || !bytes.Contains(r.body, []byte(res.Erasures[0].ID)) {
		t.Fatalf("events of the erased run: %s", r)
	}
}
