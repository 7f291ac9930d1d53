// Package authz decides what an agent may do on behalf of the user it runs
// for. Every run acts for one principal (a user of a tenant); there is no
// platform-wide identity to fall back on. A tool call is authorised when:
//
//   - the user is known in the run's tenant (unless the tool declares auth
//     mode none: it acts with no identity at all);
//   - for auth modes on_behalf_of_user and service, the user holds every
//     scope the tool's manifest names, so the agent can never do what its
//     user could not (the agent version's grant has already limited which
//     tools it may call: the effective permission is grant ∩ user ∩
//     manifest);
//   - every binding of the user holds: a user bound to customer_id=c_88213
//     can only make calls whose customer_id argument, if any, is c_88213.
//
// A background run acts as the user who scheduled it. A Directory says who
// users are; the embedded default reads the SQLite store
// (store.PrincipalStore), and Static holds principals in memory.
package authz

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/agentplane/agentplane/store"
	"github.com/agentplane/agentplane/tool"
)

// ErrUnknownUser is returned (wrapped) for a user the directory does not
// know in the tenant.
var ErrUnknownUser = errors.New("unknown user")

// Principal is a user of a tenant and their permissions.
type Principal struct {
	Tenant string
	User   string
	// Scopes are resource:action pairs, sorted.
	Scopes []string
	// Groups are sorted group names.
	Groups []string
	// Bindings map argument names to the only value the user's calls may
	// pass for them.
	Bindings map[string]string
}

// CheckRunBindings validates a run's bindings (the argument values one run
// may act on, such as the customer a ticket is about) and checks them
// against p's own: a run may narrow what its user may touch, never widen it.
func CheckRunBindings(p *Principal, run map[string]string) error {
	if len(run) > maxRunBindings {
		return fmt.Errorf("at most %d run bindings", maxRunBindings)
	}
	var errs []error
	for _, k := range sortedKeys(run) {
		v := run[k]
		if !reArgName.MatchString(k) {
			errs = append(errs, fmt.Errorf("run binding %q: want an argument name", clip(k)))
			continue
		}
		if v == "" || len(v) > maxBindingValue || !utf8.ValidString(v) || strings.ContainsFunc(v, notPlain) {
			errs = append(errs, fmt.Errorf("run binding %s: want a value of 1 to %d bytes of printable text without spaces", k, maxBindingValue))
			continue
		}
		if p != nil {
			if own, ok := p.Bindings[k]; ok && own != v {
				errs = append(errs, fmt.Errorf("user %q may only act on %s %q, so a run cannot be bound to %s %q", p.User, k, own, k, v))
			}
		}
	}
	return errors.Join(errs...)
}

// notPlain is true for runes a binding value may not hold: controls,
// spaces, and invisible format characters (bidi overrides, zero widths).
func notPlain(r rune) bool {
	return unicode.IsControl(r) || unicode.IsSpace(r) || unicode.Is(unicode.Cf, r)
}

// clip shortens hostile text quoted in an error.
func clip(s string) string {
	if len(s) > 80 {
		return s[:80] + "…"
	}
	return s
}

// AuthorizeRun checks a call's arguments against the run's own bindings:
// a call that names a bound argument must name the bound value. It returns
// nil or a *Denied.
func AuthorizeRun(run map[string]string, args json.RawMessage) error {
	return matchBindings(run, args, func(k, v string, raw json.RawMessage) string {
		return fmt.Sprintf("this run may only act on %s %s (bound when it started), and this call names %s", k, v, bytes.TrimSpace(raw))
	})
}

// HasScope reports whether p holds scope.
func (p *Principal) HasScope(scope string) bool {
	_, ok := slices.BinarySearch(p.Scopes, scope)
	return ok
}

// InGroup reports whether p belongs to group.
func (p *Principal) InGroup(group string) bool {
	_, ok := slices.BinarySearch(p.Groups, group)
	return ok
}

