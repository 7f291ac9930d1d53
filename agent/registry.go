package agent

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/agentplane/agentplane/store"
	"github.com/agentplane/agentplane/tool"
)

// Alias names with a meaning of their own.
const (
	// AliasProd is what a bare agent name resolves to, when set.
	AliasProd = "prod"
	// AliasLatest always points at the highest stored version. Apply
	// maintains it; SetAlias refuses to.
	AliasLatest = "latest"
)

var reAlias = regexp.MustCompile(`^[a-z][a-z0-9_-]{0,31}$`)

// Registry stores agent definitions as immutable versions and resolves
// names, versions and aliases to them. Every definition it returns is bound
// to the tools in force (see Definition.Bind), so a version whose tools
// have gone fails to resolve instead of running without them. A Registry is
// safe for concurrent use if its store is.
type Registry struct {
	store store.AgentStore
	tools func(context.Context) (*tool.Set, error)
	now   func() time.Time
}

// NewRegistry returns a registry over s. tools returns the tool manifests
// currently in force; it is called on every Apply and on every lookup.
func NewRegistry(s store.AgentStore, tools func(context.Context) (*tool.Set, error)) *Registry {
	return &Registry{store: s, tools: tools, now: time.Now}
}

// Apply validates d, checks that every grant resolves against the current
// tools and that every policy condition compiles, and stores it as version d.Version of agent d.Agent. Storing the
// same content again does nothing and returns created=false. Different
// content under a stored version is an error wrapping store.ErrConflict:
// versions are immutable, so bump the version. Apply also points the
// latest alias at the highest stored version. d itself is not changed.
func (r *Registry) Apply(ctx context.Context, d *Definition) (created bool, err error) {
	if d == nil {
		return false, errors.New("agent registry: nil definition")
	}
	spec := d.CanonicalJSON()
	fresh, err := DefinitionFromJSON(spec)
	if err != nil {
		return false, fmt.Errorf("agent %q version %d is invalid: %w", d.Agent, d.Version, err)
	}
	fresh.file, fresh.doc = d.file, d.doc // grants keep their order: errors point into the file
	if _, err := r.bind(ctx, fresh); err != nil {
		return false, err
	}
	if _, err := fresh.CompilePolicies(); err != nil {
		return false, err
	}
	created, err = r.store.PutAgentVersion(ctx, &store.AgentVersion{
		Name:      fresh.Agent,
		Version:   fresh.Version,
		Spec:      spec,
		SpecHash:  sha256.Sum256(spec),
		CreatedAt: r.now().UTC(),
	})
	if errors.Is(err, store.ErrConflict) {
		return false, fmt.Errorf("agent %q version %d already exists with different content; versions are immutable, so bump the version: %w",
			fresh.Agent, fresh.Version, err)
	}
	if err != nil {
		return false, fmt.Errorf("storing agent %q version %d: %w", fresh.Agent, fresh.Version, err)
	}
	if err := r.updateLatest(ctx, fresh.Agent); err != nil {
		return created, err
	}
	return created, nil
}

// updateLatest points the latest alias at the highest stored version. The
// alias only moves forward, and every write is checked by a fresh read, so
// concurrent Applies leave it at the highest version.
func (r *Registry) updateLatest(ctx context.Context, name string) error {
	const maxAttempts = 10
	for attempt := 0; ; attempt++ {
		top, err := r.latestVersion(ctx, name)
		if err != nil {
			return err
		}
		cur, err := r.store.GetAlias(ctx, name, AliasLatest)
		switch {
		case err == nil && cur.Version >= top:
			return nil
		case err != nil && !errors.Is(err, store.ErrNotFound):
			return fmt.Errorf("agent %q: reading alias latest: %w", name, err)
		case attempt == maxAttempts:
			return fmt.Errorf("agent %q: alias latest keeps changing; apply again", name)
		}
		err = r.store.SetAlias(ctx, &store.Alias{Agent: name, Alias: AliasLatest, Version: top, UpdatedAt: r.now().UTC()})
		if err != nil {
			return fmt.Errorf("agent %q: setting alias latest: %w", name, err)
		}
	}
}

// latestVersion returns the highest stored version of name, read from the
// versions themselves so that a concurrent Apply cannot make it stale.
func (r *Registry) latestVersion(ctx context.Context, name string) (int, error) {
	vs, err := r.store.ListAgentVersions(ctx, name)
	if err != nil {
		return 0, fmt.Errorf("agent %q: listing versions: %w", name, err)
	}
	top := 0
	for _, v := range vs {
		if v.Name == name && v.Version > top {
			top = v.Version
		}
	}
	if top == 0 {
		return 0, fmt.Errorf("agent %q: %w", name, store.ErrNotFound)
	}
	return top, nil
}

