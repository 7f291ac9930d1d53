package platform

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"sort"
	"sync"

	"github.com/agentplane/agentplane/agent"
	"github.com/agentplane/agentplane/authz"
	"github.com/agentplane/agentplane/secrets"
	"github.com/agentplane/agentplane/tool"
)

// SecretsKeyFile is the key file of the embedded secrets store, inside the
// data directory, used when AGENTPLANE_SECRETS_KEY is not set. It is
// created on first use; production deployments should give the key through
// the environment instead, so that it does not sit beside the data.
const SecretsKeyFile = "secrets.key"

// openSecurity returns the user directory and the secrets store: the ones
// in o, or the embedded defaults (principals in the SQLite store, secrets
// sealed in DataDir/secrets).
func (p *Platform) openSecurity(o Options) error {
	p.Principals = o.Principals
	if p.Principals == nil {
		p.Principals = authz.FromStore(p.Store)
	}
	p.Secrets = o.Secrets
	if p.Secrets == nil {
		fs, err := secrets.OpenFileStore(secrets.FileOptions{Dir: filepath.Join(o.DataDir, "secrets"),
			KeyFile: filepath.Join(o.DataDir, SecretsKeyFile), CreateKey: true})
		if err != nil {
			return err
		}
		p.Secrets = fs
	}
	if p.Directory == nil {
		// Approvers are checked against the same directory as users.
		p.Directory = principalGroups{p.Principals}
	}
	return nil
}

// principalGroups answers approver checks from the user directory.
type principalGroups struct{ d authz.Directory }

func (g principalGroups) InGroup(ctx context.Context, tenant, user, group string) (bool, error) {
	pr, err := g.d.Principal(ctx, tenant, user)
	if errors.Is(err, authz.ErrUnknownUser) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return pr.InGroup(group), nil
}

// policyCache compiles each agent version's policies once. Versions are
// immutable, so a compiled set never goes stale.
type policyCache struct {
	reg *agent.Registry
	mu  sync.Mutex
	m   map[string]*agent.Policies
}

func (c *policyCache) get(ctx context.Context, name string, version int) (*agent.Policies, error) {
	key := fmt.Sprintf("%s@%d", name, version)
	c.mu.Lock()
	ps, ok := c.m[key]
	c.mu.Unlock()
	if ok {
		return ps, nil
	}
	d, err := c.reg.Get(ctx, name, version)
	if err != nil {
		return nil, err
	}
	ps, err = d.CompilePolicies()
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	if c.m == nil {
		c.m = map[string]*agent.Policies{}
	}
	c.m[key] = ps
	c.mu.Unlock()
	return ps, nil
}

// SetUser creates or replaces a user of a tenant with their scopes, groups
// and argument bindings, in the embedded directory.
func (p *Platform) SetUser(ctx context.Context, pr *authz.Principal) error {
	return authz.Put(ctx, p.Store, pr)
}

// Provision makes tenant ready to run agents granted tools: each user in
// users (user -> groups) gets every scope the tools' manifests ask for
// (auth.scopes), and each of their connectors (a tool without one is its
// own) gets a fresh random secret for the credential broker. The demos and
// end-to-end tests use it; production tenants set users and secrets one by
// one (agentplane users).
func (p *Platform) Provision(ctx context.Context, tenant string, users map[string][]string, tools []*tool.Manifest) error {
	var scopes, conns []string
	for _, m := range tools {
		for _, s := range m.Auth.Scopes {
			if !slices.Contains(scopes, s) {
				scopes = append(scopes, s)
			}
		}
		c := m.Connector
		if c == "" {
			c = m.Name
		}
		if !slices.Contains(conns, c) {
			conns = append(conns, c)
		}
	}
	sort.Strings(scopes)
	for user, groups := range users {
		pr, err := authz.New(tenant, user, scopes, groups, nil)
		if err != nil {
			return err
		}
		if err := p.SetUser(ctx, pr); err != nil {
			return err
		}
	}
	for _, conn := range conns {
		b := make([]byte, 32)
		if _, err := rand.Read(b); err != nil {
			return err
		}
		if err := p.Secrets.Put(ctx, tenant, conn, []byte(base64.RawURLEncoding.EncodeToString(b))); err != nil {
			return err
		}
	}
	return nil
}
