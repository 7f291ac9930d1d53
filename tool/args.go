package tool

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/santhosh-tekuri/jsonschema/v6/kind"

	"github.com/agentplane/agentplane/internal/jsoncanon"
)

// maxArgsProblems bounds how many problems an ArgsError lists.
const maxArgsProblems = 10

// ArgsError reports arguments that do not match a tool's input schema. Its
// message is short and meant for the model, which can correct the call.
type ArgsError struct {
	Tool     string
	Problems []string
}

func (e *ArgsError) Error() string {
	return fmt.Sprintf("invalid arguments for %s: %s", e.Tool, strings.Join(e.Problems, "; "))
}

// ValidateArgs checks args against the tool's input schema. Arguments must
// be a JSON object of at most MaxArgsBytes, nested at most
// jsoncanon.MaxDepth deep. A mismatch is an *ArgsError.
func (m *Manifest) ValidateArgs(args json.RawMessage) error {
	if m.schema == nil {
		return fmt.Errorf("tool %q: manifest was not loaded, so it has no compiled input schema", m.Name)
	}
	bad := func(format string, a ...any) error {
		return &ArgsError{Tool: m.Name, Problems: []string{fmt.Sprintf(format, a...)}}
	}
	if len(args) > MaxArgsBytes {
		return bad("arguments are larger than %d bytes", MaxArgsBytes)
	}
	canon, err := jsoncanon.Canonicalize(args)
	if err != nil {
		return bad("arguments are not valid JSON: %s", strings.TrimPrefix(err.Error(), "invalid JSON: "))
	}
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(canon))
	if err != nil {
		return bad("arguments are not valid JSON: %v", err)
	}
	if _, ok := v.(map[string]any); !ok {
		return bad("arguments must be a JSON object, got %s", jsonKind(v))
	}
	err = m.schema.Validate(v)
	if err == nil {
		return nil
	}
	var ve *jsonschema.ValidationError
	if !errors.As(err, &ve) {
		return bad("%s", oneLine(err.Error()))
	}
	var problems []string
	collectProblems(ve, &problems)
	// The validator visits properties in map order; sorted, the message is
	// the same every time (a recorded decision quotes it).
	slices.Sort(problems)
	if len(problems) == 0 {
		problems = []string{oneLine(ve.Error())}
	}
	if len(problems) > maxArgsProblems {
		n := len(problems) - maxArgsProblems
		problems = append(problems[:maxArgsProblems], fmt.Sprintf("and %d more", n))
	}
	return &ArgsError{Tool: m.Name, Problems: problems}
}

// ValidateResult checks an MCP tool's structured result against the output
// schema its server declared. A tool without an output schema accepts any
// result; one with a schema must return structured content matching it. A
// mismatch is an *ArgsError naming the result.
func (m *Manifest) ValidateResult(structured json.RawMessage) error {
	if m.MCP == nil || m.MCP.OutputSchema == nil {
		return nil
	}
	if m.MCP.output == nil {
		return fmt.Errorf("tool %q: manifest was not loaded, so it has no compiled output schema", m.Name)
	}
	bad := func(format string, a ...any) error {
		return &ArgsError{Tool: m.Name, Problems: []string{fmt.Sprintf(format, a...)}}
	}
	if len(structured) == 0 {
		return bad("the tool declares an output schema but returned no structured content")
	}
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(structured))
	if err != nil {
		return bad("structured content is not valid JSON: %v", err)
	}
	err = m.MCP.output.Validate(v)
	if err == nil {
		return nil
	}
	var ve *jsonschema.ValidationError
	if !errors.As(err, &ve) {
		return bad("%s", oneLine(err.Error()))
	}
	var problems []string
	collectProblems(ve, &problems)
	slices.Sort(problems)
	if len(problems) > maxArgsProblems {
		problems = problems[:maxArgsProblems]
	}
	return &ArgsError{Tool: m.Name, Problems: problems}
}

// collectProblems appends one message per leaf of the error tree, without
// repeats.
func collectProblems(e *jsonschema.ValidationError, out *[]string) {
	if len(e.Causes) > 0 {
		for _, c := range e.Causes {
			collectProblems(c, out)
		}
		return
	}
	msg := problemText(e.ErrorKind)
	if loc := instancePath(e.InstanceLocation); loc != "" {
		msg = strconv.Quote(loc) + ": " + msg
	}
	if !slices.Contains(*out, msg) {
		*out = append(*out, msg)
	}
}

