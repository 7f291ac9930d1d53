package broker_test

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/agentplane/agentplane/agent"
	"github.com/agentplane/agentplane/authz"
	"github.com/agentplane/agentplane/broker"
	"github.com/agentplane/agentplane/examples/carddispute"
	"github.com/agentplane/agentplane/store/sqlite"
	"github.com/agentplane/agentplane/tool"
)

// BenchmarkDecide measures the broker's whole decision for one proposed
// call of the card-dispute agent: grant, authorisation as the user, schema,
// the agent's four CEL policies, rate limits and the approval rule. Besides
// ns/op it reports the median and 99th percentile of single decisions
// (p50-ns, p99-ns), timed one by one. scripts/bench-broker.sh prints them as
// a table.
func BenchmarkDecide(b *testing.B) {
	ctx := context.Background()
	raw, err := carddispute.ReadFile(carddispute.ToolsFile)
	if err != nil {
		b.Fatal(err)
	}
	ms, err := tool.ParseManifests(carddispute.ToolsFile, raw)
	if err != nil {
		b.Fatal(err)
	}
	byName := map[string]*tool.Manifest{}
	for _, m := range ms {
		byName[m.Name] = m
	}
	def, err := agent.ParseDefinition(carddispute.AgentFile, mustReadB(b, carddispute.AgentFile), nil)
	if err != nil {
		b.Fatal(err)
	}
	ps, err := def.CompilePolicies()
	if err != nil {
		b.Fatal(err)
	}
	priya, _ := authz.New("example-bank", "priya@example-bank.in", allScopes, []string{"card-ops-agents"}, nil)
	st, err := sqlite.Open(ctx, sqlite.Options{Dir: filepath.Join(b.TempDir(), "data")})
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	if err := authz.Put(ctx, st, priya); err != nil {
		b.Fatal(err)
	}
	directories := map[string]authz.Directory{"memory": authz.NewStatic(priya), "sqlite": authz.FromStore(st)}

	// A run twelve calls in, as the demo is by its refund.
	now := time.Date(2026, 10, 5, 9, 0, 0, 0, time.UTC)
	var hist []broker.PriorCall
	calls := map[string]int{}
	for i := 0; i < 12; i++ {
		name := []string{"get_ticket", "get_customer_profile", "get_card_transactions"}[i%3]
		hist = append(hist, broker.PriorCall{Tool: name, At: now.Add(-time.Duration(12-i) * time.Second), Args: json.RawMessage(`{"customer_id":"c_88213"}`)})
		calls[name]++
	}
	hist = append(hist, broker.PriorCall{Tool: "issue_refund", At: now.Add(-time.Second), Args: json.RawMessage(`{"amount_inr":500,"customer_id":"c_88213","transaction_id":"txn_1003"}`)})

	cases := []struct {
		name, tool, args string
		tainted          bool
		want             string // "" allowed, else the control
	}{
		{"refund-allowed", "issue_refund", `{"amount_inr":500,"customer_id":"c_88213","reason":"Duplicate","transaction_id":"txn_1002"}`, true, ""},
		{"refund-approval", "issue_refund", `{"amount_inr":12499,"customer_id":"c_88213","reason":"Duplicate","transaction_id":"txn_1002"}`, true, broker.ControlApproval},
		{"email-approval", "send_email", `{"body":"Dear Ms Rao, your refund is on its way.","subject":"Your refund","to":"asha.rao@mail.example"}`, true, broker.ControlApproval},
		{"read-allowed", "get_card_transactions", `{"customer_id":"c_88213","from":"2026-10-01","to":"2026-10-31"}`, true, ""},
	}
	for dirName, dir := range directories {
		br, err := broker.New(broker.Options{Catalog: tool.NewCatalog(), Directory: dir, Clock: func() time.Time { return now },
			Policies: func(context.Context, string, int) (*agent.Policies, error) { return ps, nil }})
		if err != nil {
			b.Fatal(err)
		}
		for _, c := range cases {
			p := broker.Proposal{RunID: "run_bench", Tenant: "example-bank", User: "priya@example-bank.in", Step: 5, Tool: c.tool,
				Args: json.RawMessage(c.args), Manifest: byName[c.tool], Agent: def.Agent, AgentVersion: def.Version,
				Run: broker.RunState{Tainted: c.tainted, Steps: 5, CostMicros: 2_400_000, Currency: "INR", Calls: calls, Allowed: hist}}
			if d := br.Decide(ctx, p); d.Allowed != (c.want == "") || !d.Allowed && d.Control != c.want {
				b.Fatalf("%s: decision %+v", c.name, d)
			}
			b.Run(fmt.Sprintf("%s/directory=%s", c.name, dirName), func(b *testing.B) {
				lat := make([]time.Duration, 0, min(b.N, 1_000_000))
				b.ReportAllocs()
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					start := time.Now()
					br.Decide(ctx, p)
					if len(lat) < cap(lat) {
						lat = append(lat, time.Since(start))
					}
				}
				b.StopTimer()
				slices.Sort(lat)
				if len(lat) > 0 {
					b.ReportMetric(float64(lat[len(lat)/2].Nanoseconds()), "p50-ns")
					b.ReportMetric(float64(lat[len(lat)*99/100].Nanoseconds()), "p99-ns")
				}
			})
		}
	}
}

func mustReadB(b *testing.B, name string) []byte {
	b.Helper()
	data, err := carddispute.ReadFile(name)
	if err != nil {
		b.Fatal(err)
	}
	return data
}
