package eval

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math/big"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/agentplane/agentplane/store"
)

// Set is an eval set: the tasks of one agent, each with its own state of
// the set's simulated world and the outcome expected, plus what every task shares (who runs it,
// how approvals are decided, what no run may ever do). See
// docs/design/evals.md for the file format.
type Set struct {
	// File is where the set was read from.
	File string
	Name string
	// Agent is the agent the set is written for.
	Agent string
	// World is the simulated environment every task runs in.
	World       World
	Description string
	// Models is the models.yaml the set's tasks run with (absolute), or "".
	Models string
	// Tenant and User are who every task's run acts for.
	Tenant, User string
	// Users are the principals of every simulated environment: the run's
	// user and the approvers.
	Users []User
	// Approvals decides the approvals runs ask for.
	Approvals ApprovalPolicy
	// ReplayMocks are served, in replays, to calls of tools with side
	// effects that leave the recording (see trace.ReplayInfo.Mocks).
	ReplayMocks map[string]json.RawMessage
	// Tasks are the tasks, with the set's expectations merged into each.
	Tasks []*Task
	// base holds the set-wide expectations before binding, to grade
	// recorded runs that match no task.
	base rawExpect
}

// User is a principal of the simulated environment.
type User struct {
	User   string
	Scopes []string
	Groups []string
}

// ApprovalPolicy stands in for the humans who decide approvals: the first
// rule whose call matcher matches the request decides; Otherwise decides
// the rest.
type ApprovalPolicy struct {
	Decider   string
	Rules     []ApprovalRule
	Otherwise string // approve | reject
	rules     []rawRule
}

// ApprovalRule is one rule of an ApprovalPolicy.
type ApprovalRule struct {
	Decision string // approve | reject
	When     CallMatcher
}

type rawRule struct {
	decision string
	when     rawCall
}

// Decide returns the decision for a call and the index of the rule that
// made it (-1 for Otherwise).
func (a *ApprovalPolicy) Decide(toolName string, args any) (string, int) {
	for i, r := range a.Rules {
		if r.When.Matches(toolName, args) {
			return r.Decision, i
		}
	}
	return a.Otherwise, -1
}

// CallMatcher matches a tool call by tool name and arguments.
type CallMatcher struct {
	Tool string
	args matcher // nil: any arguments
	// Status the call must have ended with ("" = any). Required calls
	// default to ok.
	Status string
	// Count, when positive, is how many calls must match exactly.
	Count int
}

// Matches reports whether a call of tool with args (decoded JSON) matches.
func (c CallMatcher) Matches(toolName string, args any) bool {
	return c.Tool == toolName && (c.args == nil || c.args.match(args, true))
}

func (c CallMatcher) String() string {
	s := c.Tool
	if c.args != nil {
		s += " " + c.args.String()
	}
	if c.Status != "" {
		s += " -> " + c.Status
	}
	if c.Count > 0 {
		s += fmt.Sprintf(" ×%d", c.Count)
	}
	return s
}

type rawCall struct {
	tool   string
	args   matcher
	status string
	count  int
}

func (r rawCall) bind(vars map[string]string) CallMatcher {
	c := CallMatcher{Tool: r.tool, Status: r.status, Count: r.count}
	if r.args != nil {
		c.args = bind(r.args, vars)
	}
	return c
}

// Expect is what a task's run must show.
type Expect struct {
	// Status is the run's final status (default completed: a run stopped
	// by a budget ends completed_partial and fails this).
	Status string
	// MaxSteps bounds the model calls (0: no bound beyond the budget).
	MaxSteps int
	// MaxCostMicros bounds the run's cost, in micro-units of CostCurrency.
	MaxCostMicros int64
	CostCurrency  string
	// Calls must each be made (with the status given, default ok).
	Calls []CallMatcher
	// Forbidden calls must never be proposed, even if a control stopped
	// them.
	Forbidden []CallMatcher
	// Records, by kind (World.Records), are exactly the records the run
	// leaves in its world (matched one to one, any order); a kind not
	// named is not checked.
	Records map[string][]matcher
}

type rawExpect struct {
	status              string
	maxSteps            int
	maxCost             int64
	hasCost             bool
	calls, forbidden    []rawCall
	records             map[string][]matcher
	hasStatus, hasSteps bool
}

// Task is one eval task.
type Task struct {
	ID string
	// Text is the run's task.
	Text string
	// Fixture is the task's state of the world (its `world:`), which also
	// gives the variables matchers name.
	Fixture Fixture
	Expect  Expect
	// Approvals is the set's policy bound to this task's variables.
	Approvals ApprovalPolicy
	Line      int
}

