// Package scripted is a model provider that plays a file of model turns
// instead of calling a vendor. It is the default provider when no real one
// is configured, and what the demo and the tests use.
//
// A script is YAML:
//
//	# Answer to a request that offers no tools (the loop's last call at a
//	# budget limit). Optional; DefaultFinal when absent.
//	final: "Budget reached. Here is what I found so far: ..."
//	turns:
//	  - text: "Let me read the ticket."
//	    tool_calls:
//	      - name: get_ticket
//	        args: {ticket_id: T-40127}
//	    # Optional; estimated from the request and the turn when absent.
//	    usage: {input_tokens: 6000, output_tokens: 120, cache_read_tokens: 0, cache_creation_tokens: 0}
//	  - text: "All done: the duplicate charge was refunded."
//	    # Optional: fail unless the last user message's tool results contain this.
//	    expect_tool_result_contains: "refund_id"
//	    # Optional, for turns without tool calls: end_turn (default), max_tokens or refusal.
//	    stop_reason: end_turn
//	  - text: "The refund went through."
//	    # Optional: a decision point. From this position on, the turns of the
//	    # first branch whose text occurs in the tool results the model read
//	    # just before it (here: the refund was refused at approval) replace
//	    # this turn and the ones after it.
//	    branches:
//	      - if_tool_result_contains: '"control":"approval"'
//	        turns:
//	          - text: "The supervisor did not approve the refund; it was not issued."
//
// Decoding is strict: an unknown field is an error, and every error names the
// file and the turn. The provider keeps no state between calls: the turn it
// plays is the number of assistant messages already in the request, so a run
// that crashed and is replayed, and many runs at once, all see the same turns.
// Branches keep that: which branch a run is on is read again, on every call,
// from the tool results in the request.
package scripted

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"regexp"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/agentplane/agentplane/model"
)

// DefaultFinal is the answer to a request offering no tools when the script
// gives no final text.
const DefaultFinal = "I have reached the limit of this run, so I am stopping here and reporting what I found so far."

// maxArgNodes bounds the YAML nodes the tool arguments of one script may
// expand to, so that anchors and aliases cannot blow up memory.
const maxArgNodes = 1 << 16

// Script is a parsed script. Build one with Parse or Load, or in Go for tests
// (then check it with Validate).
type Script struct {
	// Source names where the script came from (its file name), for messages.
	Source string
	// Final answers requests that offer no tools; empty means DefaultFinal.
	Final string
	// Turns are the model's answers in order: Turns[i] answers a request that
	// already holds i assistant messages.
	Turns []Turn
}

// Turn is one scripted model answer.
type Turn struct {
	Text      string
	ToolCalls []ToolCall
	// Usage, when set, is reported as is; otherwise usage is estimated.
	Usage *model.Usage
	// StopReason is empty or, for a turn without tool calls, one of
	// end_turn, max_tokens and refusal.
	StopReason string
	// ExpectToolResultContains, when set, makes the call fail unless the
	// tool results of the request's last user message contain it.
	ExpectToolResultContains string
	// Branches make this turn a decision point (see Script.pick).
	Branches []Branch
}

// Branch is an alternative continuation of a script.
type Branch struct {
	// IfToolResultContains is the condition: text the tool results the
	// model read just before the branching turn contain.
	IfToolResultContains string
	// Turns replace the branching turn and the turns after it.
	Turns []Turn
}

// maxBranchDepth bounds how deeply branches nest.
const maxBranchDepth = 8

// ToolCall is one scripted tool call.
type ToolCall struct {
	Name string
	// Args is the call's input: a JSON object.
	Args json.RawMessage
}

