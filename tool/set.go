package tool

import (
	"errors"
	"fmt"
	"sort"
)

// Set is an immutable collection of loaded manifests with unique names. It
// is safe for concurrent use.
type Set struct {
	byName map[string]*Manifest
	names  []string
}

// NewSet builds a set from loaded manifests. A nil manifest, one not loaded
// through this package (so without a compiled schema) or a name given twice
// is an error.
func NewSet(ms ...*Manifest) (*Set, error) {
	s := &Set{byName: make(map[string]*Manifest, len(ms))}
	var errs []error
	for i, m := range ms {
		switch {
		case m == nil:
			errs = append(errs, fmt.Errorf("tool set: manifest %d is nil", i))
		case m.schema == nil:
			errs = append(errs, fmt.Errorf("tool set: tool %q was not loaded through ParseManifests or ManifestFromJSON", m.Name))
		case s.byName[m.Name] != nil:
			errs = append(errs, fmt.Errorf("tool set: tool %q given twice", m.Name))
		default:
			s.byName[m.Name] = m
			s.names = append(s.names, m.Name)
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	sort.Strings(s.names)
	return s, nil
}

// Get returns the manifest of the tool called name.
func (s *Set) Get(name string) (*Manifest, bool) {
	if s == nil {
		return nil, false
	}
	m, ok := s.byName[name]
	return m, ok
}

// Names lists the tools in the set, sorted.
func (s *Set) Names() []string {
	if s == nil {
		return nil
	}
	return append([]string(nil), s.names...)
}

// Manifests lists the manifests in the set, sorted by name.
func (s *Set) Manifests() []*Manifest {
	if s == nil {
		return nil
	}
	out := make([]*Manifest, len(s.names))
	for i, n := range s.names {
		out[i] = s.byName[n]
	}
	return out
}

// Len is the number of tools in the set.
func (s *Set) Len() int {
	if s == nil {
		return 0
	}
	return len(s.names)
}

// CheckCatalog refuses a set in which a tier-1 tool has no Go function in
// c: such a tool could be granted but never run. Every such tool is named.
func (s *Set) CheckCatalog(c *Catalog) error {
	var errs []error
	for _, m := range s.Manifests() {
		if m.Tier != 1 {
			continue
		}
		if c == nil {
			errs = append(errs, fmt.Errorf("tool %q is tier 1 but there is no catalog of Go functions", m.Name))
			continue
		}
		if _, ok := c.Lookup(m.Name); !ok {
			errs = append(errs, fmt.Errorf("tool %q is tier 1 (in-process Go) but no function is registered for it in the catalog", m.Name))
		}
	}
	return errors.Join(errs...)
}
