package platform

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/agentplane/agentplane/internal/addrpolicy"
	"github.com/agentplane/agentplane/mcphost"
	"github.com/agentplane/agentplane/secrets"
	"github.com/agentplane/agentplane/store"
	"github.com/agentplane/agentplane/tool"
)

// MCPOptions configure the MCP host (package mcphost).
type MCPOptions struct {
	// AllowLoopback lets http connectors reach this machine's loopback
	// addresses: tests and single-machine setups only, never a default.
	AllowLoopback bool
	// Launcher runs stdio servers in a sandbox (default: a tier-2 sandbox
	// of the platform's sandbox manager when one is configured; without
	// either, stdio connectors are refused).
	Launcher mcphost.Launcher
	// Servers is the host folder of installed stdio servers (an npm
	// prefix) mounted read-only into their sandboxes at /opt/agentplane.
	Servers string
	// State is the host folder where stdio servers keep data that
	// outlives their sandboxes (STATE/TENANT/CONNECTOR, bound read-write
	// at /var/lib/agentplane); "" gives them none.
	State string
	// IdleTimeout closes a run's session with a server unused this long.
	IdleTimeout time.Duration
}

func (p *Platform) openMCP(o Options) error {
	p.connectors = &connectorRegistry{st: p.Store}
	if o.MCP.Launcher == nil && p.Sandboxes != nil {
		o.MCP.Launcher = &mcphost.SandboxLauncher{Manager: p.Sandboxes.Manager, Folder: o.MCP.Servers, State: o.MCP.State}
	}
	policy := &addrpolicy.Policy{Loopback: o.MCP.AllowLoopback}
	if us, ok := p.Secrets.(secrets.UserStore); ok {
		// Users' OAuth tokens are sealed beside the tenants' secrets.
		var err error
		if p.oauth, err = mcphost.NewOAuth(mcphost.OAuthOptions{Store: us, Policy: policy, Clock: o.Clock}); err != nil {
			return err
		}
	}
	var err error
	p.MCP, err = mcphost.New(mcphost.Options{Registry: p.connectors, Policy: policy, OAuth: p.oauth,
		Launcher: o.MCP.Launcher, IdleTimeout: o.MCP.IdleTimeout, Logger: o.Logger, Clock: o.Clock})
	return err
}

// ConnectAccount begins connecting user's own account to an oauth
// connector of the tenant: it returns the authorization server's URL for
// the user to open. The authorization server sends the browser to
// redirectURI with the code and state FinishConnect takes, as the same
// user.
func (p *Platform) ConnectAccount(ctx context.Context, tenant, user, name, redirectURI string) (string, error) {
	v, err := p.GetConnector(ctx, tenant, name)
	if err != nil {
		return "", err
	}
	if p.oauth == nil {
		return "", errors.New("connect account: the secrets store keeps no per-user secrets, so OAuth tokens cannot be held")
	}
	return p.oauth.Start(ctx, tenant, user, v.Spec, redirectURI)
}

// DisconnectAccount deletes user's token for a connector of the tenant.
func (p *Platform) DisconnectAccount(ctx context.Context, tenant, user, name string) error {
	if _, err := p.GetConnector(ctx, tenant, name); err != nil {
		return err
	}
	if p.oauth == nil {
		return errors.New("disconnect account: the secrets store keeps no per-user secrets")
	}
	return p.oauth.Disconnect(ctx, tenant, user, name)
}

// FinishConnect completes ConnectAccount for the same user with the
// authorization server's answer; the token is stored sealed.
func (p *Platform) FinishConnect(ctx context.Context, tenant, user, name string, cb mcphost.Callback) error {
	v, err := p.GetConnector(ctx, tenant, name)
	if err != nil {
		return err
	}
	if p.oauth == nil {
		return errors.New("connect account: the secrets store keeps no per-user secrets, so OAuth tokens cannot be held")
	}
	return p.oauth.Finish(ctx, tenant, user, v.Spec, cb)
}

// connectorRegistry is mcphost.Registry over the store: a stored
// connector parsed once per content.
type connectorRegistry struct {
	st    store.ConnectorStore
	mu    sync.Mutex
	cache map[[32]byte]*mcphost.Connector
}

func (r *connectorRegistry) Connector(ctx context.Context, name string) (*mcphost.Connector, error) {
	all, err := r.st.ListConnectors(ctx, "")
	if err != nil {
		return nil, err
	}
	for _, rec := range all {
		if rec.Name == name {
			return r.parse(rec)
		}
	}
	return nil, fmt.Errorf("connector %s: %w", name, mcphost.ErrUnknown)
}