// The YAML shapes of a script file.
type (
	fileScript struct {
		Final string     `yaml:"final"`
		Turns []fileTurn `yaml:"turns"`
	}
	fileTurn struct {
		Text                     string         `yaml:"text"`
		ToolCalls                []fileToolCall `yaml:"tool_calls"`
		Usage                    *fileUsage     `yaml:"usage"`
		StopReason               string         `yaml:"stop_reason"`
		ExpectToolResultContains string         `yaml:"expect_tool_result_contains"`
		Branches                 []fileBranch   `yaml:"branches"`
	}
	fileBranch struct {
		IfToolResultContains string     `yaml:"if_tool_result_contains"`
		Turns                []fileTurn `yaml:"turns"`
	}
	fileToolCall struct {
		Name string    `yaml:"name"`
		Args yaml.Node `yaml:"args"`
	}
	fileUsage struct {
		InputTokens         int64 `yaml:"input_tokens"`
		OutputTokens        int64 `yaml:"output_tokens"`
		CacheReadTokens     int64 `yaml:"cache_read_tokens"`
		CacheCreationTokens int64 `yaml:"cache_creation_tokens"`
	}
)

// Load reads and parses the script at path.
func Load(path string) (*Script, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("scripted: %w", err)
	}
	return Parse(path, data)
}

// Parse parses a script; filename is used in error messages and kept as the
// script's Source.
func Parse(filename string, data []byte) (*Script, error) {
	var doc yaml.Node
	if err := guard(func() error { return yaml.Unmarshal(data, &doc) }); err != nil {
		return nil, fmt.Errorf("%s: %w", filename, err)
	}
	span := turnLines(&doc)

	var f fileScript
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := guard(func() error { return dec.Decode(&f) }); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("%s: empty script: want a mapping with a turns list", filename)
		}
		return nil, fmt.Errorf("%s: %s", filename, locateTurns(err, span))
	}
	var extra yaml.Node
	if err := guard(func() error { return dec.Decode(&extra) }); !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("%s: more than one YAML document; a script is one document", filename)
	}

	s := &Script{Source: filename, Final: f.Final, Turns: make([]Turn, len(f.Turns))}
	budget := maxArgNodes
	for i := range f.Turns {
		t, err := convertTurn(&f.Turns[i], i, &budget, 0)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", turnWhere(filename, i, span), err)
		}
		s.Turns[i] = t
	}
	if err := s.validateScript(); err != nil {
		return nil, fmt.Errorf("%s: %w", filename, err)
	}
	return s, nil
}

// convertTurn turns the YAML shape of turn i (and of its branches, whose
// first turn is also played as turn i) into a Turn and checks it.
func convertTurn(ft *fileTurn, i int, budget *int, depth int) (Turn, error) {
	t := Turn{
		Text:                     ft.Text,
		StopReason:               ft.StopReason,
		ExpectToolResultContains: ft.ExpectToolResultContains,
	}
	if ft.Usage != nil {
		t.Usage = &model.Usage{
			InputTokens:         ft.Usage.InputTokens,
			OutputTokens:        ft.Usage.OutputTokens,
			CacheReadTokens:     ft.Usage.CacheReadTokens,
			CacheCreationTokens: ft.Usage.CacheCreationTokens,
		}
	}
	for j, fc := range ft.ToolCalls {
		args, err := argsJSON(&fc.Args, budget)
		if err != nil {
			return Turn{}, fmt.Errorf("tool_calls[%d] (%s): args: %w", j, fc.Name, err)
		}
		t.ToolCalls = append(t.ToolCalls, ToolCall{Name: fc.Name, Args: args})
	}
	if len(ft.Branches) > 0 && depth >= maxBranchDepth {
		return Turn{}, fmt.Errorf("branches nest deeper than %d levels", maxBranchDepth)
	}
	for b, fb := range ft.Branches {
		br := Branch{IfToolResultContains: fb.IfToolResultContains}
		for k := range fb.Turns {
			*budget -= 1 // every turn counts against the script's size bound
			if *budget < 0 {
				return Turn{}, errors.New("the script has too many turns")
			}
			bt, err := convertTurn(&fb.Turns[k], i+k, budget, depth+1)
			if err != nil {
				return Turn{}, fmt.Errorf("branches[%d].turns[%d]: %w", b, k, err)
			}
			br.Turns = append(br.Turns, bt)
		}
		t.Branches = append(t.Branches, br)
	}
	if err := t.validate(i); err != nil {
		return Turn{}, err
	}
	return t, nil
}

