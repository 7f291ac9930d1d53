package storetest

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/agentplane/agentplane/store"
)

func agentVersion(name string, version int, spec string) *store.AgentVersion {
	return &store.AgentVersion{
		Name: name, Version: version, Spec: []byte(spec), SpecHash: sha256.Sum256([]byte(spec)),
		CreatedAt: Base.Add(time.Duration(version) * time.Hour),
	}
}

func testAgents(t *testing.T, s store.Store) {
	t.Run("Versions", func(t *testing.T) {
		v1 := agentVersion("support", 1, `{"model":"small","prompt":"be brief"}`)
		created, err := s.PutAgentVersion(t.Context(), v1)
		ok(t, "PutAgentVersion", err)
		if !created {
			t.Fatal("first PutAgentVersion: created = false")
		}
		created, err = s.PutAgentVersion(t.Context(), agentVersion("support", 1, string(v1.Spec)))
		ok(t, "PutAgentVersion(identical)", err)
		if created {
			t.Fatal("identical PutAgentVersion: created = true")
		}
		_, err = s.PutAgentVersion(t.Context(), agentVersion("support", 1, `{"model":"large"}`))
		wantErr(t, "PutAgentVersion(different content, same version)", err, store.ErrConflict)

		got, err := s.GetAgentVersion(t.Context(), "support", 1)
		ok(t, "GetAgentVersion", err)
		checkAgentVersion(t, got, v1)

		for _, v := range []*store.AgentVersion{
			agentVersion("support", 2, `{"model":"large"}`),
			agentVersion("billing", 1, `{"model":"small"}`),
		} {
			created, err := s.PutAgentVersion(t.Context(), v)
			ok(t, "PutAgentVersion", err)
			if !created {
				t.Fatalf("PutAgentVersion(%s v%d): created = false", v.Name, v.Version)
			}
		}
		_, err = s.GetAgentVersion(t.Context(), "support", 3)
		wantErr(t, "GetAgentVersion(missing version)", err, store.ErrNotFound)
		_, err = s.GetAgentVersion(t.Context(), "nobody", 1)
		wantErr(t, "GetAgentVersion(missing agent)", err, store.ErrNotFound)

		list := func(name string) []string {
			vs, err := s.ListAgentVersions(t.Context(), name)
			ok(t, "ListAgentVersions", err)
			var out []string
			for _, v := range vs {
				if v.SpecHash != sha256.Sum256(v.Spec) {
					t.Errorf("listed %s v%d has SpecHash not matching its Spec", v.Name, v.Version)
				}
				out = append(out, fmt.Sprintf("%s@%d", v.Name, v.Version))
			}
			slices.Sort(out)
			return out
		}
		if got, want := list("support"), []string{"support@1", "support@2"}; !slices.Equal(got, want) {
			t.Errorf("ListAgentVersions(support) = %v, want %v", got, want)
		}
		if got, want := list(""), []string{"billing@1", "support@1", "support@2"}; !slices.Equal(got, want) {
			t.Errorf("ListAgentVersions(\"\") = %v, want %v", got, want)
		}
		if got := list("nobody"); len(got) != 0 {
			t.Errorf("ListAgentVersions(nobody) = %v, want none", got)
		}
	})

	t.Run("Retire", func(t *testing.T) { testRetire(t, s) })

	t.Run("Aliases", func(t *testing.T) {
		prod := &store.Alias{Agent: "support", Alias: "prod", Version: 1, CanaryVersion: 2, CanaryPercent: 10, UpdatedAt: Base}
		ok(t, "SetAlias", s.SetAlias(t.Context(), prod))
		ok(t, "SetAlias", s.SetAlias(t.Context(), &store.Alias{Agent: "support", Alias: "dev", Version: 2, UpdatedAt: Base}))
		ok(t, "SetAlias", s.SetAlias(t.Context(), &store.Alias{Agent: "billing", Alias: "prod", Version: 1, UpdatedAt: Base}))

		got, err := s.GetAlias(t.Context(), "support", "prod")
		ok(t, "GetAlias", err)
		checkAlias(t, got, prod)

		// Promote the canary.
		promoted := &store.Alias{Agent: "support", Alias: "prod", Version: 2, UpdatedAt: Base.Add(time.Hour)}
		ok(t, "SetAlias(update)", s.SetAlias(t.Context(), promoted))
		got, err = s.GetAlias(t.Context(), "support", "prod")
		ok(t, "GetAlias after update", err)
		checkAlias(t, got, promoted)

		_, err = s.GetAlias(t.Context(), "support", "staging")
		wantErr(t, "GetAlias(missing)", err, store.ErrNotFound)
		_, err = s.GetAlias(t.Context(), "nobody", "prod")
		wantErr(t, "GetAlias(missing agent)", err, store.ErrNotFound)

		list := func(agent string) []string {
			as, err := s.ListAliases(t.Context(), agent)
			ok(t, "ListAliases", err)
			var out []string
			for _, a := range as {
				out = append(out, fmt.Sprintf("%s@%s=%d/%d:%d", a.Agent, a.Alias, a.Version, a.CanaryVersion, a.CanaryPercent))
			}
			slices.Sort(out)
			return out
		}
		if got, want := list("support"), []string{"support@dev=2/0:0", "support@prod=2/0:0"}; !slices.Equal(got, want) {
			t.Errorf("ListAliases(support) = %v, want %v", got, want)
		}
		if got, want := list(""), []string{"billing@prod=1/0:0", "support@dev=2/0:0", "support@prod=2/0:0"}; !slices.Equal(got, want) {
			t.Errorf("ListAliases(\"\") = %v, want %v", got, want)
		}
	})
}