// Directory looks users up. Implementations are safe for concurrent use.
type Directory interface {
	// Principal returns the user's permissions in tenant, or an error
	// wrapping ErrUnknownUser. Any other error means the directory could
	// not answer, and the caller must deny.
	Principal(ctx context.Context, tenant, user string) (*Principal, error)
}

var (
	reName    = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._@+-]{0,127}$`)
	reScope   = regexp.MustCompile(`^[a-z][a-z0-9_.-]*:[a-z][a-z0-9_.-]*$`)
	reGroup   = regexp.MustCompile(`^[a-z][a-z0-9_.-]{0,63}$`)
	reArgName = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)
)

const (
	maxEntries      = 256
	maxRunBindings  = 16
	maxBindingValue = 256
)

// New validates and normalises a principal: tenant and user names, scopes
// (resource:action, lower case), groups, and bindings (argument names to
// values). Scopes and groups are sorted and deduplicated.
func New(tenant, user string, scopes, groups []string, bindings map[string]string) (*Principal, error) {
	var errs []error
	if !reName.MatchString(tenant) {
		errs = append(errs, fmt.Errorf("tenant %q: want letters, digits and . _ @ + -, at most 128", tenant))
	}
	if !reName.MatchString(user) {
		errs = append(errs, fmt.Errorf("user %q: want letters, digits and . _ @ + -, at most 128", user))
	}
	if len(scopes) > maxEntries || len(groups) > maxEntries || len(bindings) > maxEntries {
		errs = append(errs, fmt.Errorf("at most %d scopes, groups and bindings each", maxEntries))
	}
	for _, s := range scopes {
		if !reScope.MatchString(s) || len(s) > 128 {
			errs = append(errs, fmt.Errorf("scope %q: want resource:action in lower case, e.g. refunds:write", s))
		}
	}
	for _, g := range groups {
		if !reGroup.MatchString(g) {
			errs = append(errs, fmt.Errorf("group %q: want lower case letters, digits, _, . and -, starting with a letter", g))
		}
	}
	b := make(map[string]string, len(bindings))
	for k, v := range bindings {
		if !reArgName.MatchString(k) {
			errs = append(errs, fmt.Errorf("binding %q: want an argument name", k))
		}
		if v == "" || len(v) > maxBindingValue {
			errs = append(errs, fmt.Errorf("binding %s: want a value of 1 to %d bytes", k, maxBindingValue))
		}
		b[k] = v
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return &Principal{Tenant: tenant, User: user, Scopes: normalise(scopes), Groups: normalise(groups), Bindings: b}, nil
}

func normalise(ss []string) []string {
	out := slices.Clone(ss)
	sort.Strings(out)
	return slices.Compact(out)
}

// Denied is a refusal, with a reason meant for the model and the log.
type Denied struct{ Reason string }

func (d *Denied) Error() string { return d.Reason }

// Authorize decides whether an agent acting for p (nil: a user the
// directory does not know) may call the tool m with args, the call's
// canonical JSON arguments. It returns nil or a *Denied. Arguments that are
// not a JSON object are left to the schema check that follows.
func Authorize(tenant, user string, p *Principal, m *tool.Manifest, args json.RawMessage) error {
	if p == nil {
		if m.Auth.Mode == tool.AuthNone {
			return nil
		}
		return &Denied{Reason: fmt.Sprintf("user %q is not known in tenant %q, and %s acts on a user's behalf; an agent can only act for a user the platform knows",
			user, tenant, m.Name)}
	}
	if p.Tenant != tenant || p.User != user {
		return &Denied{Reason: fmt.Sprintf("the principal looked up (%s/%s) is not the run's user (%s/%s)", p.Tenant, p.User, tenant, user)}
	}
	if m.Auth.Mode != tool.AuthNone {
		var missing []string
		for _, s := range m.Auth.Scopes {
			if !p.HasScope(s) {
				missing = append(missing, s)
			}
		}
		if len(missing) > 0 {
			return &Denied{Reason: fmt.Sprintf("user %q lacks %s %s, which %s needs; the agent can only do what its user may do",
				user, plural(len(missing), "scope", "scopes"), strings.Join(missing, ", "), m.Name)}
		}
	}
	return matchBindings(p.Bindings, args, func(k, v string, raw json.RawMessage) string {
		return fmt.Sprintf("user %q may only act on %s %s, and this call names %s", user, k, v, bytes.TrimSpace(raw))
	})
}

// matchBindings refuses args whose top-level value for a bound name is not
// the bound string.
func matchBindings(bindings map[string]string, args json.RawMessage, reason func(k, v string, raw json.RawMessage) string) error {
	if len(bindings) == 0 {
		return nil
	}
	top, err := topLevel(args)
	if err != nil {
		// Not a JSON object: the schema check, which comes next, refuses
		// it; there is nothing here a binding could match.
		return nil
	}
	// Tools decode arguments with encoding/json, which matches names
	// without regard to case (Unicode folds included: "cuſtomer_id" fills
	// CustomerID). A name that folds to a bound one but is not it is
	// refused, so the value checked is the value the tool reads.
	for name := range top {
		for k := range bindings {
			if name != k && strings.EqualFold(name, k) {
				return &Denied{Reason: fmt.Sprintf("argument %q differs from the bound argument %s only in case; refused", clip(name), k)}
			}
		}
	}
	for _, k := range sortedKeys(bindings) {
		raw, ok := top[k]
		if !ok {
			continue
		}
		var got string
		if err := json.Unmarshal(raw, &got); err != nil || got != bindings[k] {
			return &Denied{Reason: reason(k, bindings[k], raw)}
		}
	}
	return nil
}

func topLevel(args json.RawMessage) (map[string]json.RawMessage, error) {
	var top map[string]json.RawMessage
	if err := json.Unmarshal(args, &top); err != nil {
		return nil, err
	}
	return top, nil
}

func sortedKeys(m map[string]string) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// Static is an in-memory Directory. It is safe for concurrent reads; it is
// not meant to change after it is built.
type Static struct {
	m map[[2]string]*Principal
}

// NewStatic returns a directory of ps.
func NewStatic(ps ...*Principal) *Static {
	s := &Static{m: map[[2]string]*Principal{}}
	for _, p := range ps {
		s.m[[2]string{p.Tenant, p.User}] = p
	}
	return s
}

// Principal implements Directory.
func (s *Static) Principal(_ context.Context, tenant, user string) (*Principal, error) {
	if p, ok := s.m[[2]string{tenant, user}]; ok {
		return p, nil
	}
	return nil, fmt.Errorf("%s/%s: %w", tenant, user, ErrUnknownUser)
}

// FromStore is the embedded default Directory: principals kept in the
// platform's store.
func FromStore(ps store.PrincipalStore) Directory { return storeDirectory{ps} }

type storeDirectory struct{ ps store.PrincipalStore }

func (d storeDirectory) Principal(ctx context.Context, tenant, user string) (*Principal, error) {
	sp, err := d.ps.GetPrincipal(ctx, tenant, user)
	if errors.Is(err, store.ErrNotFound) {
		return nil, fmt.Errorf("%s/%s: %w", tenant, user, ErrUnknownUser)
	}
	if err != nil {
		return nil, err
	}
	return &Principal{Tenant: sp.Tenant, User: sp.User, Scopes: normalise(sp.Scopes), Groups: normalise(sp.Groups), Bindings: sp.Bindings}, nil
}

// Put validates p's fields and stores it in ps, replacing any principal of
// the same tenant and user.
func Put(ctx context.Context, ps store.PrincipalStore, p *Principal) error {
	v, err := New(p.Tenant, p.User, p.Scopes, p.Groups, p.Bindings)
	if err != nil {
		return err
	}
	return ps.PutPrincipal(ctx, &store.Principal{Tenant: v.Tenant, User: v.User, Scopes: v.Scopes, Groups: v.Groups, Bindings: v.Bindings})
}
