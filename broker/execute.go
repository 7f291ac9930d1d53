package broker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/agentplane/agentplane/authz"
	"github.com/agentplane/agentplane/redact"
	"github.com/agentplane/agentplane/secrets"
	"github.com/agentplane/agentplane/tool"
	"github.com/agentplane/agentplane/trace"
)

// Credentials mints the credential of one call; secrets.Broker is the
// embedded implementation (mcphost.Credentials adds users' OAuth tokens).
// Issue must return an error wrapping secrets.ErrNotFound when the tenant
// has no secret for the connector, and one wrapping
// secrets.ErrNotConnected when the user has not connected their account.
type Credentials interface {
	Issue(ctx context.Context, r secrets.Request) (*secrets.Credential, error)
}

// credentialSlack is added to a tool's timeout to make its credential's
// lifetime: long enough for the call, useless soon after.
const credentialSlack = 30_000 // ms

// maxSidecarBytes bounds a sandbox's own report kept in the boundary record.
const maxSidecarBytes = 8 << 10

// executeSecured re-authorises the call as its user, attaches a credential
// minted for it, runs it, and cleans the output.
func (b *Broker) executeSecured(ctx context.Context, m *tool.Manifest, call tool.Call) (Execution, error) {
	call.Credential = "" // only the broker attaches credentials
	scrub := b.redactR
	// The run's bindings hold at the time of use too, whatever path led here.
	if err := authz.AuthorizeRun(call.Bindings, call.Args); err != nil {
		return b.refused(ControlAuthz, err.Error()), nil
	}
	if m.Auth.Mode != tool.AuthNone {
		// Time of use: permissions may have changed since the decision (an
		// approval can take a day), so they are checked again.
		pr, d, ok := b.principal(ctx, call.Tenant, call.User)
		if !ok {
			return b.refused(ControlAuthz, d.Reason), nil
		}
		if err := authz.Authorize(call.Tenant, call.User, pr, m, call.Args); err != nil {
			return b.refused(ControlAuthz, "authorisation withdrawn before the call ran: "+err.Error()), nil
		}
		cred, err := b.credential(ctx, m, call)
		if err != nil {
			return b.refused(ControlCredential, err.Error()), nil
		}
		call.Credential = cred.Token
		scrub = b.redactR.With(cred.Redact...)
	}
	ex, err := b.execute(ctx, m, call)
	if err != nil {
		return ex, err
	}
	out, rep := scrub.Output(ex.Output, b.o.MaxOutputBytes)
	ex.Output, ex.Bytes, ex.Truncated, ex.Redactions = out, rep.Bytes, rep.Truncated, rep.Redactions
	if info := ex.Boundary; info != nil && info.Claim != nil {
		cl := info.Claim
		if len(cl.Report) > 0 {
			sc, _ := scrub.Output(cl.Report, maxSidecarBytes)
			if !json.Valid(sc) {
				sc, _ = json.Marshal(string(sc))
			}
			cl.Report = sc
		}
		if cl.Error != "" {
			cl.Error = scrub.Error(errors.New(cl.Error))
		}
	}
	return ex, nil
}

// ControlCredential names a call stopped at execution because no credential
// could be minted for it.
const ControlCredential = "credential"

// refused is the result of a call stopped at execution time.
func (b *Broker) refused(control, reason string) Execution {
	reason, _ = b.redactR.Text(reason, redact.TextOptions{MaxBytes: maxReasonBytes})
	out, _ := json.Marshal(map[string]string{"error": reason, "control": control})
	return Execution{Status: trace.StatusDenied, Output: out, Bytes: int64(len(out))}
}

// credential mints the call's credential: audience the tool's connector
// (the tool itself when it has none), scopes the manifest's (which the user
// holds: Authorize checked), life the tool's timeout plus a little.
func (b *Broker) credential(ctx context.Context, m *tool.Manifest, call tool.Call) (*secrets.Credential, error) {
	if b.o.Credentials == nil {
		return nil, fmt.Errorf("%s needs a credential and no credential broker is configured; refusing to call it without one", m.Name)
	}
	aud := m.Connector
	if aud == "" {
		aud = m.Name
	}
	cred, err := b.o.Credentials.Issue(ctx, secrets.Request{Tenant: call.Tenant, User: call.User, Connector: aud, Tool: m.Name,
		Scopes: m.Auth.Scopes, Agent: call.Agent, RunID: call.RunID, IdempotencyKey: call.IdempotencyKey,
		TTL: msDuration(int64(m.TimeoutMS) + credentialSlack)})
	switch {
	case errors.Is(err, secrets.ErrNotConnected):
		// The user's own account is not connected: the reason says how.
		return nil, err
	case errors.Is(err, secrets.ErrNotFound):
		return nil, fmt.Errorf("%s needs a credential for connector %s, and tenant %s has none configured; an administrator must store one (agentplane users secret set TENANT CONNECTOR --random, or from stdin)",
			m.Name, aud, call.Tenant)
	case err != nil:
		b.o.Logger.Error("credential broker failed", "tool", m.Name, "run", call.RunID, "err", b.redactR.Error(err))
		return nil, fmt.Errorf("%s could not get a credential; the call was not made", m.Name)
	}
	return cred, nil
}

func msDuration(ms int64) time.Duration { return time.Duration(ms) * time.Millisecond }
