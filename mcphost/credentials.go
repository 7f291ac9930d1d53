package mcphost

import (
	"context"
	"errors"
	"fmt"

	"github.com/agentplane/agentplane/broker"
	"github.com/agentplane/agentplane/secrets"
	"github.com/agentplane/agentplane/tool"
)

// Credentials is the broker's credential source (broker.Credentials):
// a call to a connector with per-user OAuth gets the calling user's own
// token for that server (OAuth.Credential: refreshed, audience checked);
// every other call gets what Service mints (secrets.Broker: a short-lived
// credential from the tenant's secret). A user without a token gets an
// error wrapping secrets.ErrNotConnected that says how to connect; no
// other identity is used in their place.
type Credentials struct {
	Service  broker.Credentials
	OAuth    *OAuth
	Registry Registry
}

var _ broker.Credentials = (*Credentials)(nil)

// Issue implements broker.Credentials.
func (c *Credentials) Issue(ctx context.Context, r secrets.Request) (*secrets.Credential, error) {
	conn, err := c.Registry.Connector(ctx, r.Connector)
	switch {
	case errors.Is(err, ErrUnknown):
		// Not a connector: a platform tool's own audience.
	case err != nil:
		return nil, err
	case conn.Spec.Auth == AuthOAuth && conn.Tenant == r.Tenant:
		// (Another tenant's connector of that name is not this tenant's:
		// the call gets the service credential, and the host refuses an
		// MCP call to another tenant's server before it is made.)
		if c.OAuth == nil {
			return nil, fmt.Errorf("connector %s uses per-user OAuth, and this platform has no OAuth client configured", r.Connector)
		}
		return c.OAuth.Credential(ctx, r.Tenant, r.User, conn.Spec)
	}
	if c.Service == nil {
		return nil, errors.New("no credential broker is configured")
	}
	return c.Service.Issue(ctx, r)
}

// CheckAuth refuses manifests that would call a per-user OAuth server
// without the user's token: every tool of such a connector must act on
// behalf of the user (auth.mode on_behalf_of_user), so the broker checks
// the user's scopes and attaches their token.
func CheckAuth(spec *Spec, ms []*tool.Manifest) error {
	if spec.Auth != AuthOAuth {
		return nil
	}
	var errs []error
	for _, m := range ms {
		if m.Auth.Mode != tool.AuthOnBehalfOfUser {
			errs = append(errs, fmt.Errorf("tool %s: connector %s uses per-user OAuth, so its overlay must say auth: {mode: on_behalf_of_user, scopes: [...]} (got %s)", m.Name, spec.Name, m.Auth.Mode))
		}
	}
	return errors.Join(errs...)
}
