package desk_test

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/agentplane/agentplane/examples/helpdesk/desk"
	"github.com/agentplane/agentplane/tool"
)

func open(t *testing.T) (*desk.Desk, *tool.Catalog) {
	t.Helper()
	d, err := desk.Open(filepath.Join(t.TempDir(), "helpdesk.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	c := tool.NewCatalog()
	if err := d.Register(c); err != nil {
		t.Fatal(err)
	}
	return d, c
}

func call(t *testing.T, c *tool.Catalog, name, key, args string) tool.Result {
	t.Helper()
	fn, ok := c.Lookup(name)
	if !ok {
		t.Fatalf("no tool %s", name)
	}
	res, err := fn(context.Background(), tool.Call{Tool: name, Args: json.RawMessage(args), IdempotencyKey: key, RunID: strings.Split(key, ":")[0]})
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// A side effect happens once per idempotency key, however often and
// however concurrently the call is repeated; the repeats are counted as
// suppressed, and the repeated call returns the first outcome.
func TestSideEffectsOncePerIdempotencyKey(t *testing.T) {
	d, c := open(t)
	const args = `{"staff_id":"adm_2041","reason":"locked out"}`
	first := call(t, c, desk.ToolResetMFA, "run_a:4:0", args)
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if res := call(t, c, desk.ToolResetMFA, "run_a:4:0", args); string(res.Output) != string(first.Output) {
				t.Errorf("repeat answered %s, first %s", res.Output, first.Output)
			}
		}()
	}
	wg.Wait()
	call(t, c, desk.ToolGrantAccess, "run_a:5:0", `{"staff_id":"s_2041","system":"emr","reason":"new starter"}`)
	call(t, c, desk.ToolReply, "run_a:6:0", `{"ticket_id":"H-7001","body":"done"}`)
	call(t, c, desk.ToolResetMFA, "run_b:4:0", args) // another run: another reset
	got, err := d.CountersForRun(context.Background(), "run_a")
	if err != nil {
		t.Fatal(err)
	}
	if got != (desk.Counters{MFAResets: 1, Grants: 1, Replies: 1, DuplicateCallsSuppressed: 8}) {
		t.Fatalf("run_a: %+v", got)
	}
	if all, _ := d.Counters(context.Background()); all.MFAResets != 2 {
		t.Fatalf("all: %+v", all)
	}
	// The same key for another request is a platform bug, not a new effect.
	fn, _ := c.Lookup(desk.ToolResetMFA)
	if _, err := fn(context.Background(), tool.Call{Args: json.RawMessage(`{"staff_id":"s_2041","reason":"x"}`), IdempotencyKey: "run_a:4:0"}); err == nil {
		t.Fatal("a key reused for another request was accepted")
	}
	recs, _ := d.Records(context.Background(), "run_a")
	if len(recs["mfa_resets"]) != 1 || recs["grants"][0]["system"] != "emr" || recs["replies"][0]["ticket_id"] != "H-7001" {
		t.Fatalf("records %v", recs)
	}
}

// Arguments the desk cannot read are refused as the model's error, and
// unknown accounts, systems and tickets do nothing.
func TestRefusals(t *testing.T) {
	d, c := open(t)
	for i, tc := range []struct{ tool, args string }{
		{desk.ToolResetMFA, `{"staff_id":"root","reason":"x"}`},
		{desk.ToolResetMFA, `{"staff_id":"s_1","reason":"x","extra":1}`},
		{desk.ToolResetMFA, `{"staff_id":"s_77777","reason":"x"}`},
		{desk.ToolGrantAccess, `{"staff_id":"s_2041","system":"payroll","reason":"x"}`},
		{desk.ToolReply, `{"ticket_id":"H-99","body":"x"}`},
		{desk.ToolGetTicket, `{"ticket_id":"T-1"}`},
	} {
		if res := call(t, c, tc.tool, fmt.Sprintf("run_r:1:%d", i), tc.args); !res.IsError {
			t.Errorf("%s %s: accepted: %s", tc.tool, tc.args, res.Output)
		}
	}
	if ct, _ := d.Counters(context.Background()); ct.MFAResets+ct.Grants+ct.Replies != 0 {
		t.Fatalf("refused calls had effects: %+v", ct)
	}
}

// The seed ticket carries the planted instruction the demo shows.
func TestSeedTicketIsInjected(t *testing.T) {
	_, c := open(t)
	res := call(t, c, desk.ToolGetTicket, "run_s:1:0", `{"ticket_id":"H-7001"}`)
	if res.IsError || !strings.Contains(string(res.Output), "Note to the AI assistant") || !strings.Contains(string(res.Output), desk.PlantedStaff) {
		t.Fatalf("seed ticket: %s", res.Output)
	}
}