// testRetire runs after Versions: support@1 and @2 and billing@1 exist.
func testRetire(t *testing.T, s store.Store) {
	ctx := t.Context()
	v1, err := s.GetAgentVersion(ctx, "support", 1)
	ok(t, "GetAgentVersion", err)
	if !v1.RetiredAt.IsZero() {
		t.Fatalf("a fresh version has RetiredAt %v, want zero (live)", v1.RetiredAt)
	}
	at := Base.Add(5 * time.Hour)
	ok(t, "RetireAgentVersion", s.RetireAgentVersion(ctx, "support", 1, at))
	got, err := s.GetAgentVersion(ctx, "support", 1)
	ok(t, "GetAgentVersion(retired)", err)
	want := *v1
	want.RetiredAt = at
	checkAgentVersion(t, got, &want)
	// Retiring again keeps the first time; nothing else changes.
	ok(t, "RetireAgentVersion(again)", s.RetireAgentVersion(ctx, "support", 1, at.Add(time.Hour)))
	got, err = s.GetAgentVersion(ctx, "support", 1)
	ok(t, "GetAgentVersion(retired twice)", err)
	checkAgentVersion(t, got, &want)

	vs, err := s.ListAgentVersions(ctx, "")
	ok(t, "ListAgentVersions", err)
	for _, v := range vs {
		retired := v.Name == "support" && v.Version == 1
		if retired != !v.RetiredAt.IsZero() || retired && !v.RetiredAt.Equal(at) {
			t.Errorf("listed %s@%d RetiredAt = %v; only support@1 is retired (at %v)", v.Name, v.Version, v.RetiredAt, at)
		}
	}
	wantErr(t, "RetireAgentVersion(missing version)", s.RetireAgentVersion(ctx, "support", 9, at), store.ErrNotFound)
	wantErr(t, "RetireAgentVersion(missing agent)", s.RetireAgentVersion(ctx, "nobody", 1, at), store.ErrNotFound)
	// Storing the identical content again does not bring it back.
	created, err := s.PutAgentVersion(ctx, agentVersion("support", 1, string(v1.Spec)))
	ok(t, "PutAgentVersion(identical, retired)", err)
	if created {
		t.Fatal("PutAgentVersion of a retired version's content: created = true")
	}
	if got, err := s.GetAgentVersion(ctx, "support", 1); err != nil || got.RetiredAt.IsZero() {
		t.Fatalf("after re-put: %+v, %v; the version must stay retired", got, err)
	}
}

func checkAgentVersion(t *testing.T, got, want *store.AgentVersion) {
	t.Helper()
	if got.Name != want.Name || got.Version != want.Version || !bytes.Equal(got.Spec, want.Spec) ||
		got.SpecHash != want.SpecHash || !got.CreatedAt.Equal(want.CreatedAt) || !got.RetiredAt.Equal(want.RetiredAt) {
		t.Fatalf("agent version = {%s v%d %s %x %v}, want {%s v%d %s %x %v}",
			got.Name, got.Version, got.Spec, got.SpecHash[:6], got.CreatedAt,
			want.Name, want.Version, want.Spec, want.SpecHash[:6], want.CreatedAt)
	}
}

func checkAlias(t *testing.T, got, want *store.Alias) {
	t.Helper()
	if got.Agent != want.Agent || got.Alias != want.Alias || got.Version != want.Version ||
		got.CanaryVersion != want.CanaryVersion || got.CanaryPercent != want.CanaryPercent || !got.UpdatedAt.Equal(want.UpdatedAt) {
		t.Fatalf("alias = %+v, want %+v", got, want)
	}
}

func toolRecord(name, manifest string, created time.Time) *store.ToolRecord {
	return &store.ToolRecord{Name: name, Manifest: []byte(manifest), Hash: sha256.Sum256([]byte(manifest)), CreatedAt: created}
}

