package sandbox

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"sort"
	"sync"
	"time"

	"github.com/agentplane/agentplane/sandbox/egress"
	"github.com/agentplane/agentplane/trace"
)

// ManagerOptions configure a Manager.
type ManagerOptions struct {
	// Executors by tier (2, 3). Unavailable ones are left out at Start.
	Executors map[int]Executor
	// DowngradeTier3 lets a tier-3 tool run on the tier-2 executor when no
	// tier-3 executor is available. It is an operator's decision, logged at
	// Start and recorded on every affected call's boundary.
	DowngradeTier3 bool
	// Egress serves the proxy socket of sandboxes whose tool has a network
	// allowlist (default: a proxy with the system resolver).
	Egress *egress.Proxy
	// Warm is how many ready sandboxes to keep per image and tier
	// (default 2 for tier 3, 1 for tier 2; negative: none).
	Warm map[int]int
	// IdleTTL destroys a run's sandbox unused this long (default 5 min);
	// MaxTTL destroys any sandbox this old (default 30 min); WarmTTL
	// refreshes a pooled one (default 10 min). ReapEvery is the reaper's
	// period (default 5 s).
	IdleTTL, MaxTTL, WarmTTL, ReapEvery time.Duration
	// OnTeardown receives every destroyed sandbox's record.
	OnTeardown func(Teardown)
	Logger     *slog.Logger
	Clock      func() time.Time
}

// Teardown records how a sandbox ended.
type Teardown struct {
	ID       string
	Executor string
	Tenant   string
	RunID    string
	By       string // caller | reaper | nobody
	Reason   string
	At       time.Time
	Uses     int
	Err      string
}

// Request is one tool call to run in a run's sandbox.
type Request struct {
	Tier   int
	Tenant string
	RunID  string
	Tool   string
	Spec   Spec
	// Allow is the tool's network allowlist (host:port).
	Allow []string
	Exec  Exec
	// Collect lists workspace files to read back after the command, at
	// most CollectLimit bytes each.
	Collect      []string
	CollectLimit int64
}

// Call is what the Manager reports of one request.
type Call struct {
	Result   Result
	Boundary Boundary
	// Files holds the collected files that existed and fit.
	Files map[string][]byte
	// GuestSpans are the spans the program emitted (ParseGuestSpans);
	// nil when it emitted none.
	GuestSpans *trace.GuestSpans
}

// Boundary is the host's record of one call at the sandbox boundary.
type Boundary struct {
	ID            string
	Host          string
	Executor      string
	Tier          int
	RequestedTier int
	Downgraded    bool
	Lifecycle     string
	ProvisionMS   int64
	WallMS        int64
	BytesIn       int64
	Teardown      string
	Traceparent   string
	Egress        []egress.Attempt
	// Provision and Wall are ProvisionMS and WallMS at full resolution.
	Provision, Wall time.Duration
}

// ErrNoExecutor is returned for a tier with no executor on this host.
var ErrNoExecutor = errors.New("no sandbox executor for this tier on this host")

type poolKey struct {
	tier int
	spec Spec
}

// sessionKey names a session: one sandbox per tool in a run. Two tools never
// share one, so one tool's program (or model-written code) cannot leave
// anything in a workspace that another tool, holding another credential,
// then runs.
type sessionKey struct {
	tenant, run, tool string
	tier              int
	spec              Spec
}

type pooled struct {
	sb      Sandbox
	created time.Time
	ms      int64
}

type session struct {
	// guestSpans counts the spans its commands emitted (capped by
	// MaxGuestSpansPerSession).
	guestSpans int
	key        sessionKey
	sb         Sandbox
	exec       string
	mu         sync.Mutex // one call at a time
	created    time.Time
	lastUsed   time.Time
	uses       int
	busy       bool
	gone       bool
	proxy      *egress.Listener
}

