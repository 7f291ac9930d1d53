package broker_test

import (
	"context"
	"encoding/json"
	"path/filepath"
	"testing"

	"github.com/agentplane/agentplane/authz"
	"github.com/agentplane/agentplane/broker"
	"github.com/agentplane/agentplane/store/sqlite"
	"github.com/agentplane/agentplane/tool"
)

// Every decision reads the user's rights as they are now (no cache): a
// scope revoked, or the user removed, between two decisions of one run
// is refused at the second; a scope given back is allowed at the third.
func TestDecisionSeesPrincipalChangesAtOnce(t *testing.T) {
	ctx := context.Background()
	st, err := sqlite.Open(ctx, sqlite.Options{Dir: filepath.Join(t.TempDir(), "data")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	ms, err := tool.ParseManifests("t.yaml", []byte("name: lookup\ntier: 1\ntimeout_ms: 1000\ninput_schema: {type: object}\nauth: {mode: on_behalf_of_user, scopes: [crm:read]}\nside_effects: none\n"))
	if err != nil {
		t.Fatal(err)
	}
	b, err := broker.New(broker.Options{Catalog: tool.NewCatalog(), Directory: authz.FromStore(st)})
	if err != nil {
		t.Fatal(err)
	}
	put := func(scopes ...string) {
		p, err := authz.New("bank", "priya", scopes, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := authz.Put(ctx, st, p); err != nil {
			t.Fatal(err)
		}
	}
	decide := func(step int) broker.Proposal {
		return broker.Proposal{RunID: "run_1", Tenant: "bank", User: "priya", Step: step, Tool: "lookup", Args: json.RawMessage(`{}`), Manifest: ms[0]}
	}
	put("crm:read")
	if d := b.Decide(ctx, decide(1)); !d.Allowed {
		t.Fatalf("step 1 with crm:read: %+v", d)
	}
	put("crm:write")
	if d := b.Decide(ctx, decide(2)); d.Allowed || d.Control != broker.ControlAuthz {
		t.Fatalf("step 2 after crm:read was revoked: %+v, want refused by authz", d)
	}
	put("crm:read")
	if d := b.Decide(ctx, decide(3)); !d.Allowed {
		t.Fatalf("step 3 with crm:read again: %+v", d)
	}
	if err := st.DeletePrincipal(ctx, "bank", "priya"); err != nil {
		t.Fatal(err)
	}
	if d := b.Decide(ctx, decide(4)); d.Allowed || d.Control != broker.ControlAuthz {
		t.Fatalf("step 4 after the user was removed: %+v, want refused by authz", d)
	}
}