func (r *Registry) bind(ctx context.Context, d *Definition) (*tool.Set, error) {
	if r.tools == nil {
		return nil, errors.New("agent registry: no tool source")
	}
	set, err := r.tools(ctx)
	if err != nil {
		return nil, fmt.Errorf("agent %q version %d: loading tools: %w", d.Agent, d.Version, err)
	}
	return set, d.Bind(set)
}

// Errors of Resolve and SetAlias, wrapped with the reference they refuse.
var (
	// ErrRetired: the reference leads to a retired version.
	ErrRetired = errors.New("agent version retired")
	// ErrAliasRequired: the caller may start runs only through an alias.
	ErrAliasRequired = errors.New("runs must start through an alias")
)

// Get returns version version of agent name, bound to the current tools.
// A missing version is an error wrapping store.ErrNotFound. Get serves
// retired versions too: a run pinned to a version before it was retired
// loads it on every resume and finishes on it.
func (r *Registry) Get(ctx context.Context, name string, version int) (*Definition, error) {
	d, _, err := r.GetWithTools(ctx, name, version)
	return d, err
}

// GetWithTools is Get, also returning the tools the definition was bound
// to: a caller that needs the granted manifests reads the tools once, and
// the grants and the manifests come from the same read.
func (r *Registry) GetWithTools(ctx context.Context, name string, version int) (*Definition, *tool.Set, error) {
	d, _, set, err := r.get(ctx, name, version)
	return d, set, err
}

func (r *Registry) get(ctx context.Context, name string, version int) (*Definition, *store.AgentVersion, *tool.Set, error) {
	v, err := r.store.GetAgentVersion(ctx, name, version)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("agent %q version %d: %w", name, version, err)
	}
	if sha256.Sum256(v.Spec) != v.SpecHash {
		return nil, nil, nil, fmt.Errorf("agent %q version %d: stored definition does not match its hash", name, version)
	}
	d, err := DefinitionFromJSON(v.Spec)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("agent %q version %d: stored definition is invalid: %w", name, version, err)
	}
	if d.Agent != name || d.Version != version {
		return nil, nil, nil, fmt.Errorf("agent %q version %d: stored definition is %q version %d", name, version, d.Agent, d.Version)
	}
	set, err := r.bind(ctx, d)
	if err != nil {
		return nil, nil, nil, err
	}
	return d, v, set, nil
}

// ResolveOptions narrow what Resolve accepts. The zero value is what a
// new run of a caller without restrictions may name.
type ResolveOptions struct {
	// AliasOnly accepts only aliases: name@ALIAS other than latest, or a
	// bare name while its prod alias is set. A version number, latest,
	// and a bare name without a prod alias fail with ErrAliasRequired.
	AliasOnly bool
	// IncludeRetired resolves retired versions too. Only for looking a
	// version up (an eval judging it in a simulated world), never for a
	// run that acts.
	IncludeRetired bool
}

// Resolve finds the definition a new run should use. ref is "name",
// "name@7" (a version) or "name@prod" (an alias); a bare name means the
// prod alias if set, else the latest version (with o.AliasOnly, only the
// prod alias). When the alias has a canary, CanaryPercent of runs go to
// CanaryVersion, chosen by a hash of runID, so the same run always
// resolves the same way. A retired version is refused (ErrRetired)
// whichever reference leads to it, unless o.IncludeRetired. Resolve
// returns the definition and its version.
func (r *Registry) Resolve(ctx context.Context, ref, runID string, o ResolveOptions) (*Definition, int, error) {
	name, sel, hasSel := strings.Cut(ref, "@")
	if !reAgentName.MatchString(name) || hasSel && sel == "" {
		return nil, 0, fmt.Errorf("agent reference %q: want name, name@VERSION or name@ALIAS", ref)
	}
	if n, err := strconv.Atoi(sel); err == nil {
		if n < 1 {
			return nil, 0, fmt.Errorf("agent reference %q: versions start at 1", ref)
		}
		if o.AliasOnly {
			return nil, 0, fmt.Errorf("agent reference %q: %w: this tenant starts runs by alias (for example %s@%s), not by version number",
				ref, ErrAliasRequired, name, AliasProd)
		}
		return r.pick(ctx, ref, name, n, o)
	}
	alias := sel
	if !hasSel {
		alias = AliasProd
	}
	if alias == AliasLatest {
		if o.AliasOnly {
			return nil, 0, fmt.Errorf("agent reference %q: %w: this tenant starts runs by alias (for example %s@%s), not by latest",
				ref, ErrAliasRequired, name, AliasProd)
		}
		return r.resolveLatest(ctx, ref, name, o)
	}
	if !reAlias.MatchString(alias) {
		return nil, 0, fmt.Errorf("agent reference %q: invalid alias %q", ref, alias)
	}
	a, err := r.store.GetAlias(ctx, name, alias)
	switch {
	case errors.Is(err, store.ErrNotFound) && !hasSel && o.AliasOnly:
		return nil, 0, fmt.Errorf("agent reference %q: %w: the agent has no %s alias, and this tenant never falls back to the latest version",
			ref, ErrAliasRequired, AliasProd)
	case errors.Is(err, store.ErrNotFound) && !hasSel:
		return r.resolveLatest(ctx, ref, name, o)
	case errors.Is(err, store.ErrNotFound):
		return nil, 0, r.unknownAlias(ctx, name, alias)
	case err != nil:
		return nil, 0, fmt.Errorf("agent %q: reading alias %q: %w", name, alias, err)
	}
	version := a.Version
	if a.CanaryPercent > 0 && a.CanaryVersion > 0 && CanaryBucket(runID) < a.CanaryPercent {
		version = a.CanaryVersion
	}
	return r.pick(ctx, name+"@"+alias, name, version, o)
}

