// Package policy compiles and evaluates the CEL rules of an agent
// definition. A rule's condition (its `when`) is an expression over the
// proposed tool call and its context:
//
//	tool    string               the tool's name
//	args    map(string, dyn)     the call's arguments, as JSON values
//	user    policy.User          id, tenant, scopes, groups
//	tenant  string               the run's tenant
//	agent   policy.Agent         name, version
//	run     policy.Run           tainted (alias read_untrusted_content), cost,
//	                             currency, steps, calls, totals
//
// Conditions may join terms with CEL's &&, || and ! or with the words and,
// or and not, which are rewritten to the operators outside string literals
// (so the rules of an agent definition read as the seed writes them). A
// condition must have type bool (or dyn, checked when it runs); it is
// compiled and type-checked by Compile, which names the rule in every
// error.
//
// JSON numbers in args are CEL doubles (as in CEL's own JSON mapping) and
// comparisons across int and double are enabled, so `args.amount_inr >
// 10000` holds for 12499 and for 12499.5 alike, and `args.limit == 100`
// for 100.
//
// Evaluation is bounded (a cost limit per rule, and the context) and fails
// closed: Set.First reports an error for a rule that cannot be evaluated,
// and the broker turns that error into a denial. A missing map key is such
// an error, so guard optional arguments with has(args.x).
package policy

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"

	"cel.dev/cel-go/cel"
	"cel.dev/cel-go/common/types"
	"cel.dev/cel-go/ext"
)

// Limits on rules and their evaluation.
const (
	// MaxWhenBytes bounds one condition's source.
	MaxWhenBytes = 4096
	// CostLimit bounds the CEL cost of evaluating one rule. It allows
	// string operations over the largest arguments manifests accept and
	// short comprehensions over lists; anything costlier is an
	// evaluation error, which denies the call.
	CostLimit = 1_000_000
	// maxNesting bounds the parser's recursion.
	maxNesting = 64
)

// User is the invoking user as policies see them.
type User struct {
	ID     string   `cel:"id"`
	Tenant string   `cel:"tenant"`
	Scopes []string `cel:"scopes"`
	Groups []string `cel:"groups"`
}

// Agent is the pinned agent version.
type Agent struct {
	Name    string `cel:"name"`
	Version int64  `cel:"version"`
}

// Run is the run's state before the call, rebuilt from its event log.
type Run struct {
	ID string `cel:"id"`
	// Tainted is set once the run has read output of a tool marked
	// untrusted; ReadUntrustedContent is the same flag under the name the
	// design seed uses.
	Tainted              bool `cel:"tainted"`
	ReadUntrustedContent bool `cel:"read_untrusted_content"`
	// Cost is what the run has spent so far, in Currency units.
	Cost     float64 `cel:"cost"`
	Currency string  `cel:"currency"`
	// Steps counts model calls so far.
	Steps int64 `cel:"steps"`
	// Calls counts earlier proposed calls by tool name (denied ones
	// included). The current tool is always a key.
	Calls map[string]int64 `cel:"calls"`
	// Totals sums, per tool, each numeric top-level argument over the
	// calls the broker allowed earlier in the run:
	// run.totals.issue_refund.amount_inr. The current tool, and each
	// numeric argument of the current call, are always keys (0 when new).
	Totals map[string]map[string]float64 `cel:"totals"`
}

// Input is everything a rule may read.
type Input struct {
	Tool   string
	Args   map[string]any // see ArgsFromJSON
	User   User
	Tenant string
	Agent  Agent
	Run    Run
}

// Rule is one condition to compile, named for errors.
type Rule struct {
	Name string
	When string
}

// CompileError is a rule whose condition does not compile.
type CompileError struct {
	Rule    string
	Problem string
}

func (e *CompileError) Error() string {
	return fmt.Sprintf("policy %q: when: %s", e.Rule, e.Problem)
}