// Manager hands sandboxes to runs: one sandbox per run session (never
// shared between runs or tenants, destroyed afterwards), taken from a warm
// pool per image when one is ready, reaped past its TTL. Safe for
// concurrent use; Start before use, Stop when done.
type Manager struct {
	o     ManagerOptions
	host  string
	execs map[int]Executor

	mu       sync.Mutex
	pools    map[poolKey][]pooled
	filling  map[poolKey]int
	sessions map[sessionKey]*session
	// reaped holds the reaper's records of sandboxes of runs that have not
	// ended yet, for their EndRun (at most maxReapedRuns runs).
	reaped  map[runKey]*reapedRun
	stopped bool
	stop    chan struct{}
	wg      sync.WaitGroup
}

// NewManager returns a manager; call Start.
func NewManager(o ManagerOptions) *Manager {
	if o.IdleTTL <= 0 {
		o.IdleTTL = 5 * time.Minute
	}
	if o.MaxTTL <= 0 {
		o.MaxTTL = 30 * time.Minute
	}
	if o.WarmTTL <= 0 {
		o.WarmTTL = 10 * time.Minute
	}
	if o.ReapEvery <= 0 {
		o.ReapEvery = 5 * time.Second
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Clock == nil {
		o.Clock = time.Now
	}
	if o.Egress == nil {
		o.Egress = egress.New(egress.Options{Logger: o.Logger})
	}
	host, _ := os.Hostname()
	return &Manager{o: o, host: host, execs: map[int]Executor{}, pools: map[poolKey][]pooled{},
		filling: map[poolKey]int{}, sessions: map[sessionKey]*session{}, reaped: map[runKey]*reapedRun{}, stop: make(chan struct{})}
}

// Start sweeps what a crashed process left (recorded as teardown by
// nobody), logs which tiers are available, and starts the reaper.
func (m *Manager) Start(ctx context.Context) error {
	for tier, e := range m.o.Executors {
		if e == nil {
			continue
		}
		if err := e.Available(); err != nil {
			m.o.Logger.Warn("sandbox tier unavailable: its tools fail closed", "tier", tier, "executor", e.Capabilities().Name, "reason", err.Error())
			continue
		}
		m.execs[tier] = e
		if sw, ok := e.(Sweeper); ok {
			ids, err := sw.Sweep(ctx)
			for _, id := range ids {
				m.teardown(Teardown{ID: id, Executor: e.Capabilities().Name, By: TeardownNobody, Reason: "left over by an earlier process"})
			}
			if err != nil {
				m.o.Logger.Error("sandbox sweep", "executor", e.Capabilities().Name, "err", err)
			}
		}
		m.o.Logger.Info("sandbox tier available", "tier", tier, "executor", e.Capabilities().Name)
	}
	if m.execs[3] == nil && m.o.DowngradeTier3 {
		if m.execs[2] != nil {
			m.o.Logger.Warn("OPERATOR OVERRIDE: tier-3 tools (model-generated code) will run in the tier-2 container, which shares the host kernel; every such call is recorded as downgraded")
		} else {
			m.o.Logger.Warn("tier-3 downgrade requested but no tier-2 executor is available either")
		}
	}
	m.wg.Add(1)
	go m.reaper()
	return nil
}

// Stop destroys every sandbox (teardown by caller) and stops the reaper.
// Idempotent.
func (m *Manager) Stop() {
	m.mu.Lock()
	if m.stopped {
		m.mu.Unlock()
		return
	}
	m.stopped = true
	close(m.stop)
	sessions := make([]*session, 0, len(m.sessions))
	for _, s := range m.sessions {
		sessions = append(sessions, s)
	}
	m.sessions = map[sessionKey]*session{}
	pools := m.pools
	m.pools = map[poolKey][]pooled{}
	m.mu.Unlock()
	m.wg.Wait()
	for _, s := range sessions {
		m.endSession(s, TeardownCaller, "platform stopping")
	}
	for k, ps := range pools {
		for _, p := range ps {
			m.destroy(p.sb, k.tier, "", "", 0, TeardownCaller, "platform stopping")
		}
	}
}

// Executor returns the executor that serves tier, and whether it is a
// downgrade.
func (m *Manager) Executor(tier int) (Executor, bool, error) {
	if e := m.execs[tier]; e != nil {
		return e, false, nil
	}
	if tier == 3 && m.o.DowngradeTier3 && m.execs[2] != nil {
		return m.execs[2], true, nil
	}
	return nil, false, fmt.Errorf("%w: tier %d", ErrNoExecutor, tier)
}

// Run runs one request in the run's sandbox, creating or taking one from
// the pool if the run has none yet. A Go error means the sandbox failed;
// the returned Call still carries what was measured.
func (m *Manager) Run(ctx context.Context, req Request) (Call, error) {
	e, down, err := m.Executor(req.Tier)
	if err != nil {
		return Call{}, err
	}
	spec := req.Spec.Normalize()
	tier := e.Capabilities().Tier
	key := sessionKey{tenant: req.Tenant, run: req.RunID, tool: req.Tool, tier: tier, spec: spec}
	b := Boundary{Host: m.host, Executor: e.Capabilities().Name, Tier: tier, Downgraded: down}
	if down {
		b.RequestedTier = req.Tier
	}
	if ValidTraceparent(req.Exec.Traceparent) {
		b.Traceparent = req.Exec.Traceparent
	}
	for _, f := range req.Exec.Files {
		b.BytesIn += int64(len(f.Data))
	}
	b.BytesIn += int64(len(req.Exec.Stdin))

	t0 := m.o.Clock()
	s, lifecycle, err := m.session(ctx, key, e, req)
	b.Provision = m.o.Clock().Sub(t0)
	b.ProvisionMS = b.Provision.Milliseconds()
	b.Lifecycle = lifecycle
	if err != nil {
		return Call{Boundary: b}, err
	}
	defer func() {
		m.mu.Lock()
		s.busy = false
		m.mu.Unlock()
		s.mu.Unlock()
	}()
	b.ID = s.sb.ID()
	req.Exec.Egress = s.proxy != nil
	if s.proxy != nil {
		s.proxy.TakeAttempts()
	}
	t1 := m.o.Clock()
	res, err := s.sb.Exec(ctx, req.Exec)
	b.Wall = m.o.Clock().Sub(t1)
	b.WallMS = b.Wall.Milliseconds()
	if s.proxy != nil {
		b.Egress = s.proxy.TakeAttempts()
	}
	call := Call{Result: res, Boundary: b}
	if err == nil && b.Traceparent != "" {
		call.GuestSpans = m.guestSpans(ctx, s, t1, t1.Add(b.Wall))
	}
	if err == nil {
		for _, p := range req.Collect {
			limit := req.CollectLimit
			if limit <= 0 {
				limit = 1 << 20
			}
			if data, rerr := s.sb.ReadFile(ctx, p, limit); rerr == nil {
				if call.Files == nil {
					call.Files = map[string][]byte{}
				}
				call.Files[p] = data
			}
		}
	}
	m.mu.Lock()
	s.lastUsed = m.o.Clock()
	s.uses++
	m.mu.Unlock()
	// A sandbox whose command did not end cleanly is in a state nobody
	// vouches for: it is destroyed now, never used again.
	if reason := unclean(res, err); reason != "" {
		m.mu.Lock()
		if m.sessions[key] == s {
			delete(m.sessions, key)
		}
		m.mu.Unlock()
		m.endSessionLocked(s, TeardownCaller, reason)
		call.Boundary.Teardown = TeardownCaller
	}
	return call, err
}

// unclean says why a sandbox may not serve another command after this one,
// or "" when it may: the sandbox failed, the command was killed (by the
// host's timer, the OOM killer or another signal), its runtime crashed, or
// the executor found it unclean (the wrapper's report never came, or
// processes outlived the command).
func unclean(res Result, err error) string {
	switch {
	case err != nil:
		return "sandbox failed"
	case res.Unclean != "":
		return "command did not end cleanly: " + res.Unclean
	case res.Outcome == OutcomeOOM, res.Outcome == OutcomeCrashed, res.Outcome == OutcomeTimeout, res.Outcome == OutcomeKilled:
		return "command ended " + res.Outcome
	}
	return ""
}

// session returns the run's sandbox for key, locked for one call.
func (m *Manager) session(ctx context.Context, key sessionKey, e Executor, req Request) (*session, string, error) {
	m.mu.Lock()
	if m.stopped {
		m.mu.Unlock()
		return nil, "", errors.New("sandbox manager stopped")
	}
	if s, ok := m.sessions[key]; ok && !s.gone {
		s.busy = true
		m.mu.Unlock()
		s.mu.Lock()
		if s.gone { // reaped while we waited
			s.mu.Unlock()
			return m.session(ctx, key, e, req)
		}
		return s, LifecycleReused, nil
	}
	pk := poolKey{tier: key.tier, spec: key.spec}
	var sb Sandbox
	lifecycle := LifecycleCreated
	if ps := m.pools[pk]; len(ps) > 0 {
		sb = ps[len(ps)-1].sb
		m.pools[pk] = ps[:len(ps)-1]
		lifecycle = LifecycleWarm
	}
	m.mu.Unlock()
	m.refill(pk, e)
	if sb == nil {
		var err error
		if sb, err = e.Create(ctx, key.spec); err != nil {
			return nil, lifecycle, err
		}
	}
	s := &session{key: key, sb: sb, exec: e.Capabilities().Name, created: m.o.Clock(), busy: true}
	s.lastUsed = s.created
	if len(req.Allow) > 0 && e.Capabilities().Egress && sb.EgressSocket() != "" {
		l, err := m.o.Egress.Serve(sb.EgressSocket(), egress.Policy{Tenant: key.tenant, RunID: key.run, SandboxID: sb.ID(), Tool: req.Tool, Allow: req.Allow})
		if err != nil {
			m.destroy(sb, key.tier, key.tenant, key.run, 0, TeardownCaller, "egress proxy failed")
			return nil, lifecycle, err
		}
		s.proxy = l
	}
	s.mu.Lock()
	m.mu.Lock()
	if old, ok := m.sessions[key]; ok && !old.gone {
		// Another call of the same run won the race: use its sandbox.
		m.mu.Unlock()
		s.mu.Unlock()
		m.endSession(s, TeardownCaller, "duplicate session")
		return m.session(ctx, key, e, req)
	}
	m.sessions[key] = s
	m.mu.Unlock()
	return s, lifecycle, nil
}

// refill starts warm sandboxes in the background up to the pool's size.
func (m *Manager) refill(pk poolKey, e Executor) {
	want := 1
	if pk.tier == 3 {
		want = 2
	}
	if n, ok := m.o.Warm[pk.tier]; ok {
		want = n
	}
	m.mu.Lock()
	need := want - len(m.pools[pk]) - m.filling[pk]
	if m.stopped || need <= 0 {
		m.mu.Unlock()
		return
	}
	m.filling[pk] += need
	m.mu.Unlock()
	for i := 0; i < need; i++ {
		m.wg.Add(1)
		go func() {
			defer m.wg.Done()
			t0 := m.o.Clock()
			sb, err := e.Create(context.Background(), pk.spec)
			m.mu.Lock()
			m.filling[pk]--
			if err != nil {
				m.mu.Unlock()
				m.o.Logger.Error("warm sandbox", "executor", e.Capabilities().Name, "err", err)
				return
			}
			if m.stopped {
				m.mu.Unlock()
				m.destroy(sb, pk.tier, "", "", 0, TeardownCaller, "platform stopping")
				return
			}
			m.pools[pk] = append(m.pools[pk], pooled{sb: sb, created: m.o.Clock(), ms: m.o.Clock().Sub(t0).Milliseconds()})
			m.mu.Unlock()
		}()
	}
}

// Prewarm fills the pool for spec at tier now (at startup, say).
func (m *Manager) Prewarm(tier int, spec Spec) error {
	e, _, err := m.Executor(tier)
	if err != nil {
		return err
	}
	m.refill(poolKey{tier: e.Capabilities().Tier, spec: spec.Normalize()}, e)
	return nil
}

// WaitWarm waits until the pool for spec at tier holds n sandboxes, or ctx
// ends (benchmarks, tests).
func (m *Manager) WaitWarm(ctx context.Context, tier int, spec Spec, n int) error {
	e, _, err := m.Executor(tier)
	if err != nil {
		return err
	}
	pk := poolKey{tier: e.Capabilities().Tier, spec: spec.Normalize()}
	for {
		m.mu.Lock()
		have := len(m.pools[pk])
		m.mu.Unlock()
		if have >= n {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// EndRun destroys the run's sandboxes (teardown by caller) and returns
// their records, with those of the run's sandboxes the reaper destroyed
// earlier (while the run waited, say).
func (m *Manager) EndRun(ctx context.Context, tenant, runID string) []Teardown {
	m.mu.Lock()
	var ended []*session
	for k, s := range m.sessions {
		if k.tenant == tenant && k.run == runID {
			ended = append(ended, s)
			delete(m.sessions, k)
		}
	}
	var out []Teardown
	if r := m.reaped[runKey{tenant, runID}]; r != nil {
		for _, td := range r.recs {
			out = append(out, *td)
		}
		delete(m.reaped, runKey{tenant, runID})
	}
	m.mu.Unlock()
	for _, s := range ended {
		out = append(out, m.endSession(s, TeardownCaller, "run ended"))
	}
	return out
}

// reapedRun is what the reaper did to one run's sandboxes.
type reapedRun struct {
	recs  []*Teardown
	added time.Time
}

// reapingLocked notes, under m.mu and in the same critical section that
// removes the session, that the reaper is destroying a run's sandbox, so an
// EndRun that comes before the destruction ends still reports it. The
// record is filled in when it has. Runs that never end are bounded: the
// oldest is dropped.
func (m *Manager) reapingLocked(s *session, now time.Time) *Teardown {
	if s.key.run == "" {
		return nil
	}
	rk := runKey{s.key.tenant, s.key.run}
	r := m.reaped[rk]
	if r == nil {
		if len(m.reaped) >= maxReapedRuns {
			var oldest runKey
			first := true
			for k, v := range m.reaped {
				if first || v.added.Before(m.reaped[oldest].added) {
					oldest, first = k, false
				}
			}
			delete(m.reaped, oldest)
		}
		r = &reapedRun{added: now}
		m.reaped[rk] = r
	}
	td := &Teardown{ID: s.sb.ID(), Executor: s.exec, Tenant: s.key.tenant, RunID: s.key.run, By: TeardownReaper, Reason: "past its TTL (being destroyed)"}
	r.recs = append(r.recs, td)
	return td
}

// maxReapedRuns bounds the reaper records kept for runs that have not ended.
const maxReapedRuns = 4096

type runKey struct{ tenant, run string }

// Sessions lists the live sessions' sandbox ids, sorted (tests).
func (m *Manager) Sessions() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []string
	for _, s := range m.sessions {
		out = append(out, s.sb.ID())
	}
	sort.Strings(out)
	return out
}

func (m *Manager) endSession(s *session, by, reason string) Teardown {
	s.mu.Lock()
	defer s.mu.Unlock()
	return m.endSessionLocked(s, by, reason)
}

func (m *Manager) endSessionLocked(s *session, by, reason string) Teardown {
	m.mu.Lock()
	if s.gone {
		m.mu.Unlock()
		return Teardown{ID: s.sb.ID(), Executor: s.exec, Tenant: s.key.tenant, RunID: s.key.run, By: by, Reason: "already destroyed"}
	}
	s.gone = true
	uses := s.uses
	m.mu.Unlock()
	if s.proxy != nil {
		_ = s.proxy.Close()
	}
	return m.destroy(s.sb, s.key.tier, s.key.tenant, s.key.run, uses, by, reason)
}

func (m *Manager) destroy(sb Sandbox, tier int, tenant, run string, uses int, by, reason string) Teardown {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	err := sb.Destroy(ctx)
	td := Teardown{ID: sb.ID(), Tenant: tenant, RunID: run, By: by, Reason: reason, Uses: uses}
	if e := m.execs[tier]; e != nil {
		td.Executor = e.Capabilities().Name
	}
	if err != nil {
		td.Err = err.Error()
	}
	return m.teardown(td)
}

func (m *Manager) teardown(td Teardown) Teardown {
	td.At = m.o.Clock()
	m.o.Logger.Info("sandbox teardown", "sandbox", td.ID, "executor", td.Executor, "tenant", td.Tenant, "run", td.RunID,
		"teardown_by", td.By, "reason", td.Reason, "uses", td.Uses, "err", td.Err)
	if m.o.OnTeardown != nil {
		m.o.OnTeardown(td)
	}
	return td
}

// Reap destroys sessions idle past IdleTTL or older than MaxTTL, and warm
// sandboxes older than WarmTTL (teardown by reaper). The reaper calls it
// every ReapEvery; tests call it directly.
func (m *Manager) Reap() {
	now := m.o.Clock()
	m.mu.Lock()
	var expired []*session
	var records []*Teardown
	for k, s := range m.sessions {
		if s.busy {
			if now.Sub(s.created) <= m.o.MaxTTL {
				continue
			}
		} else if now.Sub(s.lastUsed) <= m.o.IdleTTL && now.Sub(s.created) <= m.o.MaxTTL {
			continue
		}
		expired = append(expired, s)
		records = append(records, m.reapingLocked(s, now))
		delete(m.sessions, k)
	}
	var stale []pooled
	var staleTier []int
	for k, ps := range m.pools {
		keep := ps[:0]
		for _, p := range ps {
			if now.Sub(p.created) > m.o.WarmTTL {
				stale = append(stale, p)
				staleTier = append(staleTier, k.tier)
			} else {
				keep = append(keep, p)
			}
		}
		m.pools[k] = keep
	}
	m.mu.Unlock()
	for i, s := range expired {
		// A busy session past MaxTTL is destroyed under the running call:
		// Destroy kills the command.
		m.mu.Lock()
		s.gone = true
		uses := s.uses
		m.mu.Unlock()
		if s.proxy != nil {
			_ = s.proxy.Close()
		}
		td := m.destroy(s.sb, s.key.tier, s.key.tenant, s.key.run, uses, TeardownReaper, "past its TTL")
		if rec := records[i]; rec != nil {
			m.mu.Lock()
			*rec = td
			m.mu.Unlock()
		}
	}
	for i, p := range stale {
		m.destroy(p.sb, staleTier[i], "", "", 0, TeardownReaper, "warm sandbox past its TTL")
	}
}

func (m *Manager) reaper() {
	defer m.wg.Done()
	t := time.NewTicker(m.o.ReapEvery)
	defer t.Stop()
	for {
		select {
		case <-m.stop:
			return
		case <-t.C:
			m.Reap()
		}
	}
}

// guestSpans reads and empties the spans file a command may have written
// (a program that has ended cannot write to it again: a sandbox whose
// processes outlive a command is destroyed), and parses it as hostile
// input within the session's budget.
func (m *Manager) guestSpans(ctx context.Context, s *session, start, end time.Time) *trace.GuestSpans {
	data, err := s.sb.ReadFile(ctx, GuestSpansFile, MaxGuestSpansBytes)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		data = nil
	}
	if len(data) == 0 && err == nil {
		return nil
	}
	// Emptied so that the next command of a reused sandbox starts afresh.
	_ = s.sb.WriteFile(ctx, GuestSpansFile, nil)
	if err != nil {
		return &trace.GuestSpans{Dropped: 1, Reasons: []string{fmt.Sprintf("the spans file could not be read or is over %d bytes", MaxGuestSpansBytes)}}
	}
	gs := ParseGuestSpans(data, start, end, MaxGuestSpansPerSession-s.guestSpans)
	if gs != nil {
		s.guestSpans += len(gs.Spans)
	}
	return gs
}