func (r *connectorRegistry) parse(rec *store.Connector) (*mcphost.Connector, error) {
	h := sha256.New()
	for _, b := range [][]byte{[]byte(rec.Tenant), rec.Spec, rec.Overlays, rec.Snapshot} {
		fmt.Fprintf(h, "%d:", len(b))
		h.Write(b)
	}
	var key [32]byte
	h.Sum(key[:0])
	r.mu.Lock()
	c := r.cache[key]
	r.mu.Unlock()
	if c != nil {
		return c, nil
	}
	spec, err := mcphost.SpecFromJSON(rec.Spec)
	if err != nil {
		return nil, fmt.Errorf("stored connector %s: %w", rec.Name, err)
	}
	c = &mcphost.Connector{Tenant: rec.Tenant, Spec: spec}
	if rec.Snapshot != nil {
		if c.Reviewed, err = mcphost.SnapshotFromJSON(rec.Snapshot); err != nil {
			return nil, fmt.Errorf("stored connector %s: %w", rec.Name, err)
		}
		ov, err := mcphost.ParseOverlays(rec.Overlays)
		if err != nil {
			return nil, fmt.Errorf("stored connector %s: %w", rec.Name, err)
		}
		if c.Manifests, err = mcphost.Manifests(rec.Name, c.Reviewed, ov); err != nil {
			return nil, fmt.Errorf("stored connector %s: %w", rec.Name, err)
		}
	}
	r.mu.Lock()
	if r.cache == nil || len(r.cache) > 1024 {
		r.cache = map[[32]byte]*mcphost.Connector{}
	}
	r.cache[key] = c
	r.mu.Unlock()
	return c, nil
}

// ErrConnectorReview is wrapped by a review that cannot approve what the
// server lists (a tool without an overlay, a name another tool holds, a
// listing that changed since the reviewer saw it).
var ErrConnectorReview = errors.New("connector review refused")

// AddConnector registers (or re-registers) a tenant's connector from its
// definition and its tools' manifest overlays. Its tools are offered to no
// agent until ReviewConnector approves a snapshot; re-registering drops the
// previous review.
func (p *Platform) AddConnector(ctx context.Context, tenant string, spec, overlays []byte) (*mcphost.Spec, error) {
	if tenant == "" {
		return nil, errors.New("add connector: a tenant is required")
	}
	s, err := mcphost.ParseSpec(spec)
	if err != nil {
		return nil, err
	}
	if _, err := mcphost.ParseOverlays(overlays); err != nil {
		return nil, err
	}
	now := time.Now().UTC()
	rec := &store.Connector{Tenant: tenant, Name: s.Name, Spec: s.CanonicalJSON(), Overlays: overlays, CreatedAt: now, UpdatedAt: now}
	if old, err := p.Store.GetConnector(ctx, tenant, s.Name); err == nil {
		rec.CreatedAt = old.CreatedAt
	}
	if err := p.Store.PutConnector(ctx, rec); err != nil {
		return nil, err
	}
	return s, nil
}

// ConnectorView is a connector as shown to its tenant.
type ConnectorView struct {
	Record *store.Connector
	Spec   *mcphost.Spec
	// Reviewed is the approved snapshot (nil before the first review).
	Reviewed *mcphost.Snapshot
	// Tools are the approved tools' manifests.
	Tools []*tool.Manifest
}