// Set is a compiled, ordered list of rules. It is immutable and safe for
// concurrent use.
type Set struct {
	rules []compiled
	// usesTotals reports whether any rule mentions totals, so callers
	// can skip computing run.totals for sets that never read it.
	usesTotals bool
	// words holds every identifier and string literal of the rules: the
	// tool names a rule can name in run.totals.
	words map[string]bool
}

type compiled struct {
	name string
	prg  cel.Program
}

var envOnce = sync.OnceValues(newEnv)

func newEnv() (*cel.Env, error) {
	return cel.NewEnv(
		ext.NativeTypes(reflect.TypeFor[User](), reflect.TypeFor[Agent](), reflect.TypeFor[Run](), ext.ParseStructTags(true)),
		cel.Variable("tool", cel.StringType),
		cel.Variable("args", cel.MapType(cel.StringType, cel.DynType)),
		cel.Variable("user", cel.ObjectType("policy.User")),
		cel.Variable("tenant", cel.StringType),
		cel.Variable("agent", cel.ObjectType("policy.Agent")),
		cel.Variable("run", cel.ObjectType("policy.Run")),
		cel.CrossTypeNumericComparisons(true),
		cel.ParserRecursionLimit(maxNesting),
		cel.ParserExpressionSizeLimit(MaxWhenBytes),
		ext.Strings(),
	)
}