// guard runs a yaml.v3 call, which is third-party code fed untrusted bytes,
// turning a panic inside it into an error rather than a crash. Only yaml
// calls are guarded, so that fuzzing still finds panics in this package.
func guard(call func() error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("yaml: cannot parse: %v", r)
		}
	}()
	return call()
}

// Validate checks a script built in Go the way Parse checks a file.
func (s *Script) Validate() error {
	for i, t := range s.Turns {
		if err := t.validate(i); err != nil {
			return fmt.Errorf("%s: turns[%d]: %w", s.name(), i, err)
		}
	}
	if err := s.validateScript(); err != nil {
		return fmt.Errorf("%s: %w", s.name(), err)
	}
	return nil
}

func (s *Script) name() string {
	if s.Source == "" {
		return "script"
	}
	return s.Source
}

func (s *Script) validateScript() error {
	if len(s.Turns) == 0 {
		return errors.New("no turns: a script needs at least one turn")
	}
	if err := model.ValidateResponse(finalResponse(s.finalText(), nil)); err != nil {
		return fmt.Errorf("final: %w", err)
	}
	return nil
}

func (s *Script) finalText() string {
	if s.Final == "" {
		return DefaultFinal
	}
	return s.Final
}

// validate checks one turn; index i is the turn's position, used for the
// tool-use ids the turn would produce.
func (t Turn) validate(i int) error {
	if t.Text == "" && len(t.ToolCalls) == 0 {
		return errors.New("turn has neither text nor tool_calls")
	}
	switch t.StopReason {
	case "", model.StopEndTurn, model.StopMaxTokens, model.StopRefusal:
		if t.StopReason != "" && len(t.ToolCalls) > 0 {
			return fmt.Errorf("stop_reason %q conflicts with tool_calls (a turn with tool calls stops with tool_use)", t.StopReason)
		}
	case model.StopToolUse:
		if len(t.ToolCalls) == 0 {
			return errors.New("stop_reason tool_use needs tool_calls")
		}
	default:
		return fmt.Errorf("unknown stop_reason %q (want end_turn, max_tokens or refusal)", t.StopReason)
	}
	for j, c := range t.ToolCalls {
		if !model.ValidToolName(c.Name) {
			return fmt.Errorf("tool_calls[%d]: tool name %q does not match ^[a-zA-Z0-9_-]{1,64}$", j, c.Name)
		}
	}
	if u := t.Usage; u != nil && (u.InputTokens < 0 || u.OutputTokens < 0 || u.CacheReadTokens < 0 || u.CacheCreationTokens < 0) {
		return errors.New("usage: token counts cannot be negative")
	}
	// Whatever the turn would answer must pass the checks real answers pass.
	if err := model.ValidateResponse(t.response(i, nil)); err != nil {
		return err
	}
	for b, br := range t.Branches {
		if br.IfToolResultContains == "" {
			return fmt.Errorf("branches[%d]: if_tool_result_contains is required", b)
		}
		if len(br.Turns) == 0 {
			return fmt.Errorf("branches[%d]: no turns", b)
		}
		for k, bt := range br.Turns {
			if err := bt.validate(i + k); err != nil {
				return fmt.Errorf("branches[%d].turns[%d]: %w", b, k, err)
			}
		}
	}
	return nil
}

// pick returns the turn to play as turn index turn (the number of assistant
// messages in req), and how many turns the path it is on has. A turn with
// branches is a decision point: from its position p on, the turns of the
// first branch whose condition holds for the tool results the model read
// just before its p-th answer replace it and the turns after it. Only req
// decides, so every call of a run (and a replay of it) takes the same path.
func (s *Script) pick(turn int, req *model.Request) (t Turn, n int, ok bool) {
	list, base := s.Turns, 0
descend:
	for {
		for i := 0; i < len(list) && base+i <= turn; i++ {
			for _, b := range list[i].Branches {
				if strings.Contains(resultsBefore(req, base+i), b.IfToolResultContains) {
					list, base = b.Turns, base+i
					continue descend
				}
			}
		}
		break
	}
	n = base + len(list)
	if k := turn - base; k < len(list) {
		return list[k], n, true
	}
	return list[len(list)-1], n, false
}

