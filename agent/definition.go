// Package agent defines agent definitions (a model alias, instructions, tool
// grants, policies and budgets), their strict loading from YAML, their
// canonical JSON and hash, and the Registry that stores them as immutable
// versions with aliases such as prod and a deterministic canary split.
//
// A definition names what it may use; Bind resolves those grants against the
// tool manifests in force, and a run may call only the tools Grants reports.
package agent

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/agentplane/agentplane/internal/yamlissue"
	"io"
	"maps"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"gopkg.in/yaml.v3"

	"github.com/agentplane/agentplane/internal/jsoncanon"
	"github.com/agentplane/agentplane/tool"
)

// Limits on definitions.
const (
	// MaxDefinitionBytes bounds a definition file and its instructions.
	MaxDefinitionBytes = 1 << 20
	// MaxWhenBytes bounds a policy condition.
	MaxWhenBytes = 4096

	maxVersion         = 1_000_000
	maxDescription     = 8 << 10
	maxSteps           = 1000
	maxInputTokens     = 1_000_000_000_000
	maxCostUnits       = 1_000_000_000_000 // whole currency units
	maxWallClock       = 366 * 24 * time.Hour
	maxResultBytes     = 16 << 20
	maxKeepRecentSteps = 1000
	maxGrants          = 100
	maxAllow           = 200
	maxPolicies        = 200
	microsPerUnit      = 1_000_000
)