// Compile compiles and type-checks rules in order. Every rule that fails
// is reported, each as a *CompileError naming it.
func Compile(rules []Rule) (*Set, error) {
	env, err := envOnce()
	if err != nil {
		return nil, fmt.Errorf("policy: building the CEL environment: %w", err)
	}
	s := &Set{words: map[string]bool{}}
	var errs []error
	for _, r := range rules {
		prg, err := compileOne(env, r.When)
		if err != nil {
			errs = append(errs, &CompileError{Rule: r.Name, Problem: err.Error()})
			continue
		}
		s.rules = append(s.rules, compiled{name: r.Name, prg: prg})
		if mentionsTotals(r.When) {
			s.usesTotals = true
		}
		_ = scan(r.When, func(tok token) {
			switch tok.kind {
			case tokIdent:
				if tok.afterDot || tok.text != "and" && tok.text != "or" && tok.text != "not" {
					s.words[tok.text] = true
				}
			case tokString:
				s.words[strings.Trim(strings.TrimLeft(tok.text, "rRbB"), `"'`)] = true
			}
		})
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return s, nil
}

// Check compiles one condition and reports why it does not compile.
func Check(when string) error {
	env, err := envOnce()
	if err != nil {
		return err
	}
	_, err = compileOne(env, when)
	return err
}

func compileOne(env *cel.Env, when string) (cel.Program, error) {
	if strings.TrimSpace(when) == "" {
		return nil, errors.New("empty condition")
	}
	if len(when) > MaxWhenBytes {
		return nil, fmt.Errorf("longer than %d bytes", MaxWhenBytes)
	}
	src, err := Rewrite(when)
	if err != nil {
		return nil, err
	}
	ast, iss := env.Compile(src)
	if iss != nil && iss.Err() != nil {
		// Positions match the source as written: Rewrite keeps columns.
		return nil, errors.New(oneLine(iss.Err().Error()))
	}
	if t := ast.OutputType(); !t.IsExactType(types.BoolType) && !t.IsExactType(types.DynType) {
		return nil, fmt.Errorf("must be a condition (type bool), but has type %s", t)
	}
	prg, err := env.Program(ast,
		cel.CostLimit(CostLimit),
		cel.InterruptCheckFrequency(100),
		cel.EvalOptions(cel.OptOptimize),
	)
	if err != nil {
		return nil, err
	}
	return prg, nil
}

func oneLine(s string) string {
	// CEL errors carry a caret diagram over several lines; keep the first
	// line, which has the position and the message.
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	return strings.TrimPrefix(strings.TrimSpace(s), "ERROR: ")
}

// Len is the number of rules.
func (s *Set) Len() int {
	if s == nil {
		return 0
	}
	return len(s.rules)
}

// UsesTotals reports whether any rule may read run.totals.
func (s *Set) UsesTotals() bool { return s != nil && s.usesTotals }

// NamesTool reports whether any rule names tool (as an identifier, such as
// run.totals.issue_refund, or a string, such as run.totals["issue_refund"]).
// Callers building run.totals may leave out the tools no rule names, other
// than the call's own: a rule that reaches a left-out tool by a computed key
// finds no entry, which is an evaluation error and so a denial.
func (s *Set) NamesTool(tool string) bool { return s != nil && s.words[tool] }

// EvalError is a rule that could not be evaluated. The caller must treat
// it as a denial.
type EvalError struct {
	Index int
	Rule  string
	Err   error
}

func (e *EvalError) Error() string {
	return fmt.Sprintf("policy %q could not be evaluated: %v", e.Rule, e.Err)
}

func (e *EvalError) Unwrap() error { return e.Err }

// First evaluates the rules in order and returns the index of the first
// whose condition holds, or -1 when none does. It stops at the first rule
// that cannot be evaluated (a missing key, a type mismatch, the cost
// limit, ctx done) and returns an *EvalError for it.
func (s *Set) First(ctx context.Context, in *Input) (int, error) {
	if s.Len() == 0 {
		return -1, nil
	}
	vars := in.activation()
	for i, r := range s.rules {
		out, _, err := r.prg.ContextEval(ctx, vars)
		if err != nil {
			return -1, &EvalError{Index: i, Rule: r.name, Err: err}
		}
		b, ok := out.Value().(bool)
		if !ok {
			return -1, &EvalError{Index: i, Rule: r.name, Err: fmt.Errorf("condition gave %s, not a bool", out.Type().TypeName())}
		}
		if b {
			return i, nil
		}
	}
	return -1, nil
}

// Name returns the name of rule i.
func (s *Set) Name(i int) string { return s.rules[i].name }

func (in *Input) activation() map[string]any {
	args := in.Args
	if args == nil {
		args = map[string]any{}
	}
	run := in.Run
	run.ReadUntrustedContent = run.ReadUntrustedContent || run.Tainted
	run.Tainted = run.ReadUntrustedContent
	run.Calls = withKey(run.Calls, in.Tool)
	if run.Totals == nil {
		run.Totals = map[string]map[string]float64{}
	}
	if _, ok := run.Totals[in.Tool]; !ok || hasNewNumber(run.Totals[in.Tool], args) {
		cur := make(map[string]float64, len(run.Totals[in.Tool])+len(args))
		for k, v := range run.Totals[in.Tool] {
			cur[k] = v
		}
		for k, v := range args {
			if _, num := v.(float64); num {
				if _, ok := cur[k]; !ok {
					cur[k] = 0
				}
			}
		}
		totals := make(map[string]map[string]float64, len(run.Totals)+1)
		for k, v := range run.Totals {
			totals[k] = v
		}
		totals[in.Tool] = cur
		run.Totals = totals
	}
	user := in.User
	if user.Scopes == nil {
		user.Scopes = []string{}
	}
	if user.Groups == nil {
		user.Groups = []string{}
	}
	return map[string]any{
		"tool":   in.Tool,
		"args":   args,
		"user":   &user,
		"tenant": in.Tenant,
		"agent":  &in.Agent,
		"run":    &run,
	}
}

func withKey(m map[string]int64, k string) map[string]int64 {
	if _, ok := m[k]; ok {
		return m
	}
	out := make(map[string]int64, len(m)+1)
	for kk, v := range m {
		out[kk] = v
	}
	out[k] = 0
	return out
}

func hasNewNumber(have map[string]float64, args map[string]any) bool {
	for k, v := range args {
		if _, num := v.(float64); num {
			if _, ok := have[k]; !ok {
				return true
			}
		}
	}
	return false
}

// mentionsTotals is a conservative test of whether a condition can read
// run.totals: any identifier totals outside string literals counts.
func mentionsTotals(when string) bool {
	found := false
	_ = scan(when, func(tok token) {
		if tok.kind == tokIdent && tok.text == "totals" {
			found = true
		}
	})
	return found
}