// resultsBefore joins the tool_result texts of the last user message before
// req's p-th assistant message (counting from 0; the request's last user
// message when there are only p).
func resultsBefore(req *model.Request, p int) string {
	end := len(req.Messages)
	seen := 0
	for i, m := range req.Messages {
		if m.Role == model.RoleAssistant {
			if seen == p {
				end = i
				break
			}
			seen++
		}
	}
	for i := end - 1; i >= 0; i-- {
		if req.Messages[i].Role == model.RoleUser {
			var b strings.Builder
			for _, part := range req.Messages[i].Content {
				if part.Type == model.PartToolResult {
					b.WriteString(part.Text)
					b.WriteByte('\n')
				}
			}
			return b.String()
		}
	}
	return ""
}

// turnSpan locates the top-level turns list: the line of each item, and the
// line where the list ends (that of the next top-level key, or MaxInt).
type turnSpan struct {
	lines []int
	end   int
}

func turnLines(doc *yaml.Node) turnSpan {
	if doc.Kind != yaml.DocumentNode || len(doc.Content) == 0 {
		return turnSpan{}
	}
	root := doc.Content[0]
	if root.Kind != yaml.MappingNode {
		return turnSpan{}
	}
	for i := 0; i+1 < len(root.Content); i += 2 {
		if root.Content[i].Value == "turns" && root.Content[i+1].Kind == yaml.SequenceNode {
			span := turnSpan{end: math.MaxInt}
			for _, item := range root.Content[i+1].Content {
				span.lines = append(span.lines, item.Line)
			}
			if i+2 < len(root.Content) {
				span.end = root.Content[i+2].Line
			}
			return span
		}
	}
	return turnSpan{}
}

func turnWhere(filename string, i int, span turnSpan) string {
	if i < len(span.lines) {
		return fmt.Sprintf("%s: turns[%d] (line %d)", filename, i, span.lines[i])
	}
	return fmt.Sprintf("%s: turns[%d]", filename, i)
}

var (
	lineRE     = regexp.MustCompile(`^line (\d+): `)
	unknownRE  = regexp.MustCompile(`field (\S+) not found in type scripted\.(\w+)`)
	typeNameRE = regexp.MustCompile(`scripted\.file\w+`)
)

// locateTurns rewrites yaml.v3's "line N: ..." type errors to name the turn
// whose lines hold N, and to speak of fields rather than Go types.
func locateTurns(err error, span turnSpan) string {
	var te *yaml.TypeError
	if !errors.As(err, &te) {
		return err.Error()
	}
	msgs := make([]string, 0, len(te.Errors))
	for _, m := range te.Errors {
		m = unknownRE.ReplaceAllStringFunc(m, func(s string) string {
			sub := unknownRE.FindStringSubmatch(s)
			return fmt.Sprintf("unknown field %q in %s", sub[1], shapeName(sub[2]))
		})
		m = typeNameRE.ReplaceAllStringFunc(m, func(s string) string {
			return shapeName(typeNameRE.FindStringSubmatch(s)[0][len("scripted."):])
		})
		if sub := lineRE.FindStringSubmatch(m); sub != nil {
			line, _ := strconv.Atoi(sub[1])
			turn := -1
			for i, l := range span.lines {
				if l <= line && line < span.end {
					turn = i
				}
			}
			if turn >= 0 {
				m = fmt.Sprintf("turns[%d] (%s", turn, strings.Replace(m, ": ", "): ", 1))
			}
		}
		msgs = append(msgs, m)
	}
	return "invalid script: " + strings.Join(msgs, "; ")
}

