package agent

import (
	"bytes"
	"context"
	"sort"
	"sync"
	"time"

	"github.com/agentplane/agentplane/store"
)

// memStore is an in-memory store.AgentStore with the semantics the
// interface documents.
type memStore struct {
	mu       sync.Mutex
	versions map[string]map[int]store.AgentVersion
	aliases  map[string]map[string]store.Alias
}

func newMemStore() *memStore {
	return &memStore{versions: map[string]map[int]store.AgentVersion{}, aliases: map[string]map[string]store.Alias{}}
}

func (s *memStore) PutAgentVersion(_ context.Context, v *store.AgentVersion) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if old, ok := s.versions[v.Name][v.Version]; ok {
		if bytes.Equal(old.Spec, v.Spec) && old.SpecHash == v.SpecHash {
			return false, nil
		}
		return false, store.ErrConflict
	}
	if s.versions[v.Name] == nil {
		s.versions[v.Name] = map[int]store.AgentVersion{}
	}
	c := *v
	c.Spec = bytes.Clone(v.Spec)
	s.versions[v.Name][v.Version] = c
	return true, nil
}

func (s *memStore) GetAgentVersion(_ context.Context, name string, version int) (*store.AgentVersion, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	v, ok := s.versions[name][version]
	if !ok {
		return nil, store.ErrNotFound
	}
	v.Spec = bytes.Clone(v.Spec)
	return &v, nil
}

func (s *memStore) ListAgentVersions(_ context.Context, name string) ([]*store.AgentVersion, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []*store.AgentVersion
	for n, vs := range s.versions {
		if name != "" && n != name {
			continue
		}
		for _, v := range vs {
			v.Spec = bytes.Clone(v.Spec)
			out = append(out, &v)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Name != out[j].Name {
			return out[i].Name < out[j].Name
		}
		return out[i].Version < out[j].Version
	})
	return out, nil
}

func (s *memStore) SetAlias(_ context.Context, a *store.Alias) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.aliases[a.Agent] == nil {
		s.aliases[a.Agent] = map[string]store.Alias{}
	}
	s.aliases[a.Agent][a.Alias] = *a
	return nil
}

func (s *memStore) GetAlias(_ context.Context, agent, alias string) (*store.Alias, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	a, ok := s.aliases[agent][alias]
	if !ok {
		return nil, store.ErrNotFound
	}
	return &a, nil
}

func (s *memStore) ListAliases(_ context.Context, agent string) ([]*store.Alias, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []*store.Alias
	for _, a := range s.aliases[agent] {
		out = append(out, &a)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Alias < out[j].Alias })
	return out, nil
}

var _ store.AgentStore = (*memStore)(nil)

func (s *memStore) RetireAgentVersion(_ context.Context, name string, version int, at time.Time) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	v, ok := s.versions[name][version]
	if !ok {
		return store.ErrNotFound
	}
	if v.RetiredAt.IsZero() {
		v.RetiredAt = at
		s.versions[name][version] = v
	}
	return nil
}