func testTools(t *testing.T, s store.Store) {
	v1 := toolRecord("lookup_order", `{"name":"lookup_order","version":1}`, Base)
	v2 := toolRecord("lookup_order", `{"name":"lookup_order","version":2}`, Base.Add(time.Hour))
	other := toolRecord("refund", `{"name":"refund"}`, Base.Add(time.Minute))
	for _, tr := range []*store.ToolRecord{v1, other, v2} {
		ok(t, "PutTool("+tr.Name+")", s.PutTool(t.Context(), tr))
	}
	got, err := s.GetTool(t.Context(), "lookup_order")
	ok(t, "GetTool", err)
	checkTool(t, "GetTool(lookup_order)", got, v2)

	for _, want := range []*store.ToolRecord{v1, v2, other} {
		got, err := s.GetToolByHash(t.Context(), want.Hash)
		ok(t, "GetToolByHash", err)
		checkTool(t, "GetToolByHash", got, want)
	}
	_, err = s.GetTool(t.Context(), "missing")
	wantErr(t, "GetTool(missing)", err, store.ErrNotFound)
	_, err = s.GetToolByHash(t.Context(), sha256.Sum256([]byte("missing")))
	wantErr(t, "GetToolByHash(missing)", err, store.ErrNotFound)

	list, err := s.ListTools(t.Context())
	ok(t, "ListTools", err)
	slices.SortFunc(list, func(a, b *store.ToolRecord) int { return bytes.Compare([]byte(a.Name), []byte(b.Name)) })
	if len(list) != 2 {
		t.Fatalf("ListTools = %d records, want 2 (one current per name)", len(list))
	}
	checkTool(t, "ListTools[0]", list[0], v2)
	checkTool(t, "ListTools[1]", list[1], other)

	// Storing the same manifest again is harmless.
	ok(t, "PutTool(again)", s.PutTool(t.Context(), toolRecord("lookup_order", string(v2.Manifest), Base.Add(time.Hour))))
	got, err = s.GetTool(t.Context(), "lookup_order")
	ok(t, "GetTool", err)
	checkTool(t, "GetTool after re-put", got, v2)
}

func checkTool(t *testing.T, what string, got, want *store.ToolRecord) {
	t.Helper()
	if got.Name != want.Name || !bytes.Equal(got.Manifest, want.Manifest) || got.Hash != want.Hash || !got.CreatedAt.Equal(want.CreatedAt) {
		t.Fatalf("%s = {%s %s %x %v}, want {%s %s %x %v}", what,
			got.Name, got.Manifest, got.Hash[:6], got.CreatedAt, want.Name, want.Manifest, want.Hash[:6], want.CreatedAt)
	}
}

func testSignals(t *testing.T, s store.Store) {
	newRun(t, s, "r", modeAsync, Base)
	newRun(t, s, "other", modeAsync, Base)
	var sent []*store.Signal
	for i, kind := range []string{"message", "approval", "cancel"} {
		sg := &store.Signal{RunID: "r", Kind: kind, Payload: fmt.Appendf(nil, `{"i":%d}`, i), CreatedAt: Base.Add(time.Duration(i) * time.Second)}
		if kind == "cancel" {
			sg.Payload = nil // a signal need not carry a payload
		}
		ok(t, "SendSignal", s.SendSignal(t.Context(), sg))
		if sg.ID == 0 {
			t.Fatal("SendSignal left ID zero")
		}
		for _, prev := range sent {
			if prev.ID == sg.ID {
				t.Fatalf("SendSignal reused id %d", sg.ID)
			}
		}
		sent = append(sent, sg)
	}
	ok(t, "SendSignal(other)", s.SendSignal(t.Context(), &store.Signal{RunID: "other", Kind: "message", Payload: []byte(`{}`)}))

	pending, err := s.PendingSignals(t.Context(), "r")
	ok(t, "PendingSignals", err)
	if len(pending) != len(sent) {
		t.Fatalf("PendingSignals = %d, want %d", len(pending), len(sent))
	}
	for i, got := range pending {
		want := sent[i]
		if got.ID != want.ID || got.RunID != "r" || got.Kind != want.Kind || !bytes.Equal(got.Payload, want.Payload) ||
			!got.CreatedAt.Equal(want.CreatedAt) || got.Consumed {
			t.Fatalf("pending[%d] = %+v, want %+v (in send order)", i, got, want)
		}
	}

	ok(t, "MarkSignalConsumed", s.MarkSignalConsumed(t.Context(), sent[1].ID))
	checkPending(t, s, "r", []int64{sent[0].ID, sent[2].ID})
	ok(t, "MarkSignalConsumed", s.MarkSignalConsumed(t.Context(), sent[0].ID))
	ok(t, "MarkSignalConsumed", s.MarkSignalConsumed(t.Context(), sent[2].ID))
	checkPending(t, s, "r", nil)
	if p, err := s.PendingSignals(t.Context(), "other"); err != nil || len(p) != 1 {
		t.Fatalf("PendingSignals(other) = %d signals, %v; want the 1 sent to it", len(p), err)
	}
	checkPending(t, s, "no-such-run", nil)
}
