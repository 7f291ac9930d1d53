package broker_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/agentplane/agentplane/agent"
	"github.com/agentplane/agentplane/authz"
	"github.com/agentplane/agentplane/broker"
	"github.com/agentplane/agentplane/examples/carddispute"
	"github.com/agentplane/agentplane/tool"
)

// FuzzDecide sends arbitrary arguments for each card-dispute tool through
// the whole decision: authorisation, schema, the agent's CEL policies, rate
// limits and approval. Nothing may panic; the same proposal gets the same
// decision (decisions are recorded and must replay); a call is only ever
// allowed with arguments its schema accepts; and a refused call names a
// control.
func FuzzDecide(f *testing.F) {
	raw, err := carddispute.ReadFile(carddispute.ToolsFile)
	if err != nil {
		f.Fatal(err)
	}
	ms, err := tool.ParseManifests(carddispute.ToolsFile, raw)
	if err != nil {
		f.Fatal(err)
	}
	def, err := agent.ParseDefinition(carddispute.AgentFile, mustReadF(f, carddispute.AgentFile), nil)
	if err != nil {
		f.Fatal(err)
	}
	ps, err := def.CompilePolicies()
	if err != nil {
		f.Fatal(err)
	}
	priya, _ := authz.New("example-bank", "priya", allScopes, nil, nil)
	asha, _ := authz.New("example-bank", "asha", allScopes, nil, map[string]string{"customer_id": "c_88213"})
	now := time.Date(2026, 10, 5, 9, 0, 0, 0, time.UTC)
	br, err := broker.New(broker.Options{Catalog: tool.NewCatalog(), Directory: authz.NewStatic(priya, asha), Clock: func() time.Time { return now },
		Policies: func(context.Context, string, int) (*agent.Policies, error) { return ps, nil }})
	if err != nil {
		f.Fatal(err)
	}
	for _, s := range []string{
		`{"customer_id":"c_88213","transaction_id":"txn_1002","amount_inr":12499}`,
		`{"customer_id":"c_88213","transaction_id":"txn_1002","amount_inr":1e308}`,
		`{"to":"a@example-bank.in","subject":"s","body":"4111 1111 1111 1111"}`,
		`{"to":"x@exfil.example,y@example-bank.in","subject":"s","body":"b"}`,
		`{"ticket_id":"T-1"}`, `{}`, `[]`, `{"customer_id":["c_1"]}`, `{"a":{"b":[1,{"c":null}]}}`,
	} {
		for i := range ms {
			f.Add(s, uint8(i), true, i%2 == 0)
		}
	}
	f.Fuzz(func(t *testing.T, args string, which uint8, tainted, bound bool) {
		m := ms[int(which)%len(ms)]
		if !json.Valid([]byte(args)) {
			return // the loop refuses invalid JSON before the broker sees it
		}
		user := "priya"
		if bound {
			user = "asha"
		}
		p := broker.Proposal{RunID: "run_f", Tenant: "example-bank", User: user, Step: 1, Tool: m.Name, Args: json.RawMessage(args),
			Manifest: m, Agent: def.Agent, AgentVersion: def.Version, Run: broker.RunState{Tainted: tainted, Currency: "INR"}}
		d1 := br.Decide(context.Background(), p)
		d2 := br.Decide(context.Background(), p)
		if d1.Allowed != d2.Allowed || d1.Control != d2.Control || d1.Rule != d2.Rule || d1.Reason != d2.Reason {
			t.Fatalf("two decisions differ:\n%+v\n%+v", d1, d2)
		}
		if d1.Allowed && m.ValidateArgs(json.RawMessage(args)) != nil {
			t.Fatalf("allowed arguments the schema refuses: %s", args)
		}
		if !d1.Allowed && d1.Control == "" {
			t.Fatalf("a refusal names no control: %+v", d1)
		}
	})
}

func mustReadF(f *testing.F, name string) []byte {
	f.Helper()
	data, err := carddispute.ReadFile(name)
	if err != nil {
		f.Fatal(err)
	}
	return data
}