// LoadSet reads and checks an eval set file. The set names its world
// (`world:`); worlds are those the caller knows of.
func LoadSet(path string, worlds ...World) (*Set, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, err
	}
	return ParseSet(abs, data, worlds...)
}

var (
	reTaskID = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,63}$`)
	statuses = []string{store.StatusCompleted, store.StatusCompletedPartial, store.StatusFailed, store.StatusCancelled}
	callStat = []string{"ok", "error", "denied", "invalid", "timeout"}
)

// ParseSet parses an eval set strictly: unknown fields, wrong types, bad
// matchers, duplicate task ids or texts and fixtures the world refuses are
// errors that name the file, the line, the task and the field.
func ParseSet(filename string, data []byte, worlds ...World) (*Set, error) {
	var doc yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&doc); err != nil {
		return nil, fmt.Errorf("%s: %w", filename, err)
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); err == nil {
		return nil, fmt.Errorf("%s: more than one YAML document", filename)
	}
	if doc.Kind != yaml.DocumentNode || len(doc.Content) != 1 {
		return nil, fmt.Errorf("%s: empty file", filename)
	}
	p := &parser{file: filename, worlds: worlds}
	s := p.set(doc.Content[0])
	if err := errors.Join(p.errs...); err != nil {
		return nil, err
	}
	return s, nil
}

type parser struct {
	file   string
	task   string
	errs   []error
	worlds []World
	world  World
	// vars are the variables matchers may name ("$customer.email"),
	// sorted.
	vars []string
}

func (p *parser) errAt(n *yaml.Node, field, format string, args ...any) {
	where := p.file
	if n != nil && n.Line > 0 {
		where = fmt.Sprintf("%s:%d", p.file, n.Line)
	}
	if p.task != "" {
		where += ": task " + p.task
	}
	if field != "" {
		where += ": " + field
	}
	p.errs = append(p.errs, fmt.Errorf("%s: %s", where, fmt.Sprintf(format, args...)))
}

func resolveAlias(n *yaml.Node) *yaml.Node {
	for n != nil && n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	return n
}

// mapping returns a mapping's fields, refusing duplicates and, when
// allowed is given, fields it does not list.
func (p *parser) mapping(n *yaml.Node, at string, allowed []string) map[string]*yaml.Node {
	n = resolveAlias(n)
	if n == nil || n.Kind != yaml.MappingNode {
		p.errAt(n, at, "want a mapping")
		return nil
	}
	out := map[string]*yaml.Node{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if k.Kind != yaml.ScalarNode || k.Tag == "!!merge" {
			p.errAt(k, at, "keys must be plain names")
			continue
		}
		field := k.Value
		if at != "" {
			field = at + "." + k.Value
		}
		if _, dup := out[k.Value]; dup {
			p.errAt(k, field, "given twice")
			continue
		}
		if allowed != nil && !contains(allowed, k.Value) {
			p.errAt(k, field, "unknown field (known: %s)", strings.Join(allowed, ", "))
			continue
		}
		out[k.Value] = v
	}
	return out
}

func contains(xs []string, s string) bool {
	for _, x := range xs {
		if x == s {
			return true
		}
	}
	return false
}

func (p *parser) str(n *yaml.Node, at string) (string, bool) {
	n = resolveAlias(n)
	if n == nil || n.Kind != yaml.ScalarNode || n.Tag == "!!null" {
		p.errAt(n, at, "want a string")
		return "", false
	}
	return n.Value, true
}

func (p *parser) nonEmpty(n *yaml.Node, at string) string {
	s, ok := p.str(n, at)
	if ok && strings.TrimSpace(s) == "" {
		p.errAt(n, at, "must not be empty")
	}
	return s
}

func (p *parser) boolean(n *yaml.Node, at string) (bool, bool) {
	n = resolveAlias(n)
	if n == nil || n.Kind != yaml.ScalarNode || n.Tag != "!!bool" {
		p.errAt(n, at, "want true or false")
		return false, false
	}
	return n.Value == "true" || n.Value == "True" || n.Value == "TRUE", true
}

func (p *parser) integer(n *yaml.Node, at string, min, max int64) int64 {
	n = resolveAlias(n)
	if n == nil || n.Kind != yaml.ScalarNode || n.Tag != "!!int" {
		p.errAt(n, at, "want a whole number")
		return 0
	}
	v, err := strconv.ParseInt(n.Value, 10, 64)
	if err != nil || v < min || v > max {
		p.errAt(n, at, "want a whole number from %d to %d", min, max)
		return 0
	}
	return v
}

func (p *parser) strList(n *yaml.Node, at string) []string {
	n = resolveAlias(n)
	if n == nil || n.Kind != yaml.SequenceNode {
		p.errAt(n, at, "want a list of strings")
		return nil
	}
	var out []string
	for i, e := range n.Content {
		if s, ok := p.str(e, fmt.Sprintf("%s[%d]", at, i)); ok {
			out = append(out, s)
		}
	}
	return out
}

func (p *parser) list(n *yaml.Node, at string) []*yaml.Node {
	n = resolveAlias(n)
	if n == nil || n.Kind != yaml.SequenceNode {
		p.errAt(n, at, "want a list")
		return nil
	}
	return n.Content
}

func (p *parser) oneOf(n *yaml.Node, at string, choices []string) string {
	s, ok := p.str(n, at)
	if ok && !contains(choices, s) {
		p.errAt(n, at, "%q is not one of %s", s, strings.Join(choices, ", "))
	}
	return s
}

func (p *parser) set(root *yaml.Node) *Set {
	f := p.mapping(root, "", []string{"set", "agent", "world", "description", "models", "run_as", "users", "approvals", "replay_mocks", "expect", "tasks"})
	if f == nil {
		return nil
	}
	s := &Set{File: p.file}
	for _, req := range []string{"set", "agent", "world", "run_as", "users", "approvals", "tasks"} {
		if f[req] == nil {
			p.errAt(root, req, "required")
		}
	}
	if n := f["world"]; n != nil {
		name := p.nonEmpty(n, "world")
		var known []string
		for _, w := range p.worlds {
			if w.Name() == name {
				p.world = w
			}
			known = append(known, w.Name())
		}
		if p.world == nil && name != "" {
			p.errAt(n, "world", "unknown world %q (known: %s)", name, strings.Join(known, ", "))
		}
		s.World = p.world
	}
	if p.world == nil {
		// Nothing that depends on the world can be checked.
		return s
	}
	for _, v := range p.world.Variables() {
		p.vars = append(p.vars, "$"+v)
	}
	sort.Strings(p.vars)
	if n := f["set"]; n != nil {
		s.Name = p.nonEmpty(n, "set")
	}
	if n := f["agent"]; n != nil {
		s.Agent = p.nonEmpty(n, "agent")
	}
	if n := f["description"]; n != nil {
		s.Description, _ = p.str(n, "description")
	}
	if n := f["models"]; n != nil {
		if m := p.nonEmpty(n, "models"); m != "" {
			if !filepath.IsAbs(m) {
				m = filepath.Join(filepath.Dir(p.file), m)
			}
			s.Models = m
		}
	}
	if n := f["run_as"]; n != nil {
		ra := p.mapping(n, "run_as", []string{"tenant", "user"})
		if ra["tenant"] == nil || ra["user"] == nil {
			p.errAt(n, "run_as", "needs tenant and user")
		} else {
			s.Tenant, s.User = p.nonEmpty(ra["tenant"], "run_as.tenant"), p.nonEmpty(ra["user"], "run_as.user")
		}
	}
	if n := f["users"]; n != nil {
		for i, u := range p.list(n, "users") {
			at := fmt.Sprintf("users[%d]", i)
			uf := p.mapping(u, at, []string{"user", "scopes", "groups"})
			if uf["user"] == nil {
				p.errAt(u, at+".user", "required")
				continue
			}
			usr := User{User: p.nonEmpty(uf["user"], at+".user")}
			if uf["scopes"] != nil {
				usr.Scopes = p.strList(uf["scopes"], at+".scopes")
			}
			if uf["groups"] != nil {
				usr.Groups = p.strList(uf["groups"], at+".groups")
			}
			s.Users = append(s.Users, usr)
		}
		if s.User != "" && !containsUser(s.Users, s.User) {
			p.errAt(n, "users", "run_as user %s is not among the users", s.User)
		}
	}
	if n := f["approvals"]; n != nil {
		s.Approvals = p.approvals(n)
		if s.Approvals.Decider != "" && s.Approvals.Decider == s.User {
			p.errAt(n, "approvals.decider", "the decider cannot be the run's own user %s", s.User)
		}
		if s.Approvals.Decider != "" && len(s.Users) > 0 && !containsUser(s.Users, s.Approvals.Decider) {
			p.errAt(n, "approvals.decider", "%s is not among the users", s.Approvals.Decider)
		}
	}
	if n := f["replay_mocks"]; n != nil {
		s.ReplayMocks = map[string]json.RawMessage{}
		for name, v := range p.mapping(n, "replay_mocks", nil) {
			var val any
			if err := v.Decode(&val); err != nil {
				p.errAt(v, "replay_mocks."+name, "%v", err)
				continue
			}
			b, err := json.Marshal(jsonable(val))
			if err != nil || len(b) == 0 || b[0] != '{' {
				p.errAt(v, "replay_mocks."+name, "want a mapping (the tool output the model sees)")
				continue
			}
			s.ReplayMocks[name] = b
		}
	}
	if n := f["expect"]; n != nil {
		s.base = p.expect(n, "expect")
	}
	if n := f["tasks"]; n != nil {
		ids, texts := map[string]int{}, map[string]string{}
		for i, tn := range p.list(n, "tasks") {
			t := p.taskNode(tn, i, s)
			if t == nil {
				continue
			}
			if line, dup := ids[t.ID]; dup {
				p.task = ""
				p.errAt(tn, fmt.Sprintf("tasks[%d].id", i), "task id %q is used twice (first at line %d)", t.ID, line)
			}
			if other, dup := texts[t.Text]; dup {
				p.task = ""
				p.errAt(tn, fmt.Sprintf("tasks[%d].task", i), "task %s has the same text as task %s; texts must be unique (recorded runs are matched to tasks by text)", t.ID, other)
			}
			ids[t.ID], texts[t.Text] = tn.Line, t.ID
			s.Tasks = append(s.Tasks, t)
		}
		p.task = ""
		if len(s.Tasks) == 0 && len(p.errs) == 0 {
			p.errAt(n, "tasks", "no tasks")
		}
	}
	return s
}

func containsUser(us []User, name string) bool {
	for _, u := range us {
		if u.User == name {
			return true
		}
	}
	return false
}

// jsonable turns YAML-decoded maps into JSON-encodable ones.
func jsonable(v any) any {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			x[k] = jsonable(e)
		}
		return x
	case map[any]any:
		out := map[string]any{}
		for k, e := range x {
			out[fmt.Sprint(k)] = jsonable(e)
		}
		return out
	case []any:
		for i, e := range x {
			x[i] = jsonable(e)
		}
		return x
	}
	return v
}

func (p *parser) approvals(n *yaml.Node) ApprovalPolicy {
	f := p.mapping(n, "approvals", []string{"decider", "rules", "otherwise"})
	a := ApprovalPolicy{Otherwise: "reject"}
	if f["decider"] == nil {
		p.errAt(n, "approvals.decider", "required: the user who decides approvals in evals")
	} else {
		a.Decider = p.nonEmpty(f["decider"], "approvals.decider")
	}
	if f["otherwise"] != nil {
		a.Otherwise = p.oneOf(f["otherwise"], "approvals.otherwise", []string{"approve", "reject"})
	}
	if f["rules"] != nil {
		for i, rn := range p.list(f["rules"], "approvals.rules") {
			at := fmt.Sprintf("approvals.rules[%d]", i)
			rf := p.mapping(rn, at, []string{"decision", "when"})
			if rf["decision"] == nil || rf["when"] == nil {
				p.errAt(rn, at, "needs decision and when")
				continue
			}
			r := rawRule{decision: p.oneOf(rf["decision"], at+".decision", []string{"approve", "reject"}),
				when: p.call(rf["when"], at+".when", false)}
			a.rules = append(a.rules, r)
		}
	}
	return a
}

func (a ApprovalPolicy) bind(vars map[string]string) ApprovalPolicy {
	out := ApprovalPolicy{Decider: a.Decider, Otherwise: a.Otherwise, rules: a.rules}
	for _, r := range a.rules {
		out.Rules = append(out.Rules, ApprovalRule{Decision: r.decision, When: r.when.bind(vars)})
	}
	return out
}

// call reads a call matcher: {tool, args, status, count}.
func (p *parser) call(n *yaml.Node, at string, withResult bool) rawCall {
	allowed := []string{"tool", "args"}
	if withResult {
		allowed = append(allowed, "status", "count")
	}
	f := p.mapping(n, at, allowed)
	var c rawCall
	if f == nil {
		return c
	}
	if f["tool"] == nil {
		p.errAt(n, at+".tool", "required")
	} else {
		c.tool = p.nonEmpty(f["tool"], at+".tool")
	}
	if f["args"] != nil {
		if resolveAlias(f["args"]).Kind != yaml.MappingNode {
			p.errAt(f["args"], at+".args", "want a mapping of argument names to matchers")
		} else {
			c.args = p.parseFields(f["args"], at+".args")
		}
	}
	if f["status"] != nil {
		c.status = p.oneOf(f["status"], at+".status", callStat)
	}
	if f["count"] != nil {
		c.count = int(p.integer(f["count"], at+".count", 1, 1000))
	}
	return c
}

func (p *parser) expect(n *yaml.Node, at string) rawExpect {
	f := p.mapping(n, at, []string{"status", "max_steps", "max_cost_inr", "calls", "forbidden", "world"})
	var e rawExpect
	if f["status"] != nil {
		e.status, e.hasStatus = p.oneOf(f["status"], at+".status", statuses), true
	}
	if f["max_steps"] != nil {
		e.maxSteps, e.hasSteps = int(p.integer(f["max_steps"], at+".max_steps", 1, 100000)), true
	}
	if f["max_cost_inr"] != nil { // the bound is in INR, whatever the world
		v := resolveAlias(f["max_cost_inr"])
		r, ok := new(big.Rat).SetString(v.Value)
		if v.Kind != yaml.ScalarNode || !ok || r.Sign() <= 0 {
			p.errAt(v, at+".max_cost_inr", "want a positive amount of rupees")
		} else {
			e.maxCost, e.hasCost = new(big.Int).Quo(new(big.Int).Mul(r.Num(), big.NewInt(1_000_000)), r.Denom()).Int64(), true
		}
	}
	if f["calls"] != nil {
		for i, c := range p.list(f["calls"], at+".calls") {
			e.calls = append(e.calls, p.call(c, fmt.Sprintf("%s.calls[%d]", at, i), true))
		}
	}
	if f["forbidden"] != nil {
		for i, c := range p.list(f["forbidden"], at+".forbidden") {
			e.forbidden = append(e.forbidden, p.call(c, fmt.Sprintf("%s.forbidden[%d]", at, i), false))
		}
	}
	if f["world"] != nil {
		kinds := p.world.Records()
		wf := p.mapping(f["world"], at+".world", sortedKeys(kinds))
		e.records = map[string][]matcher{}
		for _, kind := range sortedKeys(wf) {
			ms := []matcher{}
			for i, rn := range p.list(wf[kind], at+".world."+kind) {
				rat := fmt.Sprintf("%s.world.%s[%d]", at, kind, i)
				p.mapping(rn, rat, kinds[kind]) // field names checked here
				ms = append(ms, p.parseFields(rn, rat))
			}
			e.records[kind] = ms
		}
	}
	return e
}

// merge lays a task's expectations over the set's.
func merge(set, task rawExpect) rawExpect {
	out := set
	if task.hasStatus {
		out.status, out.hasStatus = task.status, true
	}
	if task.hasSteps {
		out.maxSteps, out.hasSteps = task.maxSteps, true
	}
	if task.hasCost {
		out.maxCost, out.hasCost = task.maxCost, true
	}
	out.calls = append(append([]rawCall(nil), set.calls...), task.calls...)
	out.forbidden = append(append([]rawCall(nil), set.forbidden...), task.forbidden...)
	if task.records != nil {
		out.records = map[string][]matcher{}
		maps.Copy(out.records, set.records)
		maps.Copy(out.records, task.records) // a kind the task names replaces the set's
	}
	return out
}

func (e rawExpect) bind(vars map[string]string) Expect {
	out := Expect{Status: store.StatusCompleted, MaxSteps: e.maxSteps}
	if e.hasStatus {
		out.Status = e.status
	}
	if e.hasCost {
		out.MaxCostMicros, out.CostCurrency = e.maxCost, "INR"
	}
	for _, c := range e.calls {
		m := c.bind(vars)
		if m.Status == "" {
			m.Status = "ok"
		}
		out.Calls = append(out.Calls, m)
	}
	for _, c := range e.forbidden {
		out.Forbidden = append(out.Forbidden, c.bind(vars))
	}
	for kind, ms := range e.records {
		if out.Records == nil {
			out.Records = map[string][]matcher{}
		}
		bound := make([]matcher, len(ms))
		for i, m := range ms {
			bound[i] = bind(m, vars)
		}
		out.Records[kind] = bound
	}
	return out
}

func (p *parser) taskNode(n *yaml.Node, i int, s *Set) *Task {
	at := fmt.Sprintf("tasks[%d]", i)
	// Errors name the task by its id, so read the id first.
	n = resolveAlias(n)
	var idNode *yaml.Node
	if n != nil && n.Kind == yaml.MappingNode {
		for j := 0; j+1 < len(n.Content); j += 2 {
			if n.Content[j].Value == "id" {
				idNode = n.Content[j+1]
			}
		}
	}
	if idNode == nil {
		p.errAt(n, at+".id", "required")
		return nil
	}
	t := &Task{Line: n.Line}
	t.ID = p.nonEmpty(idNode, at+".id")
	if !reTaskID.MatchString(t.ID) {
		p.errAt(idNode, at+".id", "%q: want lower-case letters, digits, '.', '_' and '-' (at most 64)", t.ID)
		return nil
	}
	p.task = t.ID
	defer func() { p.task = "" }()
	f := p.mapping(n, "", []string{"id", "task", "world", "expect"})
	if f == nil {
		return nil
	}
	if f["task"] == nil {
		p.errAt(n, "task", "required: the text the run is given")
	} else {
		t.Text = p.nonEmpty(f["task"], "task")
	}
	if f["world"] == nil {
		p.errAt(n, "world", "required: the task's state of world %s", p.world.Name())
		return t
	}
	raw, err := nodeJSON(f["world"])
	if err != nil {
		p.errAt(f["world"], "world", "%v", err)
		return t
	}
	if t.Fixture, err = p.world.Fixture(raw, t.Text); err != nil {
		p.fixtureErrs(f["world"], err)
		return t
	}
	var own rawExpect
	if f["expect"] != nil {
		own = p.expect(f["expect"], "expect")
	}
	vars := bindVars(t.Fixture)
	t.Expect = merge(s.base, own).bind(vars)
	t.Approvals = s.Approvals.bind(vars)
	return t
}

// fixtureErrs reports a world's refusal of a fixture, each FieldError at
// the line of its field.
func (p *parser) fixtureErrs(n *yaml.Node, err error) {
	var errs []error
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		errs = j.Unwrap()
	} else {
		errs = []error{err}
	}
	for _, e := range errs {
		var fe *FieldError
		if errors.As(e, &fe) {
			p.errAt(&yaml.Node{Line: lineOf(n, fe.Path)}, "world."+fe.Path, "%v", fe.Err)
			continue
		}
		p.errAt(n, "world", "%v", e)
	}
}

// bindVars turns a fixture's variables into the names matchers use.
func bindVars(fx Fixture) map[string]string {
	vars := map[string]string{}
	if fx == nil {
		return vars
	}
	for k, v := range fx.Vars() {
		vars["$"+k] = v
	}
	return vars
}

// TaskByText returns the task whose text is text, or nil.
func (s *Set) TaskByText(text string) *Task {
	for _, t := range s.Tasks {
		if t.Text == text {
			return t
		}
	}
	return nil
}

// Fallback is the task used to judge a recorded run whose text matches no
// task: the world's seed state (World.Fixture with no fixture, which may
// read variables from the text) and only the set's own expectations.
func (s *Set) Fallback(text string) (*Task, error) {
	t := &Task{ID: "(no task)", Text: text}
	fx, err := s.World.Fixture(nil, text)
	if err != nil {
		return nil, fmt.Errorf("world %s: seed state for a run matching no task: %w", s.World.Name(), err)
	}
	t.Fixture = fx
	vars := bindVars(fx)
	t.Expect, t.Approvals = s.base.bind(vars), s.Approvals.bind(vars)
	return t, nil
}

// Filter returns a copy of the set holding only the tasks whose id matches
// the glob (path.Match syntax, e.g. "inj-*"). Matching nothing is an
// error.
func (s *Set) Filter(glob string) (*Set, error) {
	if _, err := path.Match(glob, ""); err != nil {
		return nil, fmt.Errorf("task filter %q: %w", glob, err)
	}
	out := *s
	out.Tasks = nil
	for _, t := range s.Tasks {
		if ok, _ := path.Match(glob, t.ID); ok {
			out.Tasks = append(out.Tasks, t)
		}
	}
	if len(out.Tasks) == 0 {
		return nil, fmt.Errorf("task filter %q matches no task of %s", glob, s.Name)
	}
	return &out, nil
}