// ListConnectors lists a tenant's connectors ("" = every tenant's).
func (p *Platform) ListConnectors(ctx context.Context, tenant string) ([]*ConnectorView, error) {
	recs, err := p.Store.ListConnectors(ctx, tenant)
	if err != nil {
		return nil, err
	}
	out := make([]*ConnectorView, 0, len(recs))
	for _, rec := range recs {
		v, err := p.view(rec)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, nil
}

// GetConnector returns one of the tenant's connectors.
func (p *Platform) GetConnector(ctx context.Context, tenant, name string) (*ConnectorView, error) {
	rec, err := p.Store.GetConnector(ctx, tenant, name)
	if err != nil {
		return nil, err
	}
	return p.view(rec)
}

func (p *Platform) view(rec *store.Connector) (*ConnectorView, error) {
	c, err := p.connectors.parse(rec)
	if err != nil {
		return nil, err
	}
	return &ConnectorView{Record: rec, Spec: c.Spec, Reviewed: c.Reviewed, Tools: c.Manifests}, nil
}

// DiffConnector lists the connector's server now and compares it with the
// reviewed snapshot. The live snapshot is returned with its hash, which a
// review may require (so what is approved is what was shown). A per-user
// OAuth server is listed as user, with their connected account.
func (p *Platform) DiffConnector(ctx context.Context, tenant, name, user string) ([]mcphost.Change, *mcphost.Snapshot, error) {
	v, err := p.GetConnector(ctx, tenant, name)
	if err != nil {
		return nil, nil, err
	}
	live, err := p.MCP.List(ctx, tenant, user, v.Spec)
	if err != nil {
		return nil, nil, err
	}
	return mcphost.Diff(v.Reviewed, live), live, nil
}

// ReviewRequest approves what a connector's server lists now.
type ReviewRequest struct {
	Tenant, Name string
	// Reviewer is who approves (recorded).
	Reviewer string
	// Overlays, when set, replace the connector's overlay file.
	Overlays []byte
	// ExpectHash, when set, must be the live snapshot's hash (as
	// DiffConnector showed it): a server that changed since is refused.
	ExpectHash string
}

// ReviewConnector lists the server (a per-user OAuth server as the
// reviewer, with their connected account), checks every tool has an overlay and
// builds its manifest, then pins the listing as the reviewed snapshot and
// stores the manifests, so agents can be granted them by connector. A tool
// name held by a tool of another source is refused.
func (p *Platform) ReviewConnector(ctx context.Context, r ReviewRequest) (*ConnectorView, error) {
	if r.Reviewer == "" {
		return nil, errors.New("review connector: name the reviewer (--as USER)")
	}
	rec, err := p.Store.GetConnector(ctx, r.Tenant, r.Name)
	if err != nil {
		return nil, err
	}
	spec, err := mcphost.SpecFromJSON(rec.Spec)
	if err != nil {
		return nil, err
	}
	overlays := rec.Overlays
	if r.Overlays != nil {
		overlays = r.Overlays
	}
	ov, err := mcphost.ParseOverlays(overlays)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrConnectorReview, err)
	}
	live, err := p.MCP.List(ctx, r.Tenant, r.Reviewer, spec)
	if err != nil {
		return nil, err
	}
	if r.ExpectHash != "" && live.Hash() != r.ExpectHash {
		return nil, fmt.Errorf("%w: the server's tools changed since the snapshot %s was shown (now %s); look at connectors diff again", ErrConnectorReview, r.ExpectHash, live.Hash())
	}
	ms, err := mcphost.Manifests(r.Name, live, ov)
	if err == nil {
		err = mcphost.CheckAuth(spec, ms)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrConnectorReview, err)
	}
	set, err := p.ToolSet(ctx)
	if err != nil {
		return nil, err
	}
	for _, m := range ms {
		if old, ok := set.Get(m.Name); ok && (old.MCP == nil || old.Connector != r.Name) {
			return nil, fmt.Errorf("%w: tool name %s is already used by %s; give the overlay of %s another name", ErrConnectorReview, m.Name, sourceOf(old), m.MCP.Tool)
		}
	}
	for _, m := range ms {
		if err := p.Store.PutTool(ctx, &store.ToolRecord{Name: m.Name, Manifest: m.CanonicalJSON(), Hash: m.Hash()}); err != nil {
			return nil, err
		}
	}
	now := time.Now().UTC()
	rec.Overlays, rec.Snapshot, rec.SnapshotHash, rec.ReviewedBy, rec.ReviewedAt, rec.UpdatedAt = overlays, live.CanonicalJSON(), live.Hash(), r.Reviewer, now, now
	if err := p.Store.PutConnector(ctx, rec); err != nil {
		return nil, err
	}
	return p.view(rec)
}

func sourceOf(m *tool.Manifest) string {
	switch {
	case m.MCP != nil:
		return "connector " + m.Connector
	case m.Connector != "":
		return "a platform tool of " + m.Connector
	}
	return "a platform tool"
}

// RemoveConnector deletes a tenant's connector. Its tools stay in the
// tool store (manifests are content-addressed and old runs name them) but
// are never offered or called again: the host refuses a connector nobody
// registered.
func (p *Platform) RemoveConnector(ctx context.Context, tenant, name string) error {
	return p.Store.DeleteConnector(ctx, tenant, name)
}

// offerable drops from a run's granted tools every MCP tool the model must
// not be offered: its connector is gone or unreachable, the manifest is not
// its connector's current review, or the server now lists the tool
// differently from the reviewed snapshot (quarantine).
func (p *Platform) offerable(ctx context.Context, ms []*tool.Manifest) []*tool.Manifest {
	quarantine := map[string]map[string]string{} // connector -> server tool -> reason
	failed := map[string]bool{}
	out := ms[:0:0]
	for _, m := range ms {
		if m.MCP == nil {
			out = append(out, m)
			continue
		}
		name := m.Connector
		if _, seen := quarantine[name]; !seen && !failed[name] {
			q, err := p.MCP.Quarantine(ctx, name)
			switch {
			case errors.Is(err, mcphost.ErrPerUser):
				// Listed only as a user: the reviewed descriptions are
				// offered, and each run's own session (as its user)
				// refuses a quarantined tool before calling it.
				quarantine[name] = nil
			case err != nil:
				p.log.Warn("connector unavailable: its tools are not offered", "connector", name, "err", err)
				failed[name] = true
			default:
				quarantine[name] = q
				for tool, why := range q {
					p.log.Warn("MCP tool quarantined: not offered", "connector", name, "tool", tool, "why", why)
				}
			}
		}
		if failed[name] || !p.MCP.Reviewed(m) {
			continue
		}
		if _, q := quarantine[name][m.MCP.Tool]; q {
			continue
		}
		out = append(out, m)
	}
	return out
}