// shapeName names a YAML shape for messages instead of its Go type.
func shapeName(goType string) string {
	switch goType {
	case "fileScript":
		return "the script"
	case "fileTurn":
		return "a turn"
	case "fileToolCall":
		return "a tool call"
	case "fileUsage":
		return "usage"
	case "fileBranch":
		return "a branch"
	}
	return goType
}

// argsJSON converts a tool call's YAML args, which must be a mapping (or
// absent, meaning {}), to a JSON object. Keys come out sorted, so the bytes
// are deterministic. Scalars keep their YAML meaning, except that timestamps
// stay the strings they were written as; NaN, infinities, merge keys and
// custom tags are refused.
func argsJSON(n *yaml.Node, budget *int) (json.RawMessage, error) {
	if n.Kind == 0 || (n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null") {
		return json.RawMessage("{}"), nil
	}
	if n.Kind != yaml.MappingNode {
		return nil, fmt.Errorf("line %d: must be a mapping of argument names to values", n.Line)
	}
	v, err := nodeValue(n, budget, 0)
	if err != nil {
		return nil, err
	}
	out, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	return out, nil
}

func nodeValue(n *yaml.Node, budget *int, depth int) (any, error) {
	*budget--
	if *budget < 0 {
		return nil, errors.New("arguments expand to too many values (check anchors and aliases)")
	}
	if depth >= model.MaxToolInputDepth {
		return nil, fmt.Errorf("line %d: nested deeper than %d levels", n.Line, model.MaxToolInputDepth)
	}
	switch n.Kind {
	case yaml.AliasNode:
		if n.Alias == nil {
			return nil, fmt.Errorf("line %d: unresolved alias", n.Line)
		}
		return nodeValue(n.Alias, budget, depth+1)
	case yaml.MappingNode:
		m := make(map[string]any, len(n.Content)/2)
		for i := 0; i+1 < len(n.Content); i += 2 {
			k := n.Content[i]
			if k.Kind != yaml.ScalarNode || k.ShortTag() == "!!merge" {
				return nil, fmt.Errorf("line %d: keys must be plain scalars (merge keys are not supported)", k.Line)
			}
			if _, dup := m[k.Value]; dup {
				return nil, fmt.Errorf("line %d: key %q appears twice", k.Line, k.Value)
			}
			v, err := nodeValue(n.Content[i+1], budget, depth+1)
			if err != nil {
				return nil, err
			}
			m[k.Value] = v
		}
		return m, nil
	case yaml.SequenceNode:
		s := make([]any, 0, len(n.Content))
		for _, c := range n.Content {
			v, err := nodeValue(c, budget, depth+1)
			if err != nil {
				return nil, err
			}
			s = append(s, v)
		}
		return s, nil
	case yaml.ScalarNode:
		return scalarValue(n)
	}
	return nil, fmt.Errorf("line %d: unsupported YAML node", n.Line)
}

func scalarValue(n *yaml.Node) (any, error) {
	switch n.ShortTag() {
	case "!!str", "!!timestamp", "!!binary":
		return n.Value, nil
	case "!!null":
		return nil, nil
	case "!!bool":
		var b bool
		if err := guard(func() error { return n.Decode(&b) }); err != nil {
			return nil, fmt.Errorf("line %d: %w", n.Line, err)
		}
		return b, nil
	case "!!int":
		var i int64
		if err := guard(func() error { return n.Decode(&i) }); err == nil {
			return i, nil
		}
		var u uint64
		if err := guard(func() error { return n.Decode(&u) }); err == nil {
			return u, nil
		}
		return nil, fmt.Errorf("line %d: integer %q is out of range", n.Line, n.Value)
	case "!!float":
		var f float64
		if err := guard(func() error { return n.Decode(&f) }); err != nil {
			return nil, fmt.Errorf("line %d: %w", n.Line, err)
		}
		if math.IsNaN(f) || math.IsInf(f, 0) {
			return nil, fmt.Errorf("line %d: %q has no JSON form", n.Line, n.Value)
		}
		return f, nil
	}
	return nil, fmt.Errorf("line %d: unsupported tag %q", n.Line, n.Tag)
}