var (
	reAgentName  = regexp.MustCompile(`^[a-z][a-z0-9-]{0,63}$`)
	reModelAlias = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,63}$`)
	reSource     = regexp.MustCompile(`^[a-z][a-z0-9-]{0,63}$`) // connector or sandbox
	reToolName   = regexp.MustCompile(`^[a-z][a-z0-9_]{0,63}$`)
	rePolicyName = regexp.MustCompile(`^[a-z0-9][a-z0-9_.-]{0,63}$`)
	reCostKey    = regexp.MustCompile(`^max_cost_([a-z]{3})$`)
	reDecimal    = regexp.MustCompile(`^([0-9]+)(?:\.([0-9]{1,6}))?$`)
)

// Definition is one version of an agent. Definitions come from
// ParseDefinition, LoadDefinitionFile or DefinitionFromJSON, which validate
// every field. A definition is immutable once stored; change it by writing
// a new version.
type Definition struct {
	Agent       string
	Version     int
	Description string
	Model       Model
	// Instructions is the system prompt, inlined at load time when the
	// file gives instructions_ref.
	Instructions string
	// Tools lists the grants in the order written.
	Tools []Grant
	// Policies are evaluated in the order written.
	Policies []Policy
	Budgets  Budgets
	Context  ContextSettings

	granted    []string // sorted; set by Bind
	searchable []string // sorted; set by Bind
	bound      bool
	// file and doc are where a parsed definition came from, so that a
	// grant Bind refuses is reported at its line (nil for stored ones).
	file string
	doc  *yaml.Node
}

// Model selects the models a run uses, by gateway alias.
type Model struct {
	Alias string
	// Small is an optional cheaper alias for light work (summaries).
	Small string
	// Temperature is nil when the definition does not set one.
	Temperature *float64
}

// Grant gives an agent tools. Exactly one of Connector, Tool and Sandbox is
// set; Allow and Search go with Connector.
//
// With Search, every tool of the connector may be found with the built-in
// search_tools tool and is then offered for the rest of the run; the tools
// in Allow (which may then be empty) are offered from the start.
type Grant struct {
	Connector string
	Allow     []string // sorted
	Search    bool
	Tool      string
	Sandbox   string
}

// String names the grant as errors do: "connector core-banking".
func (g Grant) String() string {
	switch {
	case g.Connector != "":
		return "connector " + g.Connector
	case g.Tool != "":
		return "tool " + g.Tool
	default:
		return "sandbox " + g.Sandbox
	}
}

// Policy is a rule the broker applies to every proposed tool call.
type Policy struct {
	// Name defaults to "policy[i]", i counting from 0.
	Name string
	// When is a CEL expression over tool, args, user, tenant, agent and
	// run; it is compiled by package policy, not here.
	When string
	Then Action
}

// Budgets bound a run. All four are required; the loop checks them before
// every model call.
type Budgets struct {
	MaxSteps       int
	MaxInputTokens int64
	// CostMicros is the cost budget in millionths of Currency.
	CostMicros int64
	// Currency is an upper-case ISO 4217 code such as INR.
	Currency     string
	MaxWallClock time.Duration
}

// ContextSettings tune how the loop builds the model's context. Zero fields
// leave the loop's defaults.
type ContextSettings struct {
	MaxResultBytes  int
	KeepRecentSteps int
	// CompactAtTokens compacts older steps into a progress note (written by
	// the model's small alias) when the next prompt is estimated above it;
	// CompactEverySteps does so every that many steps. Zero: never.
	CompactAtTokens   int64
	CompactEverySteps int
}

// DefinitionError is one problem found while loading a definition.
type DefinitionError struct {
	File string
	// Agent is the name the file gives, possibly invalid.
	Agent   string
	Line    int
	Field   string
	Problem string
	// Err is the underlying error, if any (instructions that cannot be read).
	Err error
}

func (e *DefinitionError) Error() string {
	var b strings.Builder
	b.WriteString(e.File)
	if e.Line > 0 {
		fmt.Fprintf(&b, ":%d", e.Line)
	}
	b.WriteString(": ")
	if e.Agent != "" {
		fmt.Fprintf(&b, "agent %q: ", e.Agent)
	}
	if e.Field != "" {
		fmt.Fprintf(&b, "field %q: ", e.Field)
	}
	b.WriteString(e.Problem)
	return b.String()
}

func (e *DefinitionError) Unwrap() error { return e.Err }

// rawDefinition is a definition as written, filled from YAML (strictly) or
// from JSON.
type rawDefinition struct {
	Agent           string      `yaml:"agent" json:"agent"`
	Version         int         `yaml:"version" json:"version"`
	Description     string      `yaml:"description" json:"description"`
	Model           *rawModel   `yaml:"model" json:"model"`
	Instructions    string      `yaml:"instructions" json:"instructions"`
	InstructionsRef string      `yaml:"instructions_ref" json:"instructions_ref"`
	Tools           []rawGrant  `yaml:"tools" json:"tools"`
	Policies        []rawPolicy `yaml:"policies" json:"policies"`
	Budgets         *rawBudgets `yaml:"budgets" json:"budgets"`
	Context         *rawContext `yaml:"context" json:"context"`
}

type rawModel struct {
	Alias       string   `yaml:"alias" json:"alias"`
	Small       string   `yaml:"small" json:"small"`
	Temperature *float64 `yaml:"temperature" json:"temperature"`
}

type rawGrant struct {
	Connector string   `yaml:"connector" json:"connector"`
	Allow     []string `yaml:"allow" json:"allow"`
	Search    bool     `yaml:"search" json:"search"`
	Tool      string   `yaml:"tool" json:"tool"`
	Sandbox   string   `yaml:"sandbox" json:"sandbox"`
}

type rawPolicy struct {
	Name string `yaml:"name" json:"name"`
	When string `yaml:"when" json:"when"`
	Then string `yaml:"then" json:"then"`
}

type rawContext struct {
	MaxResultBytes    int   `yaml:"max_result_bytes" json:"max_result_bytes"`
	KeepRecentSteps   int   `yaml:"keep_recent_steps" json:"keep_recent_steps"`
	CompactAtTokens   int64 `yaml:"compact_at_tokens" json:"compact_at_tokens"`
	CompactEverySteps int   `yaml:"compact_every_steps" json:"compact_every_steps"`
}

// rawBudgets keeps each budget as written: its key names a currency, so it
// cannot be a struct field.
type rawBudgets struct {
	entries []budgetEntry
}

type budgetEntry struct {
	key, text string
	line      int
}

func (b *rawBudgets) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.MappingNode {
		return &yaml.TypeError{Errors: []string{fmt.Sprintf("line %d: budgets must be a mapping", n.Line)}}
	}
	var issues []string
	seen := map[string]bool{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		switch {
		case k.Kind != yaml.ScalarNode:
			issues = append(issues, fmt.Sprintf("line %d: budget names must be strings", k.Line))
		case seen[k.Value]:
			issues = append(issues, fmt.Sprintf("line %d: key %q: appears twice", k.Line, k.Value))
		case v.Kind != yaml.ScalarNode || v.ShortTag() == "!!null":
			issues = append(issues, fmt.Sprintf("line %d: key %q: must be a number or a duration", k.Line, k.Value))
		default:
			seen[k.Value] = true
			b.entries = append(b.entries, budgetEntry{key: k.Value, text: v.Value, line: k.Line})
		}
	}
	if len(issues) > 0 {
		return &yaml.TypeError{Errors: issues}
	}
	return nil
}

func (b *rawBudgets) UnmarshalJSON(data []byte) error {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(data, &m); err != nil {
		return fmt.Errorf("budgets must be an object")
	}
	for _, k := range slices.Sorted(maps.Keys(m)) {
		v := bytes.TrimSpace(m[k])
		var text string
		if len(v) > 0 && v[0] == '"' {
			if err := json.Unmarshal(v, &text); err != nil {
				return fmt.Errorf("budget %s: %w", k, err)
			}
		} else {
			var n json.Number
			if err := json.Unmarshal(v, &n); err != nil {
				return fmt.Errorf("budget %s must be a number or a string", k)
			}
			text = n.String()
		}
		b.entries = append(b.entries, budgetEntry{key: k, text: text})
	}
	return nil
}

// ParseDefinition parses one agent definition from YAML. filename is used
// in errors and nowhere else. instructions_ref, if present, names a file
// relative to the definition; readRef is called with that relative path
// (cleaned, never absolute and never leaving the directory) and must return
// its contents. With a nil readRef, instructions_ref is an error.
//
// Parsing is strict: an unknown field, a value of the wrong type or an
// invalid budget, grant or policy is an error, each as a *DefinitionError.
func ParseDefinition(filename string, data []byte, readRef func(path string) ([]byte, error)) (*Definition, error) {
	if len(data) > MaxDefinitionBytes {
		return nil, &DefinitionError{File: filename, Problem: fmt.Sprintf("file is larger than %d bytes", MaxDefinitionBytes)}
	}
	nodes := yaml.NewDecoder(bytes.NewReader(data))
	strict := yaml.NewDecoder(bytes.NewReader(data))
	strict.KnownFields(true)

	var node yaml.Node
	if err := nodes.Decode(&node); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, &DefinitionError{File: filename, Problem: "no agent definition (the file is empty)"}
		}
		line, problem := yamlSyntaxProblem(err)
		return nil, &DefinitionError{File: filename, Line: line, Problem: problem}
	}
	var raw rawDefinition
	strictErr := strict.Decode(&raw)
	c := &checker{file: filename, agent: yamlissue.ScalarField(&node, "agent"), node: &node}
	if !yamlissue.MappingDocument(&node) {
		c.add("", "an agent definition must be a mapping of fields")
		return nil, c.err()
	}
	var extra yaml.Node
	switch err := nodes.Decode(&extra); {
	case errors.Is(err, io.EOF):
	case err != nil:
		line, problem := yamlSyntaxProblem(err)
		return nil, &DefinitionError{File: filename, Agent: c.agent, Line: line, Problem: problem}
	case !yamlissue.EmptyDocument(&extra):
		line := 0
		if len(extra.Content) > 0 {
			line = extra.Content[0].Line
		}
		return nil, &DefinitionError{File: filename, Agent: c.agent, Line: line, Problem: "a definition file holds one agent; found a second YAML document"}
	}
	if strictErr != nil {
		var te *yaml.TypeError
		if !errors.As(strictErr, &te) {
			c.add("", "%s", strings.TrimPrefix(strictErr.Error(), "yaml: "))
			return nil, c.err()
		}
		for _, is := range yamlissue.Issues(&node, te.Errors) {
			c.errs = append(c.errs, &DefinitionError{File: filename, Agent: c.agent, Line: is.Line, Field: is.Field, Problem: is.Problem})
		}
		return nil, c.err()
	}
	d := c.build(&raw, readRef)
	if err := c.err(); err != nil {
		return nil, err
	}
	d.file, d.doc = filename, &node
	return d, nil
}

// yamlSyntaxProblem explains a YAML syntax error, with a hint for the most
// common one in definitions: an unquoted value that contains ": ".
func yamlSyntaxProblem(err error) (line int, problem string) {
	line, problem = yamlissue.SplitLine(strings.TrimPrefix(err.Error(), "yaml: "))
	if strings.Contains(problem, "mapping values are not allowed") {
		problem += ` (a value containing ": " must be quoted, e.g. then: "require_approval(group: ops, expires: 24h)", or written with =, e.g. then: require_approval(group=ops, expires=24h))`
	}
	return line, problem
}

// LoadDefinitionFile reads and parses the definition at path.
// instructions_ref is read relative to the file's directory, and may not
// leave it (not even through a symbolic link).
func LoadDefinitionFile(path string) (*Definition, error) {
	data, err := readBounded(path)
	if err != nil {
		return nil, &DefinitionError{File: path, Problem: err.Error(), Err: err}
	}
	readRef := func(ref string) ([]byte, error) {
		root, err := os.OpenRoot(filepath.Dir(path))
		if err != nil {
			return nil, err
		}
		defer root.Close()
		f, err := root.Open(ref)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		return readAllBounded(f)
	}
	return ParseDefinition(path, data, readRef)
}

func readBounded(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return readAllBounded(f)
}

func readAllBounded(r io.Reader) ([]byte, error) {
	data, err := io.ReadAll(io.LimitReader(r, MaxDefinitionBytes+1))
	if err != nil {
		return nil, err
	}
	if len(data) > MaxDefinitionBytes {
		return nil, fmt.Errorf("larger than %d bytes", MaxDefinitionBytes)
	}
	return data, nil
}

// DefinitionFromJSON parses a definition in the form CanonicalJSON writes,
// validating it as ParseDefinition does. The result is not bound to tools.
func DefinitionFromJSON(data []byte) (*Definition, error) {
	const file = "definition JSON"
	if len(data) > 2*MaxDefinitionBytes {
		return nil, &DefinitionError{File: file, Problem: "too large"}
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var raw rawDefinition
	if err := dec.Decode(&raw); err != nil {
		return nil, &DefinitionError{File: file, Problem: err.Error(), Err: err}
	}
	if dec.More() {
		return nil, &DefinitionError{File: file, Agent: raw.Agent, Problem: "trailing data after the definition"}
	}
	c := &checker{file: file, agent: raw.Agent}
	d := c.build(&raw, nil)
	if err := c.err(); err != nil {
		return nil, err
	}
	return d, nil
}

// checker collects the problems of one definition.
type checker struct {
	file  string
	agent string
	node  *yaml.Node // nil for JSON input
	errs  []error
}

func (c *checker) add(field, format string, args ...any) {
	c.addAt(0, field, format, args...)
}

func (c *checker) addAt(line int, field, format string, args ...any) {
	if line == 0 && c.node != nil && field != "" {
		line = yamlissue.LineOf(c.node, field)
	}
	c.errs = append(c.errs, &DefinitionError{File: c.file, Agent: c.agent, Line: line, Field: field, Problem: fmt.Sprintf(format, args...)})
}

func (c *checker) err() error { return errors.Join(c.errs...) }

func (c *checker) build(raw *rawDefinition, readRef func(string) ([]byte, error)) *Definition {
	d := &Definition{Agent: raw.Agent, Version: raw.Version, Description: raw.Description}
	switch {
	case d.Agent == "":
		c.add("agent", "required: the agent's name")
	case !reAgentName.MatchString(d.Agent):
		c.add("agent", "must be lower case letters, digits and -, starting with a letter, at most 64 characters (got %q)", d.Agent)
	}
	switch {
	case d.Version == 0:
		c.add("version", "required: a positive integer")
	case d.Version < 1 || d.Version > maxVersion:
		c.add("version", "must be between 1 and %d (got %d)", maxVersion, d.Version)
	}
	if len(d.Description) > maxDescription {
		c.add("description", "longer than %d bytes", maxDescription)
	}
	c.model(d, raw.Model)
	c.instructions(d, raw, readRef)
	switch {
	case len(raw.Tools) > maxGrants:
		c.add("tools", "more than %d grants", maxGrants)
	case len(raw.Policies) > maxPolicies:
		c.add("policies", "more than %d policies", maxPolicies)
	default:
		c.grants(d, raw.Tools)
		c.policies(d, raw.Policies)
	}
	c.budgets(d, raw.Budgets)
	if raw.Context != nil {
		d.Context = ContextSettings{MaxResultBytes: raw.Context.MaxResultBytes, KeepRecentSteps: raw.Context.KeepRecentSteps,
			CompactAtTokens: raw.Context.CompactAtTokens, CompactEverySteps: raw.Context.CompactEverySteps}
		if n := d.Context.CompactAtTokens; n < 0 || n > 100_000_000 {
			c.add("context.compact_at_tokens", "must be between 0 and 100000000 (got %d)", n)
		}
		if n := d.Context.CompactEverySteps; n < 0 || n > 1000 {
			c.add("context.compact_every_steps", "must be between 0 and 1000 (got %d)", n)
		}
		if (d.Context.CompactAtTokens > 0 || d.Context.CompactEverySteps > 0) && d.Model.Small == "" {
			c.add("context", "compaction needs model.small, the alias that writes the progress note")
		}
		if n := d.Context.MaxResultBytes; n < 0 || n > maxResultBytes {
			c.add("context.max_result_bytes", "must be between 0 and %d (got %d)", maxResultBytes, n)
		}
		if n := d.Context.KeepRecentSteps; n < 0 || n > maxKeepRecentSteps {
			c.add("context.keep_recent_steps", "must be between 0 and %d (got %d)", maxKeepRecentSteps, n)
		}
	}
	return d
}

func (c *checker) model(d *Definition, raw *rawModel) {
	if raw == nil {
		c.add("model", "required: model: {alias: NAME}")
		return
	}
	d.Model = Model{Alias: raw.Alias, Small: raw.Small}
	switch {
	case raw.Alias == "":
		c.add("model.alias", "required: the gateway's model alias")
	case !reModelAlias.MatchString(raw.Alias):
		c.add("model.alias", "must be lower case letters, digits, ., _ and -, at most 64 characters (got %q)", raw.Alias)
	}
	if raw.Small != "" && !reModelAlias.MatchString(raw.Small) {
		c.add("model.small", "must be lower case letters, digits, ., _ and -, at most 64 characters (got %q)", raw.Small)
	}
	if t := raw.Temperature; t != nil {
		if math.IsNaN(*t) || *t < 0 || *t > 2 {
			c.add("model.temperature", "must be between 0 and 2")
		} else {
			v := *t
			d.Model.Temperature = &v
		}
	}
}

func (c *checker) instructions(d *Definition, raw *rawDefinition, readRef func(string) ([]byte, error)) {
	switch {
	case raw.Instructions != "" && raw.InstructionsRef != "":
		c.add("instructions_ref", "give instructions or instructions_ref, not both")
		return
	case raw.InstructionsRef != "":
		ref := raw.InstructionsRef
		switch {
		case strings.Contains(ref, "://"):
			c.add("instructions_ref", "only a file path relative to the definition is supported (got %q)", ref)
			return
		case !filepath.IsLocal(ref):
			c.add("instructions_ref", "must be a relative path inside the definition's directory (got %q)", ref)
			return
		case readRef == nil:
			c.add("instructions_ref", "cannot be read here; inline the instructions")
			return
		}
		data, err := readRef(filepath.Clean(ref))
		if err != nil {
			c.errs = append(c.errs, &DefinitionError{File: c.file, Agent: c.agent, Line: yamlissue.LineOf(c.node, "instructions_ref"), Field: "instructions_ref",
				Problem: fmt.Sprintf("cannot read %s: %v", ref, err), Err: err})
			return
		}
		d.Instructions = string(data)
	default:
		d.Instructions = raw.Instructions
	}
	switch {
	case strings.TrimSpace(d.Instructions) == "":
		c.add("instructions", "required: inline instructions or an instructions_ref file")
	case len(d.Instructions) > MaxDefinitionBytes:
		c.add("instructions", "longer than %d bytes", MaxDefinitionBytes)
	case !utf8.ValidString(d.Instructions):
		c.add("instructions", "must be UTF-8 text")
	}
}

func (c *checker) grants(d *Definition, raw []rawGrant) {
	named := map[string]string{} // tool -> grant that names it
	sources := map[string]bool{}
	for i, g := range raw {
		field := fmt.Sprintf("tools[%d]", i)
		set := 0
		for _, s := range []string{g.Connector, g.Tool, g.Sandbox} {
			if s != "" {
				set++
			}
		}
		if set != 1 {
			c.add(field, "give exactly one of connector (with allow), tool or sandbox")
			continue
		}
		grant := Grant{Connector: g.Connector, Search: g.Search, Tool: g.Tool, Sandbox: g.Sandbox}
		switch {
		case g.Connector != "":
			if !reSource.MatchString(g.Connector) {
				c.add(field+".connector", "must be lower case letters, digits and -, starting with a letter (got %q)", g.Connector)
				continue
			}
			if len(g.Allow) == 0 && !g.Search {
				c.add(field+".allow", "required: list the connector's tools the agent may call (or set search: true to let it find them with search_tools)")
				continue
			}
			if len(g.Allow) > maxAllow {
				c.add(field+".allow", "more than %d tools", maxAllow)
				continue
			}
			for j, name := range g.Allow {
				f := fmt.Sprintf("%s.allow[%d]", field, j)
				switch {
				case !reToolName.MatchString(name):
					c.add(f, "must be a tool name (lower case letters, digits and _), got %q", name)
				case name == SearchTool:
					c.add(f, "%s is the platform's built-in tool search; it comes with search: true", SearchTool)
				case named[name] != "":
					c.add(f, "tool %q is already granted by %s", name, named[name])
				default:
					named[name] = field
					grant.Allow = append(grant.Allow, name)
				}
			}
			sort.Strings(grant.Allow)
		case len(g.Allow) > 0:
			c.add(field+".allow", "goes with connector only")
			continue
		case g.Search:
			c.add(field+".search", "goes with connector only")
			continue
		case g.Tool != "":
			switch {
			case !reToolName.MatchString(g.Tool):
				c.add(field+".tool", "must be a tool name (lower case letters, digits and _), got %q", g.Tool)
				continue
			case g.Tool == SearchTool:
				c.add(field+".tool", "%s is the platform's built-in tool search; grant a connector with search: true", SearchTool)
				continue
			case named[g.Tool] != "":
				c.add(field+".tool", "tool %q is already granted by %s", g.Tool, named[g.Tool])
				continue
			}
			named[g.Tool] = field
		default:
			if !reSource.MatchString(g.Sandbox) {
				c.add(field+".sandbox", "must be lower case letters, digits and -, starting with a letter (got %q)", g.Sandbox)
				continue
			}
		}
		if src := grant.Connector + grant.Sandbox; src != "" {
			key := grant.String()
			if sources[key] {
				c.add(field, "%s is granted twice", key)
				continue
			}
			sources[key] = true
		}
		d.Tools = append(d.Tools, grant)
	}
}

func (c *checker) policies(d *Definition, raw []rawPolicy) {
	names := map[string]bool{}
	for i, p := range raw {
		field := fmt.Sprintf("policies[%d]", i)
		pol := Policy{Name: p.Name, When: p.When}
		if pol.Name == "" {
			pol.Name = defaultPolicyName(i)
		} else if !rePolicyName.MatchString(pol.Name) {
			c.add(field+".name", "must be lower case letters, digits, _, . and -, at most 64 characters (got %q)", pol.Name)
		}
		if names[pol.Name] {
			c.add(field+".name", "policy %q is defined twice", pol.Name)
		}
		names[pol.Name] = true
		switch {
		case strings.TrimSpace(p.When) == "":
			c.add(field+".when", "required: a CEL condition, e.g. tool == \"issue_refund\"")
		case len(p.When) > MaxWhenBytes:
			c.add(field+".when", "longer than %d bytes", MaxWhenBytes)
		case !utf8.ValidString(p.When):
			c.add(field+".when", "must be UTF-8 text")
		}
		if strings.TrimSpace(p.Then) == "" {
			c.add(field+".then", "required: allow, deny(reason: \"...\") or require_approval(group: NAME, expires: DURATION)")
		} else if a, err := ParseAction(p.Then); err != nil {
			c.add(field+".then", "policy %q: %v", pol.Name, err)
		} else {
			pol.Then = a
		}
		d.Policies = append(d.Policies, pol)
	}
}

func defaultPolicyName(i int) string { return fmt.Sprintf("policy[%d]", i) }

func (c *checker) budgets(d *Definition, raw *rawBudgets) {
	if raw == nil {
		c.add("budgets", "required: max_steps, max_input_tokens, max_cost_<currency> and max_wall_clock")
		return
	}
	costKey := ""
	for _, e := range raw.entries {
		field := "budgets." + e.key
		bad := func(format string, args ...any) { c.addAt(e.line, field, format, args...) }
		switch e.key {
		case "max_steps":
			n, err := strconv.Atoi(e.text)
			if err != nil || n < 1 || n > maxSteps {
				bad("must be a whole number from 1 to %d (got %q)", maxSteps, e.text)
				continue
			}
			d.Budgets.MaxSteps = n
		case "max_input_tokens":
			n, err := strconv.ParseInt(e.text, 10, 64)
			if err != nil || n < 1 || n > maxInputTokens {
				bad("must be a whole number from 1 to %d (got %q)", int64(maxInputTokens), e.text)
				continue
			}
			d.Budgets.MaxInputTokens = n
		case "max_wall_clock":
			dur, err := ParseDuration(e.text)
			if err != nil || dur <= 0 || dur > maxWallClock {
				bad("must be a duration such as 90s, 2h or 1d, at most 366d (got %q)", e.text)
				continue
			}
			d.Budgets.MaxWallClock = dur
		default:
			m := reCostKey.FindStringSubmatch(e.key)
			if m == nil {
				bad("unknown budget (use max_steps, max_input_tokens, max_cost_<currency> such as max_cost_inr, and max_wall_clock)")
				continue
			}
			if costKey != "" {
				bad("only one cost budget is allowed (already have %s)", costKey)
				continue
			}
			costKey = e.key
			micros, err := parseMicros(e.text)
			if err != nil {
				bad("%v", err)
				continue
			}
			d.Budgets.CostMicros = micros
			d.Budgets.Currency = strings.ToUpper(m[1])
		}
	}
	for _, k := range []string{"max_steps", "max_input_tokens", "max_wall_clock"} {
		if !hasEntry(raw, k) {
			c.add("budgets", "%s is required", k)
		}
	}
	if costKey == "" {
		c.add("budgets", "a cost budget is required: max_cost_<currency>, e.g. max_cost_inr: 150")
	}
}

func hasEntry(raw *rawBudgets, key string) bool {
	for _, e := range raw.entries {
		if e.key == key {
			return true
		}
	}
	return false
}

// parseMicros reads a positive decimal with at most six fractional digits
// as millionths.
func parseMicros(s string) (int64, error) {
	m := reDecimal.FindStringSubmatch(s)
	if m == nil {
		return 0, fmt.Errorf("must be a positive decimal amount with at most 6 decimal places, e.g. 150 or 2.50 (got %q)", s)
	}
	whole, err := strconv.ParseInt(m[1], 10, 64)
	if err != nil || whole > maxCostUnits {
		return 0, fmt.Errorf("must be at most %d (got %q)", int64(maxCostUnits), s)
	}
	frac := int64(0)
	if m[2] != "" {
		f, _ := strconv.ParseInt((m[2] + "000000")[:6], 10, 64)
		frac = f
	}
	micros := whole*microsPerUnit + frac
	if micros <= 0 {
		return 0, fmt.Errorf("must be more than zero (got %q)", s)
	}
	return micros, nil
}

// formatMicros writes millionths as the shortest decimal.
func formatMicros(n int64) string {
	s := strconv.FormatInt(n/microsPerUnit, 10)
	if frac := n % microsPerUnit; frac != 0 {
		s += "." + strings.TrimRight(fmt.Sprintf("%06d", frac), "0")
	}
	return s
}

// CanonicalJSON returns the definition as canonical JSON: instructions
// inlined, defaults omitted, allow lists sorted. DefinitionFromJSON reads it
// back. Resolved grants are not part of it.
func (d *Definition) CanonicalJSON() []byte {
	model := map[string]any{"alias": d.Model.Alias}
	if d.Model.Small != "" {
		model["small"] = d.Model.Small
	}
	if t := d.Model.Temperature; t != nil && !math.IsNaN(*t) && !math.IsInf(*t, 0) {
		model["temperature"] = *t
	}
	w := map[string]any{
		"agent":        d.Agent,
		"version":      d.Version,
		"model":        model,
		"instructions": d.Instructions,
		"budgets": map[string]any{
			"max_steps":        d.Budgets.MaxSteps,
			"max_input_tokens": d.Budgets.MaxInputTokens,
			"max_cost_" + strings.ToLower(d.Budgets.Currency): formatMicros(d.Budgets.CostMicros),
			"max_wall_clock": formatDuration(d.Budgets.MaxWallClock),
		},
	}
	if d.Description != "" {
		w["description"] = d.Description
	}
	if len(d.Tools) > 0 {
		grants := make([]map[string]any, len(d.Tools))
		for i, g := range d.Tools {
			switch {
			case g.Connector != "":
				allow := append([]string{}, g.Allow...)
				sort.Strings(allow)
				grants[i] = map[string]any{"connector": g.Connector, "allow": allow}
				if g.Search {
					grants[i]["search"] = true
				}
			case g.Tool != "":
				grants[i] = map[string]any{"tool": g.Tool}
			default:
				grants[i] = map[string]any{"sandbox": g.Sandbox}
			}
		}
		w["tools"] = grants
	}
	if len(d.Policies) > 0 {
		pols := make([]map[string]any, len(d.Policies))
		for i, p := range d.Policies {
			pols[i] = map[string]any{"when": p.When, "then": p.Then.String()}
			if p.Name != defaultPolicyName(i) {
				pols[i]["name"] = p.Name
			}
		}
		w["policies"] = pols
	}
	if d.Context != (ContextSettings{}) {
		ctx := map[string]any{}
		if d.Context.MaxResultBytes != 0 {
			ctx["max_result_bytes"] = d.Context.MaxResultBytes
		}
		if d.Context.CompactAtTokens != 0 {
			ctx["compact_at_tokens"] = d.Context.CompactAtTokens
		}
		if d.Context.CompactEverySteps != 0 {
			ctx["compact_every_steps"] = d.Context.CompactEverySteps
		}
		if d.Context.KeepRecentSteps != 0 {
			ctx["keep_recent_steps"] = d.Context.KeepRecentSteps
		}
		w["context"] = ctx
	}
	b, err := jsoncanon.Marshal(w)
	if err != nil {
		return nil // unreachable: every value above encodes
	}
	return b
}

// Hash returns the sha256 of the definition's canonical JSON.
func (d *Definition) Hash() [32]byte {
	return sha256.Sum256(d.CanonicalJSON())
}

// GrantedTools resolves the definition's grants against tools and returns
// the granted tool names, sorted and without repeats. A connector grant
// needs each allowed tool to exist with that connector; a tool grant needs
// the tool to exist; a sandbox grant gives every tool whose connector is
// the sandbox's name and needs at least one. Every unresolved grant is
// reported. GrantedTools does not change d; Bind does.
func (d *Definition) GrantedTools(tools *tool.Set) ([]string, error) {
	var (
		errs []error
		out  []string
	)
	// fail reports a grant; for a definition parsed from a file, at the
	// file and line of the entry (item: the allow entry, "" for the grant).
	fail := func(i int, g Grant, item string, format string, args ...any) {
		problem := fmt.Sprintf(format, args...)
		field := fmt.Sprintf("tools[%d]", i)
		if d.doc == nil {
			errs = append(errs, fmt.Errorf("agent %q version %d: %s (%s): %s", d.Agent, d.Version, field, g, problem))
			return
		}
		line := yamlissue.LineOf(d.doc, field)
		if item != "" {
			// Allow is sorted; find the entry as written.
			yamlissue.Walk(d.doc, "", 0, func(p string, k, v *yaml.Node) bool {
				if k == nil && v.Value == item && strings.HasPrefix(p, field+".allow[") {
					field, line = p, v.Line
					return false
				}
				return true
			})
		}
		errs = append(errs, &DefinitionError{File: d.file, Agent: d.Agent, Line: line, Field: field, Problem: fmt.Sprintf("(%s): %s", g, problem)})
	}
	for i, g := range d.Tools {
		switch {
		case g.Connector != "":
			known := hasConnector(tools, g.Connector)
			if g.Search && !known {
				fail(i, g, "", "connector %q is unknown or has no reviewed tools, so there is nothing to search (register it and approve its tools: agentplane connectors add, then connectors review; or apply its tool manifests)", g.Connector)
			}
			for _, name := range g.Allow {
				m, ok := tools.Get(name)
				switch {
				case !ok && !known:
					fail(i, g, name, "tool %q is not registered: connector %q is unknown or has no reviewed tools (register it and approve its tools: agentplane connectors add, then connectors review; or apply its tool manifests)", name, g.Connector)
				case !ok:
					fail(i, g, name, "tool %q is not registered", name)
				case m.Connector != g.Connector:
					fail(i, g, name, "tool %q belongs to %s, not to connector %q", name, describeConnector(m.Connector), g.Connector)
				default:
					out = append(out, name)
				}
			}
		case g.Tool != "":
			if _, ok := tools.Get(g.Tool); !ok {
				fail(i, g, "", "tool %q is not registered", g.Tool)
				continue
			}
			out = append(out, g.Tool)
		case g.Sandbox != "":
			n := 0
			for _, m := range tools.Manifests() {
				if m.Connector == g.Sandbox {
					out = append(out, m.Name)
					n++
				}
			}
			if n == 0 {
				fail(i, g, "", "no registered tool belongs to sandbox %q", g.Sandbox)
			}
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	sort.Strings(out)
	return slices.Compact(out), nil
}

// SearchTool is the built-in tool the loop offers an agent with a search
// grant (package toolsearch). No grant may name it.
const SearchTool = "search_tools"

// Search reports whether any grant lets the agent search for tools.
func (d *Definition) Search() bool {
	return slices.ContainsFunc(d.Tools, func(g Grant) bool { return g.Search })
}

// SearchableTools returns, sorted, the tools the definition's search grants
// let the agent find with search_tools: every tool of each such connector
// that GrantedTools does not already offer (and none named search_tools).
// Grants that do not resolve are GrantedTools' to report.
func (d *Definition) SearchableTools(tools *tool.Set) []string {
	offered := map[string]bool{}
	var out []string
	for _, g := range d.Tools {
		for _, n := range g.Allow {
			offered[n] = true
		}
		if g.Tool != "" {
			offered[g.Tool] = true
		}
	}
	for _, g := range d.Tools {
		if !g.Search {
			continue
		}
		for _, m := range tools.Manifests() {
			if m.Connector == g.Connector && !offered[m.Name] && m.Name != SearchTool {
				out = append(out, m.Name)
			}
		}
	}
	sort.Strings(out)
	return slices.Compact(out)
}

func hasConnector(tools *tool.Set, connector string) bool {
	for _, m := range tools.Manifests() {
		if m.Connector == connector {
			return true
		}
	}
	return false
}

func describeConnector(c string) string {
	if c == "" {
		return "no connector"
	}
	return fmt.Sprintf("connector %q", c)
}

// Bind resolves the definition's grants against tools (see GrantedTools)
// and records the result for Grants. Bind is not safe to call while other
// goroutines use d; the Registry returns definitions already bound.
func (d *Definition) Bind(tools *tool.Set) error {
	names, err := d.GrantedTools(tools)
	if err != nil {
		return err
	}
	d.granted, d.searchable, d.bound = names, d.SearchableTools(tools), true
	return nil
}

// Grants reports whether the agent may call the tool name: a tool it is
// offered from the start, or one it may find with search_tools (a run
// calls that only once a search has offered it). It is false for every
// tool until Bind has succeeded, so an unbound definition grants nothing.
func (d *Definition) Grants(name string) bool {
	if !d.bound {
		return false
	}
	_, found := slices.BinarySearch(d.granted, name)
	if !found {
		_, found = slices.BinarySearch(d.searchable, name)
	}
	return found
}

// Granted returns the resolved tool names (sorted), or nil before Bind.
func (d *Definition) Granted() []string {
	return slices.Clone(d.granted)
}
