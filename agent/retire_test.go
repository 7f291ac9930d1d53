package agent

import (
	"context"
	"errors"
	"slices"
	"testing"
)

// TestClass10RetiredVersions is issue 15 class 10: a caller must not
// escape a newer version's policy by pinning an old version. A retired
// version starts no run by any reference (its number, an alias still
// pointing at it, latest, the bare name), no alias can be moved to it,
// and it still loads for the runs pinned to it before.
func TestClass10RetiredVersions(t *testing.T) {
	ctx := context.Background()
	const name = "card-dispute-assistant"
	f := newFixture(t)
	for v := 1; v <= 3; v++ {
		f.apply(t, version(t, v, ""))
	}
	if err := f.reg.SetAlias(ctx, name, AliasProd, 3, 0, 0); err != nil {
		t.Fatal(err)
	}
	if err := f.reg.SetAlias(ctx, name, "legacy", 1, 0, 0); err != nil {
		t.Fatal(err)
	}
	if err := f.reg.SetAlias(ctx, name, "trial", 2, 3, 100); err != nil {
		t.Fatal(err)
	}
	aliased, err := f.reg.Retire(ctx, name, 1)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(aliased, []string{"legacy"}) {
		t.Errorf("Retire(1) reports aliases %v still pointing at it, want [legacy]", aliased)
	}
	for _, ref := range []string{name + "@1", name + "@legacy"} {
		if _, _, err := f.reg.Resolve(ctx, ref, "run-1", ResolveOptions{}); !errors.Is(err, ErrRetired) {
			t.Errorf("Resolve(%q) after retiring version 1 = %v, want ErrRetired", ref, err)
		}
	}
	for ref, want := range map[string]int{name: 3, name + "@prod": 3, name + "@3": 3, name + "@2": 2} {
		if _, v, err := f.reg.Resolve(ctx, ref, "run-1", ResolveOptions{}); err != nil || v != want {
			t.Errorf("Resolve(%q) = v%d, %v; want v%d (only version 1 is retired)", ref, v, err, want)
		}
	}
	if err := f.reg.SetAlias(ctx, name, "staging", 1, 0, 0); !errors.Is(err, ErrRetired) {
		t.Errorf("SetAlias(staging -> retired 1) = %v, want ErrRetired", err)
	}
	if err := f.reg.SetAlias(ctx, name, AliasProd, 3, 1, 10); !errors.Is(err, ErrRetired) {
		t.Errorf("SetAlias(prod canary -> retired 1) = %v, want ErrRetired", err)
	}
	// A run pinned to version 1 before it was retired loads it to finish.
	if d, err := f.reg.Get(ctx, name, 1); err != nil || d.Version != 1 {
		t.Errorf("Get(1) after retiring = %v, %v; a run in flight must still load its version", d, err)
	}
	// An eval may judge the retired version.
	if _, v, err := f.reg.Resolve(ctx, name+"@1", "", ResolveOptions{IncludeRetired: true}); err != nil || v != 1 {
		t.Errorf("Resolve(@1, IncludeRetired) = v%d, %v", v, err)
	}

	// Retiring the highest version: latest is refused, so are prod and the
	// bare name (both lead to it), and a canary share landing on it.
	if _, err := f.reg.Retire(ctx, name, 3); err != nil {
		t.Fatal(err)
	}
	for _, ref := range []string{name + "@latest", name, name + "@prod", name + "@trial"} {
		if _, _, err := f.reg.Resolve(ctx, ref, "run-1", ResolveOptions{}); !errors.Is(err, ErrRetired) {
			t.Errorf("Resolve(%q) after retiring version 3 = %v, want ErrRetired", ref, err)
		}
	}
	if _, err := f.reg.Retire(ctx, name, 9); err == nil {
		t.Error("Retire of a missing version succeeded")
	}
	list, err := f.reg.List(ctx)
	if err != nil || len(list) != 1 || !slices.Equal(list[0].Retired, []int{1, 3}) {
		t.Errorf("List = %+v, %v; want versions 1 and 3 listed as retired", list, err)
	}
}

// TestClass10AliasOnly: with AliasOnly (a tenant that requires aliases, a
// caller without the admin scope) only aliases other than latest resolve.
func TestClass10AliasOnly(t *testing.T) {
	ctx := context.Background()
	const name = "card-dispute-assistant"
	f := newFixture(t)
	f.apply(t, version(t, 1, ""))
	f.apply(t, version(t, 2, ""))
	only := ResolveOptions{AliasOnly: true}
	// No prod alias yet: a bare name does not fall back to latest.
	for _, ref := range []string{name, name + "@1", name + "@latest"} {
		if _, _, err := f.reg.Resolve(ctx, ref, "run-1", only); !errors.Is(err, ErrAliasRequired) {
			t.Errorf("Resolve(%q, AliasOnly) = %v, want ErrAliasRequired", ref, err)
		}
	}
	if err := f.reg.SetAlias(ctx, name, AliasProd, 2, 0, 0); err != nil {
		t.Fatal(err)
	}
	if err := f.reg.SetAlias(ctx, name, "staging", 1, 0, 0); err != nil {
		t.Fatal(err)
	}
	for ref, want := range map[string]int{name: 2, name + "@prod": 2, name + "@staging": 1} {
		if _, v, err := f.reg.Resolve(ctx, ref, "run-1", only); err != nil || v != want {
			t.Errorf("Resolve(%q, AliasOnly) = v%d, %v; want v%d", ref, v, err, want)
		}
	}
	for _, ref := range []string{name + "@1", name + "@2", name + "@latest"} {
		if _, _, err := f.reg.Resolve(ctx, ref, "run-1", only); !errors.Is(err, ErrAliasRequired) {
			t.Errorf("Resolve(%q, AliasOnly) = %v, want ErrAliasRequired", ref, err)
		}
	}
}