// UnknownAliasError says that an agent exists but has no such alias, and
// names the aliases it has. It matches store.ErrNotFound.
type UnknownAliasError struct {
	Agent, Alias string
	Aliases      []string // sorted
}

func (e *UnknownAliasError) Error() string {
	if len(e.Aliases) == 0 {
		return fmt.Sprintf("agent %s has no alias %s; it has no aliases (name a version number or %s)", e.Agent, e.Alias, AliasLatest)
	}
	return fmt.Sprintf("agent %s has no alias %s; its aliases are %s", e.Agent, e.Alias, strings.Join(e.Aliases, ", "))
}

func (e *UnknownAliasError) Unwrap() error { return store.ErrNotFound }

// unknownAlias reports a missing alias: as a missing agent when the agent
// has no version at all, else as an UnknownAliasError.
func (r *Registry) unknownAlias(ctx context.Context, name, alias string) error {
	if _, err := r.latestVersion(ctx, name); err != nil {
		return err
	}
	als, err := r.store.ListAliases(ctx, name)
	if err != nil {
		return fmt.Errorf("agent %q: listing aliases: %w", name, err)
	}
	e := &UnknownAliasError{Agent: name, Alias: alias}
	for _, a := range als {
		if a.Agent == name {
			e.Aliases = append(e.Aliases, a.Alias)
		}
	}
	sort.Strings(e.Aliases)
	return e
}

// pick loads the version ref led to, refusing a retired one.
func (r *Registry) pick(ctx context.Context, ref, name string, version int, o ResolveOptions) (*Definition, int, error) {
	d, v, _, err := r.get(ctx, name, version)
	if err != nil {
		return nil, 0, err
	}
	if !v.RetiredAt.IsZero() && !o.IncludeRetired {
		how := fmt.Sprintf("agent reference %q leads to version %d", ref, version)
		if ref == fmt.Sprintf("%s@%d", name, version) {
			how = fmt.Sprintf("agent %q version %d", name, version)
		}
		return nil, 0, fmt.Errorf("%s, which was retired at %s: %w; start runs on a live version (move the alias, or apply a new version)",
			how, v.RetiredAt.UTC().Format(time.RFC3339), ErrRetired)
	}
	return d, version, nil
}

func (r *Registry) resolveLatest(ctx context.Context, ref, name string, o ResolveOptions) (*Definition, int, error) {
	top, err := r.latestVersion(ctx, name)
	if err != nil {
		return nil, 0, err
	}
	if ref == name {
		ref = name + "@" + AliasLatest
	}
	return r.pick(ctx, ref, name, top, o)
}

// Retire retires version version of agent name: Resolve refuses it from
// now on, by number and through every alias, and SetAlias refuses to
// point an alias at it; runs already pinned to it finish on it. Retiring
// cannot be undone (apply a new version instead). Retire returns the
// aliases that still point at the version (or send it a canary share),
// whose runs are refused until they move.
func (r *Registry) Retire(ctx context.Context, name string, version int) (stillAliased []string, err error) {
	if !reAgentName.MatchString(name) || version < 1 {
		return nil, fmt.Errorf("retire: want NAME@VERSION, got %s@%d", name, version)
	}
	if err := r.store.RetireAgentVersion(ctx, name, version, r.now().UTC()); err != nil {
		return nil, fmt.Errorf("retire agent %q version %d: %w", name, version, err)
	}
	as, err := r.store.ListAliases(ctx, name)
	if err != nil {
		return nil, fmt.Errorf("agent %q: listing aliases: %w", name, err)
	}
	for _, a := range as {
		if a.Version == version || a.CanaryPercent > 0 && a.CanaryVersion == version {
			stillAliased = append(stillAliased, a.Alias)
		}
	}
	sort.Strings(stillAliased)
	return stillAliased, nil
}

