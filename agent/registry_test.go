package agent

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentplane/agentplane/store"
	"github.com/agentplane/agentplane/tool"
)

type fixture struct {
	reg   *Registry
	store *memStore
	mu    sync.Mutex
	tools *tool.Set
}

func newFixture(t *testing.T) *fixture {
	f := &fixture{store: newMemStore(), tools: testTools(t)}
	f.reg = NewRegistry(f.store, func(context.Context) (*tool.Set, error) {
		f.mu.Lock()
		defer f.mu.Unlock()
		return f.tools, nil
	})
	f.reg.now = func() time.Time { return time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC) }
	return f
}

func (f *fixture) setTools(s *tool.Set) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.tools = s
}

// version returns the card-dispute definition at version v; extra changes
// its content.
func version(t *testing.T, v int, extra string) *Definition {
	t.Helper()
	src := strings.Replace(cardDispute, "version: 7", fmt.Sprintf("version: %d", v), 1)
	if extra != "" {
		src = strings.Replace(src, "You help with card disputes.", extra, 1)
	}
	return parseDef(t, src)
}

func (f *fixture) apply(t *testing.T, d *Definition) {
	t.Helper()
	if _, err := f.reg.Apply(context.Background(), d); err != nil {
		t.Fatalf("Apply v%d: %v", d.Version, err)
	}
}

func TestApply(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	d := version(t, 7, "")
	created, err := f.reg.Apply(ctx, d)
	if err != nil || !created {
		t.Fatalf("first Apply = %v, %v", created, err)
	}
	created, err = f.reg.Apply(ctx, version(t, 7, ""))
	if err != nil || created {
		t.Errorf("identical Apply = %v, %v; want false, nil", created, err)
	}
	_, err = f.reg.Apply(ctx, version(t, 7, "Different instructions."))
	if !errors.Is(err, store.ErrConflict) || !strings.Contains(err.Error(), "already exists with different content") || !strings.Contains(err.Error(), "bump the version") {
		t.Errorf("changed content under version 7: %v", err)
	}
	stored, err := f.store.GetAgentVersion(ctx, "card-dispute-assistant", 7)
	if err != nil {
		t.Fatal(err)
	}
	if string(stored.Spec) != string(d.CanonicalJSON()) || stored.SpecHash != d.Hash() {
		t.Error("stored spec is not the canonical JSON and its hash")
	}
	if d.Grants("issue_refund") {
		t.Error("Apply changed its argument")
	}
}

func TestApplyRejectsUnresolvedGrants(t *testing.T) {
	f := newFixture(t)
	d := parseDef(t, strings.Replace(cardDispute, "tool: get_ticket", "tool: get_jira_ticket", 1))
	_, err := f.reg.Apply(context.Background(), d)
	if err == nil || !strings.Contains(err.Error(), `tool "get_jira_ticket" is not registered`) {
		t.Errorf("Apply = %v", err)
	}
	if vs, _ := f.store.ListAgentVersions(context.Background(), ""); len(vs) != 0 {
		t.Error("an invalid definition was stored")
	}
	broken := version(t, 1, "")
	broken.Budgets.MaxSteps = 0 // changed after loading
	if _, err := f.reg.Apply(context.Background(), broken); err == nil || !strings.Contains(err.Error(), "max_steps") {
		t.Errorf("Apply of an invalid definition = %v", err)
	}
}

func TestLatestAlias(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	f.apply(t, version(t, 3, ""))
	f.apply(t, version(t, 5, ""))
	f.apply(t, version(t, 4, "")) // older: latest stays at 5
	a, err := f.store.GetAlias(ctx, "card-dispute-assistant", AliasLatest)
	if err != nil || a.Version != 5 {
		t.Fatalf("latest = %+v, %v; want version 5", a, err)
	}
	_, v, err := f.reg.Resolve(ctx, "card-dispute-assistant", "run-1", ResolveOptions{})
	if err != nil || v != 5 {
		t.Errorf("bare name without prod = v%d, %v; want latest 5", v, err)
	}
	if err := f.reg.SetAlias(ctx, "card-dispute-assistant", AliasLatest, 3, 0, 0); err == nil {
		t.Error("SetAlias changed latest")
	}
}

