package api

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/agentplane/agentplane/store"
	"github.com/agentplane/agentplane/trace"
)

// The API's approval JSON carries what the approver must read (warnings),
// the groups a call needs, and, for a request made again after an edit, its
// round, the request it follows and why; a decided edit shows its arguments.
func TestApprovalJSONCarriesWarningsAndRounds(t *testing.T) {
	at := time.Unix(1_800_000_000, 0).UTC()
	run := &store.Run{ID: "run_x", Tenant: "t", Status: store.StatusWaiting}
	ev := func(seq int64, typ string, v any) store.Event {
		b, _ := json.Marshal(v)
		return store.Event{RunID: run.ID, Seq: seq, Type: typ, At: at, Payload: b}
	}
	edited := `{"amount":500}`
	evs := []store.Event{
		ev(1, trace.EvApprovalReq, trace.ApprovalRequested{ApprovalID: "apr_run_x_1_0", Tool: "pay", Group: "payers", Groups: []string{"payers", "heads"},
			Warnings: []string{"the domain in \"a@exаmple.in\" mixes Latin and Cyrillic letters"}, ExpiresAt: at.Add(time.Hour)}),
		ev(2, trace.EvApprovalDec, trace.ApprovalDecided{ApprovalID: "apr_run_x_1_0", Outcome: trace.ApprovalEdited, Decider: "bob", EditedArgs: &edited}),
		ev(3, trace.EvApprovalReq, trace.ApprovalRequested{ApprovalID: "apr_run_x_1_0.2", Tool: "pay", Group: "heads", Round: 2,
			Previous: "apr_run_x_1_0", Why: "edited by bob; the edited call needs group heads", ExpiresAt: at.Add(time.Hour)}),
	}
	got := approvalsIn(run, evs)
	b, _ := json.Marshal(got)
	for _, want := range []string{`"warnings":["the domain in \"a@exаmple.in\" mixes Latin and Cyrillic letters"]`, `"groups":["payers","heads"]`,
		`"edited_args":{"amount":500}`, `"round":2`, `"previous":"apr_run_x_1_0"`, `"why":"edited by bob`, `"id":"apr_run_x_1_0.2"`} {
		if !strings.Contains(string(b), want) {
			t.Errorf("approval JSON lacks %s: %s", want, b)
		}
	}
	if len(got) != 2 || got[0].Status != trace.ApprovalEdited || got[1].Status != "pending" {
		t.Fatalf("approvals = %+v", got)
	}
}