// CanaryBucket places a run in one of 100 buckets (0..99) by a hash of its
// ID. A canary of p percent takes the runs in buckets below p.
func CanaryBucket(runID string) int {
	sum := sha256.Sum256([]byte(runID))
	return int(binary.BigEndian.Uint64(sum[:8]) % 100)
}

// SetAlias points alias of agent name at version, sending canaryPercent
// percent of new runs to canaryVersion instead (0 and 0 for no canary).
// Both versions must exist, be live (not retired: ErrRetired) and still
// resolve their tools. The latest alias
// is maintained by Apply and cannot be set.
func (r *Registry) SetAlias(ctx context.Context, name, alias string, version int, canaryVersion, canaryPercent int) error {
	switch {
	case !reAgentName.MatchString(name):
		return fmt.Errorf("agent name %q is invalid", name)
	case alias == AliasLatest:
		return errors.New("alias latest always points at the highest version and cannot be set")
	case !reAlias.MatchString(alias):
		return fmt.Errorf("alias %q: must be lower case letters, digits, _ and -, starting with a letter, at most 32 characters", alias)
	case canaryPercent < 0 || canaryPercent > 100:
		return fmt.Errorf("alias %q: canary percent must be between 0 and 100 (got %d)", alias, canaryPercent)
	case canaryPercent > 0 && canaryVersion == 0:
		return fmt.Errorf("alias %q: a canary percent needs a canary version", alias)
	case canaryPercent == 0 && canaryVersion != 0:
		return fmt.Errorf("alias %q: a canary version needs a canary percent", alias)
	case canaryVersion != 0 && canaryVersion == version:
		return fmt.Errorf("alias %q: the canary version is the alias's own version %d", alias, version)
	}
	for _, v := range []struct {
		what    string
		version int
	}{{"", version}, {"canary: ", canaryVersion}} {
		if v.version == 0 && v.what != "" {
			continue
		}
		_, sv, _, err := r.get(ctx, name, v.version)
		if err != nil {
			return fmt.Errorf("alias %q: %s%w", alias, v.what, err)
		}
		if !sv.RetiredAt.IsZero() {
			return fmt.Errorf("alias %q: %sversion %d was retired at %s: %w; point the alias at a live version",
				alias, v.what, v.version, sv.RetiredAt.UTC().Format(time.RFC3339), ErrRetired)
		}
	}
	err := r.store.SetAlias(ctx, &store.Alias{
		Agent:         name,
		Alias:         alias,
		Version:       version,
		CanaryVersion: canaryVersion,
		CanaryPercent: canaryPercent,
		UpdatedAt:     r.now().UTC(),
	})
	if err != nil {
		return fmt.Errorf("agent %q: setting alias %q: %w", name, alias, err)
	}
	return nil
}

// Summary describes one agent in the registry.
type Summary struct {
	Name string
	// Versions are the stored versions, ascending.
	Versions []int
	// Retired are the retired versions, ascending.
	Retired []int
	// Aliases are sorted by alias name, latest included.
	Aliases []store.Alias
}

// List describes every agent in the registry, sorted by name.
func (r *Registry) List(ctx context.Context) ([]Summary, error) {
	vs, err := r.store.ListAgentVersions(ctx, "")
	if err != nil {
		return nil, fmt.Errorf("listing agent versions: %w", err)
	}
	byName := map[string]*Summary{}
	for _, v := range vs {
		s := byName[v.Name]
		if s == nil {
			s = &Summary{Name: v.Name}
			byName[v.Name] = s
		}
		s.Versions = append(s.Versions, v.Version)
		if !v.RetiredAt.IsZero() {
			s.Retired = append(s.Retired, v.Version)
		}
	}
	out := make([]Summary, 0, len(byName))
	for _, s := range byName {
		sort.Ints(s.Versions)
		sort.Ints(s.Retired)
		as, err := r.store.ListAliases(ctx, s.Name)
		if err != nil {
			return nil, fmt.Errorf("agent %q: listing aliases: %w", s.Name, err)
		}
		for _, a := range as {
			s.Aliases = append(s.Aliases, *a)
		}
		sort.Slice(s.Aliases, func(i, j int) bool { return s.Aliases[i].Alias < s.Aliases[j].Alias })
		out = append(out, *s)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}
