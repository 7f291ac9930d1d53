package eval

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/agentplane/agentplane/agent"
	"github.com/agentplane/agentplane/authz"
	"github.com/agentplane/agentplane/catalog"
	"github.com/agentplane/agentplane/internal/platform"
	"github.com/agentplane/agentplane/loop"
	"github.com/agentplane/agentplane/model"
	"github.com/agentplane/agentplane/runs"
	"github.com/agentplane/agentplane/secrets"
	"github.com/agentplane/agentplane/store"
	"github.com/agentplane/agentplane/tool"
	"github.com/agentplane/agentplane/trace"
)

// Simulated reports whether an environment of world w can run a tool: only
// the tier-1 functions the world simulates (World.Tools) exist there.
// Anything else (a real connector, a container or microVM tool, a platform
// tool the world does not name) has no simulator, and evals refuse to
// start rather than call it.
func Simulated(w World, m *tool.Manifest) bool {
	return m.Tier == 1 && slices.Contains(w.Tools(), m.Name)
}

// granted resolves an agent version's grants against tools, refusing any
// granted tool without a simulator in w. It returns the granted manifests.
func granted(w World, d *agent.Definition, tools *tool.Set) ([]*tool.Manifest, error) {
	names, err := d.GrantedTools(tools)
	if err != nil {
		return nil, err
	}
	var out []*tool.Manifest
	var missing []string
	for _, n := range names {
		m, _ := tools.Get(n)
		if !Simulated(w, m) {
			missing = append(missing, fmt.Sprintf("%s (tier %d, connector %q)", n, m.Tier, m.Connector))
			continue
		}
		out = append(out, m)
	}
	if len(missing) > 0 {
		sort.Strings(missing)
		return nil, fmt.Errorf("%w: %s@%d is granted %s; evals run against simulated tools only (world %s's), so they refuse to start",
			ErrNoSimulator, d.Agent, d.Version, strings.Join(missing, ", "), w.Name())
	}
	return out, nil
}

// ErrNoSimulator is returned (wrapped) when an agent version is granted a
// tool that has no simulator.
var ErrNoSimulator = errors.New("tool has no simulator")

// harness is what every environment of one eval is built from.
type harness struct {
	set     *Set
	gateway loop.Models
	rates   *model.Rates
	tools   []*tool.Manifest
	workDir string
	keep    bool
}

// env is one simulated environment: a platform in a directory of its own,
// with its own store and its own environment of the set's world. Nothing in
// it reaches outside: the world lives in the directory, and the tools are
// its functions.
type env struct {
	dir   string
	p     *platform.Platform
	world Env
	w     *harness
}

// openEnv builds an environment for task, acting in tenant, where runUser
// (if not one of the set's users) gets the run_as user's permissions.
func (w *harness) openEnv(ctx context.Context, name string, task *Task, tenant, runUser string, agents ...*agent.Definition) (*env, error) {
	dir, err := os.MkdirTemp(w.workDir, "eval-"+name+"-")
	if err != nil {
		return nil, err
	}
	e := &env{dir: dir, w: w}
	fail := func(err error) (*env, error) {
		e.close()
		return nil, fmt.Errorf("task %s: environment: %w", task.ID, err)
	}
	var ps []*authz.Principal
	users := append([]User(nil), w.set.Users...)
	if runUser != "" && !containsUser(users, runUser) {
		for _, u := range w.set.Users {
			if u.User == w.set.User {
				users = append(users, User{User: runUser, Scopes: u.Scopes, Groups: u.Groups})
			}
		}
	}
	for _, u := range users {
		pr, err := authz.New(tenant, u.User, u.Scopes, u.Groups, nil)
		if err != nil {
			return fail(fmt.Errorf("%s: user %s: %w", w.set.File, u.User, err))
		}
		ps = append(ps, pr)
	}
	// Each connector gets a throwaway secret, so the broker mints
	// credentials as it would in production; the simulated world ignores
	// them.
	sec := secrets.NewMemory()
	for _, m := range w.tools {
		aud := m.Connector
		if aud == "" {
			aud = m.Name
		}
		var b [32]byte
		if _, err := rand.Read(b[:]); err != nil {
			return fail(err)
		}
		if err := sec.Put(ctx, tenant, aud, []byte(hex.EncodeToString(b[:]))); err != nil {
			return fail(err)
		}
	}
	if e.world, err = w.set.World.Open(ctx, filepath.Join(dir, "world"), task.Fixture); err != nil {
		return fail(fmt.Errorf("world %s: %w", w.set.World.Name(), err))
	}
	e.p, err = platform.Open(ctx, platform.Options{DataDir: dir, Gateway: w.gateway, Rates: w.rates,
		Principals: authz.NewStatic(ps...), Secrets: sec, LeaseTTL: time.Minute, Tools: []catalog.Registrar{e.world}})
	if err != nil {
		return fail(err)
	}
	if _, err := e.p.ApplyManifests(ctx, w.tools); err != nil {
		return fail(err)
	}
	for _, d := range agents {
		if _, err := e.p.Registry.Apply(ctx, d); err != nil {
			return fail(err)
		}
	}
	return e, nil
}

func (e *env) close() {
	if e.p != nil {
		e.p.Close()
	}
	if e.world != nil {
		e.world.Close()
	}
	if !e.w.keep {
		os.RemoveAll(e.dir)
	}
}

// maxRounds bounds how often a run may wait for approvals.
const maxRounds = 64

// drive executes a run to its end, deciding every approval it waits for
// with the policy. The decisions are recorded in the run's log like any
// human's, with the rule that made them as the comment.
func (e *env) drive(ctx context.Context, runID string, pol *ApprovalPolicy) (*store.Run, error) {
	for range maxRounds {
		if err := e.p.Engine.Drive(ctx, runID); err != nil {
			return nil, err
		}
		r, err := e.p.Store.GetRun(ctx, runID)
		if err != nil {
			return nil, err
		}
		if store.Terminal(r.Status) {
			return r, nil
		}
		if r.Status != store.StatusWaiting {
			return nil, fmt.Errorf("run %s stopped %s", runID, r.Status)
		}
		pend, err := e.p.Runs.PendingApprovals(ctx, r.Tenant)
		if err != nil {
			return nil, err
		}
		n := 0
		for _, a := range pend {
			if a.Run.ID != runID {
				continue
			}
			args, err := loadJSON(ctx, e.p.Store, a.Request.Args)
			if err != nil {
				return nil, err
			}
			dec, rule := pol.Decide(a.Request.Tool, args)
			comment := "eval approval policy: otherwise " + dec
			if rule >= 0 {
				comment = fmt.Sprintf("eval approval policy: rule %d (%s)", rule, pol.Rules[rule].When)
			}
			if err := e.p.Runs.Decide(ctx, runs.DecideRequest{ApprovalID: a.Request.ApprovalID, Tenant: r.Tenant,
				Decider: pol.Decider, Decision: dec, Comment: comment}); err != nil {
				return nil, err
			}
			n++
		}
		if n == 0 {
			return nil, fmt.Errorf("run %s waits, but not for an approval the eval can decide", runID)
		}
	}
	return nil, fmt.Errorf("run %s waited for approvals more than %d times", runID, maxRounds)
}

// loadJSON reads content (inline or a blob) and decodes it for matching.
func loadJSON(ctx context.Context, bs store.BlobStore, c trace.Content) (any, error) {
	b, err := trace.Load(ctx, bs, c)
	if err != nil {
		return nil, err
	}
	return decodeJSON(b)
}