func problemText(k jsonschema.ErrorKind) string {
	switch k := k.(type) {
	case *kind.Type:
		return fmt.Sprintf("expected %s, got %s", strings.Join(k.Want, " or "), k.Got)
	case *kind.Required:
		return "missing " + plural(len(k.Missing), "property", "properties") + " " + quoteAll(k.Missing)
	case *kind.AdditionalProperties:
		// Sorted: the validator lists them in map order, and a decision's
		// reason must not change from one evaluation to the next.
		return "unexpected " + plural(len(k.Properties), "property", "properties") + " " + quoteAll(slices.Sorted(slices.Values(k.Properties)))
	case *kind.FalseSchema:
		return "not allowed"
	case *kind.Format:
		// The value is not quoted back: it may carry the injected text
		// (a header after a line break) that the format refused.
		return fmt.Sprintf("not a valid %s: %v", k.Want, k.Err)
	}
	// Other kinds describe themselves; the default printer is English.
	u := (&jsonschema.ValidationError{ErrorKind: k}).BasicOutput()
	if u.Error != nil {
		return u.Error.String()
	}
	return "invalid"
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

func quoteAll(ss []string) string {
	q := make([]string, len(ss))
	for i, s := range ss {
		q[i] = strconv.Quote(s)
	}
	return strings.Join(q, ", ")
}

// instancePath renders a JSON location as a.b[2].c.
func instancePath(tokens []string) string {
	var b strings.Builder
	for _, t := range tokens {
		if _, err := strconv.Atoi(t); err == nil && b.Len() > 0 {
			fmt.Fprintf(&b, "[%s]", t)
			continue
		}
		if b.Len() > 0 {
			b.WriteByte('.')
		}
		b.WriteString(t)
	}
	return b.String()
}

func jsonKind(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case bool:
		return "boolean"
	case string:
		return "string"
	case json.Number:
		return "number"
	case []any:
		return "array"
	case map[string]any:
		return "object"
	}
	return fmt.Sprintf("%T", v)
}

// NeedsApproval reports whether a call with args needs a human's approval
// under the manifest's approval rule, and why. With required_above, a call
// needs approval when any argument named in approval_threshold exceeds its
// number: numbers compare by value, strings and arrays by length; a missing
// argument, or one of another type, does not count. Arguments that cannot be
// read need approval (the check fails closed).
func (m *Manifest) NeedsApproval(args json.RawMessage) (bool, string) {
	switch m.Approval {
	case ApprovalAlways:
		return true, fmt.Sprintf("%s always needs approval", m.Name)
	case ApprovalRequiredAbove:
	default:
		return false, ""
	}
	dec := json.NewDecoder(bytes.NewReader(args))
	dec.UseNumber()
	var obj map[string]any
	if err := dec.Decode(&obj); err != nil || obj == nil {
		return true, fmt.Sprintf("%s needs approval: its arguments could not be read", m.Name)
	}
	var reasons []string
	for _, name := range slices.Sorted(maps.Keys(m.ApprovalThreshold)) {
		limit := m.ApprovalThreshold[name]
		var (
			got  float64
			what string
		)
		switch v := obj[name].(type) {
		case json.Number:
			f, err := strconv.ParseFloat(string(v), 64)
			if err != nil && !errors.Is(err, strconv.ErrRange) {
				continue
			}
			got, what = f, fmt.Sprintf("%s is %s", name, v)
		case string:
			n := utf8.RuneCountInString(v)
			got, what = float64(n), fmt.Sprintf("%s has length %d", name, n)
		case []any:
			got, what = float64(len(v)), fmt.Sprintf("%s has %d items", name, len(v))
		default:
			continue
		}
		if got > limit {
			reasons = append(reasons, fmt.Sprintf("%s, above the threshold %s", what, strconv.FormatFloat(limit, 'f', -1, 64)))
		}
	}
	if len(reasons) == 0 {
		return false, ""
	}
	return true, fmt.Sprintf("%s needs approval: %s", m.Name, strings.Join(reasons, "; "))
}