func TestLatestAliasConcurrent(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	defs := make([]*Definition, 20)
	for i := range defs {
		defs[i] = version(t, i+1, "")
	}
	var wg sync.WaitGroup
	for _, d := range defs {
		wg.Go(func() {
			if _, err := f.reg.Apply(ctx, d); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	a, err := f.store.GetAlias(ctx, "card-dispute-assistant", AliasLatest)
	if err != nil || a.Version != 20 {
		t.Errorf("latest after concurrent applies = %+v, %v; want 20", a, err)
	}
}

func TestResolve(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	for v := 6; v <= 8; v++ {
		f.apply(t, version(t, v, ""))
	}
	if err := f.reg.SetAlias(ctx, "card-dispute-assistant", AliasProd, 7, 0, 0); err != nil {
		t.Fatal(err)
	}
	if err := f.reg.SetAlias(ctx, "card-dispute-assistant", "staging", 6, 0, 0); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		ref  string
		want int
	}{
		{"card-dispute-assistant", 7},
		{"card-dispute-assistant@prod", 7},
		{"card-dispute-assistant@staging", 6},
		{"card-dispute-assistant@latest", 8},
		{"card-dispute-assistant@8", 8},
		{"card-dispute-assistant@6", 6},
	}
	for _, tt := range tests {
		d, v, err := f.reg.Resolve(ctx, tt.ref, "run-1", ResolveOptions{})
		if err != nil || v != tt.want || d.Version != tt.want {
			t.Errorf("Resolve(%q) = v%d, %v; want v%d", tt.ref, v, err, tt.want)
			continue
		}
		if !d.Grants("issue_refund") || d.Grants("delete_account") {
			t.Errorf("Resolve(%q) returned a definition with wrong grants", tt.ref)
		}
	}
	for ref, want := range map[string]error{
		"card-dispute-assistant@9":      store.ErrNotFound,
		"card-dispute-assistant@canary": store.ErrNotFound,
		"unknown-agent":                 store.ErrNotFound,
	} {
		if _, _, err := f.reg.Resolve(ctx, ref, "run-1", ResolveOptions{}); !errors.Is(err, want) {
			t.Errorf("Resolve(%q) = %v, want %v", ref, err, want)
		}
	}
	for _, ref := range []string{"", "@7", "card-dispute-assistant@", "Card@7", "card-dispute-assistant@0", "card-dispute-assistant@Prod!"} {
		if _, _, err := f.reg.Resolve(ctx, ref, "run-1", ResolveOptions{}); err == nil {
			t.Errorf("Resolve(%q) accepted", ref)
		}
	}
}

func TestCanary(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	f.apply(t, version(t, 7, ""))
	f.apply(t, version(t, 8, ""))
	const name = "card-dispute-assistant"
	if err := f.reg.SetAlias(ctx, name, AliasProd, 7, 8, 10); err != nil {
		t.Fatal(err)
	}
	canary := 0
	for i := range 2000 {
		runID := fmt.Sprintf("run-%d", i)
		_, v, err := f.reg.Resolve(ctx, name, runID, ResolveOptions{})
		if err != nil {
			t.Fatal(err)
		}
		want := 7
		if CanaryBucket(runID) < 10 {
			want = 8
		}
		if v != want {
			t.Fatalf("run %s resolved to v%d, want v%d", runID, v, want)
		}
		if _, again, _ := f.reg.Resolve(ctx, name, runID, ResolveOptions{}); again != v {
			t.Fatalf("run %s resolved to v%d then v%d", runID, v, again)
		}
		if v == 8 {
			canary++
		}
	}
	if canary < 140 || canary > 260 { // 10% of 2000 is 200
		t.Errorf("canary got %d of 2000 runs, want about 200", canary)
	}
	if err := f.reg.SetAlias(ctx, name, AliasProd, 7, 8, 100); err != nil {
		t.Fatal(err)
	}
	if _, v, _ := f.reg.Resolve(ctx, name, "any-run", ResolveOptions{}); v != 8 {
		t.Errorf("100%% canary resolved to v%d", v)
	}
}

func TestSetAliasErrors(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	f.apply(t, version(t, 7, ""))
	f.apply(t, version(t, 8, ""))
	const name = "card-dispute-assistant"
	tests := []struct {
		alias                string
		version, canary, pct int
		want                 string
	}{
		{"prod", 9, 0, 0, "version 9: not found"},
		{"prod", 7, 9, 5, "canary: agent"},
		{"prod", 7, 8, 101, "between 0 and 100"},
		{"prod", 7, 8, -1, "between 0 and 100"},
		{"prod", 7, 0, 5, "needs a canary version"},
		{"prod", 7, 8, 0, "needs a canary percent"},
		{"prod", 7, 7, 5, "own version"},
		{"Prod", 7, 0, 0, "lower case"},
		{"latest", 7, 0, 0, "cannot be set"},
	}
	for _, tt := range tests {
		err := f.reg.SetAlias(ctx, name, tt.alias, tt.version, tt.canary, tt.pct)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("SetAlias(%s, %d, %d, %d) = %v, want %q", tt.alias, tt.version, tt.canary, tt.pct, err, tt.want)
		}
	}
	if _, err := f.store.GetAlias(ctx, name, "prod"); !errors.Is(err, store.ErrNotFound) {
		t.Error("a refused SetAlias stored an alias")
	}
}

func TestGetFailsClosed(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	f.apply(t, version(t, 7, ""))
	const name = "card-dispute-assistant"

	// A tool the version was granted has been removed.
	var kept []*tool.Manifest
	for _, m := range f.tools.Manifests() {
		if m.Name != "issue_refund" {
			kept = append(kept, m)
		}
	}
	smaller, err := tool.NewSet(kept...)
	if err != nil {
		t.Fatal(err)
	}
	f.setTools(smaller)
	if _, err := f.reg.Get(ctx, name, 7); err == nil || !strings.Contains(err.Error(), `"issue_refund" is not registered`) {
		t.Errorf("Get after a granted tool was removed = %v", err)
	}
	f.setTools(testTools(t))

	// The stored spec was altered.
	f.store.mu.Lock()
	v := f.store.versions[name][7]
	v.Spec = []byte(strings.Replace(string(v.Spec), `"max_steps":40`, `"max_steps":1000`, 1))
	f.store.versions[name][7] = v
	f.store.mu.Unlock()
	if _, err := f.reg.Get(ctx, name, 7); err == nil || !strings.Contains(err.Error(), "does not match its hash") {
		t.Errorf("Get of an altered spec = %v", err)
	}
}

// GetWithTools returns the very set the definition was bound to, read
// once: the grants and the manifests a run starts with come from one read
// of the tools, even while they change.
func TestGetWithTools(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	f.apply(t, version(t, 7, ""))
	reads := 0
	sets := []*tool.Set{testTools(t), testTools(t)}
	f.reg.tools = func(context.Context) (*tool.Set, error) {
		s := sets[reads%2] // each read sees the tools as changed again
		reads++
		return s, nil
	}
	d, set, err := f.reg.GetWithTools(ctx, "card-dispute-assistant", 7)
	if err != nil {
		t.Fatal(err)
	}
	if reads != 1 || set != sets[0] {
		t.Fatalf("GetWithTools read the tools %d times and returned set %p, want one read and its set %p", reads, set, sets[0])
	}
	granted, err := d.GrantedTools(set)
	if err != nil || !slices.Equal(granted, d.Granted()) {
		t.Fatalf("granted by the returned set %v (%v), bound %v", granted, err, d.Granted())
	}
}

func TestList(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	f.apply(t, version(t, 2, ""))
	f.apply(t, version(t, 1, ""))
	other := parseDef(t, strings.Replace(cardDispute, "agent: card-dispute-assistant", "agent: another-agent", 1))
	f.apply(t, other)
	if err := f.reg.SetAlias(ctx, "card-dispute-assistant", AliasProd, 1, 2, 5); err != nil {
		t.Fatal(err)
	}
	got, err := f.reg.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].Name != "another-agent" || got[1].Name != "card-dispute-assistant" {
		t.Fatalf("List = %+v", got)
	}
	card := got[1]
	if fmt.Sprint(card.Versions) != "[1 2]" || len(card.Aliases) != 2 || card.Aliases[0].Alias != AliasLatest || card.Aliases[0].Version != 2 ||
		card.Aliases[1].Alias != AliasProd || card.Aliases[1].CanaryVersion != 2 || card.Aliases[1].CanaryPercent != 5 {
		t.Errorf("card-dispute-assistant summary = %+v", card)
	}
}
