package sandbox

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"regexp"
	"sort"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/agentplane/agentplane/trace"
)

// A program inside a sandbox may emit spans of its own work (a query it
// ran, a page it parsed) by writing them, one JSON object a line, to the
// file named by AGENTPLANE_SPANS_FILE. They reach the run's trace only
// through the host: after the command the Manager reads at most
// MaxGuestSpansBytes of the file (a larger one is refused whole), empties it, and parses it as hostile
// input. Nothing in a line chooses a trace, a span id or a parent outside
// the call: every accepted span becomes a child of the call's execute_tool
// span (or of an earlier span of the same call), its times are clamped into
// the host's own window of the command, its attributes may not use the
// platform's namespaces, and a call and a sandbox session may emit only so
// many.
const (
	// GuestSpansEnv names the variable that tells the program where to
	// write its spans.
	GuestSpansEnv = "AGENTPLANE_SPANS_FILE"
	// GuestSpansFile is that file, relative to the workspace.
	GuestSpansFile = ".agentplane-spans.jsonl"

	MaxGuestSpansBytes      = 64 << 10
	MaxGuestSpansPerCall    = 64
	MaxGuestSpansPerSession = 512

	maxGuestSpanAttrs    = 16
	maxGuestSpanValue    = 256
	maxGuestSpanNameRune = 64
)

// guestLine is the shape a program writes. Times are Unix nanoseconds of
// the sandbox's clock; anything else in the line is refused.
type guestLine struct {
	Name          string          `json:"name"`
	Parent        *int            `json:"parent,omitempty"`
	StartUnixNano int64           `json:"start_unix_nano"`
	EndUnixNano   int64           `json:"end_unix_nano"`
	Status        string          `json:"status,omitempty"`
	Attributes    json.RawMessage `json:"attributes,omitempty"`
}

var (
	reGuestSpanName = regexp.MustCompile(`^[A-Za-z0-9 _.:/-]+$`)
	reGuestAttrKey  = regexp.MustCompile(`^[a-z][a-z0-9_]*(\.[a-z0-9_]+)*$`)
	// Namespaces only the host writes: a guest cannot pass for the
	// platform, the GenAI conventions or the resource.
	reservedAttrPrefixes = []string{"agentplane.", "gen_ai.", "service.", "telemetry.", "otel.", "host.", "process."}
)

// ParseGuestSpans reads a program's spans file. window is when the host saw
// the command start and end; left is how many spans its session may still
// emit. It never fails: what it refuses is counted in Dropped.
func ParseGuestSpans(data []byte, start, end time.Time, left int) *trace.GuestSpans {
	out := &trace.GuestSpans{}
	reasons := map[string]bool{}
	drop := func(reason string) {
		out.Dropped++
		reasons[reason] = true
	}
	window := end.Sub(start)
	if window < 0 {
		window = 0
	}
	limit := min(MaxGuestSpansPerCall, max(left, 0))
	lines := bytes.Split(data, []byte("\n"))
	for _, line := range lines {
		line = bytes.TrimSpace(line)
		if len(line) == 0 {
			continue
		}
		if len(out.Spans) >= limit {
			drop(fmt.Sprintf("over the span limit (%d a call, %d a sandbox session)", MaxGuestSpansPerCall, MaxGuestSpansPerSession))
			continue
		}
		s, reason := parseGuestLine(line, len(out.Spans), start, window)
		if reason != "" {
			drop(reason)
			continue
		}
		out.Spans = append(out.Spans, s)
	}
	for r := range reasons {
		out.Reasons = append(out.Reasons, r)
	}
	sort.Strings(out.Reasons)
	if len(out.Spans) == 0 && out.Dropped == 0 {
		return nil
	}
	return out
}

func parseGuestLine(line []byte, index int, start time.Time, window time.Duration) (trace.GuestSpan, string) {
	var g guestLine
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&g); err != nil || dec.More() {
		return trace.GuestSpan{}, "a line is not one span object of the documented shape"
	}
	if !utf8.ValidString(g.Name) || utf8.RuneCountInString(g.Name) > maxGuestSpanNameRune || !reGuestSpanName.MatchString(g.Name) {
		return trace.GuestSpan{}, "a span name is empty, too long or not letters, digits, space and _.:/-"
	}
	s := trace.GuestSpan{Name: g.Name, Parent: -1}
	if g.Parent != nil {
		if *g.Parent < 0 || *g.Parent >= index {
			return trace.GuestSpan{}, "a parent is not an earlier span of the same call"
		}
		s.Parent = *g.Parent
	}
	switch g.Status {
	case "", "ok":
	case "error":
		s.Error = true
	default:
		return trace.GuestSpan{}, "a status is not ok or error"
	}
	if g.EndUnixNano < g.StartUnixNano || g.StartUnixNano <= 0 {
		return trace.GuestSpan{}, "a span ends before it starts, or has no start"
	}
	// The sandbox's clock is a claim: offsets are clamped into the host's
	// window of the command.
	clamp := func(ns int64) int64 {
		off := time.Unix(0, ns).Sub(start)
		return int64(min(max(off, 0), window) / time.Microsecond)
	}
	s.StartUS = clamp(g.StartUnixNano)
	s.DurationUS = clamp(g.EndUnixNano) - s.StartUS
	if len(g.Attributes) > 0 {
		attrs, reason := guestAttrs(g.Attributes)
		if reason != "" {
			return trace.GuestSpan{}, reason
		}
		s.Attributes = attrs
	}
	return s, ""
}

func guestAttrs(raw json.RawMessage) (map[string]any, string) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, "attributes are not an object"
	}
	if len(m) > maxGuestSpanAttrs {
		return nil, fmt.Sprintf("a span has more than %d attributes", maxGuestSpanAttrs)
	}
	out := make(map[string]any, len(m))
	for k, v := range m {
		if len(k) > 64 || !reGuestAttrKey.MatchString(k) {
			return nil, "an attribute key is not lower-case dotted words"
		}
		for _, p := range reservedAttrPrefixes {
			if strings.HasPrefix(k, p) {
				return nil, "an attribute key uses a namespace only the host writes (agentplane., gen_ai., service., ...)"
			}
		}
		var x any
		d := json.NewDecoder(bytes.NewReader(v))
		d.UseNumber()
		if err := d.Decode(&x); err != nil {
			return nil, "an attribute value is not JSON"
		}
		switch x := x.(type) {
		case string:
			out[k] = Sanitize([]byte(x), maxGuestSpanValue, false, false).Text
		case bool:
			out[k] = x
		case json.Number:
			if i, err := x.Int64(); err == nil {
				out[k] = i
				continue
			}
			f, err := x.Float64()
			if err != nil || math.IsInf(f, 0) || math.IsNaN(f) {
				return nil, "an attribute number is out of range"
			}
			out[k] = f
		default:
			return nil, "an attribute value is not a string, a number or a boolean"
		}
	}
	return out, ""
}
