package agent

import (
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// Policy action kinds.
const (
	ActionAllow           = "allow"
	ActionDeny            = "deny"
	ActionRequireApproval = "require_approval"
)

// DefaultApprovalExpiry is how long an approval request waits for a
// decision when its policy sets no expiry.
const DefaultApprovalExpiry = 24 * time.Hour

const (
	maxReasonBytes = 1024
	maxApproval    = 30 * 24 * time.Hour
)

var reGroup = regexp.MustCompile(`^[a-z][a-z0-9_.-]{0,63}$`)

// Action is what a policy does when its condition holds.
type Action struct {
	// Kind is ActionAllow, ActionDeny or ActionRequireApproval.
	Kind string
	// Reason, for deny, is told to the model and recorded.
	Reason string
	// Group and Expires, for require_approval, name who may approve and
	// how long the request waits.
	Group   string
	Expires time.Duration
}

// ParseAction parses a policy action:
//
//	allow
//	deny
//	deny("reason")
//	deny(reason: "reason")
//	require_approval(group: card-ops-supervisors)
//	require_approval(group: card-ops-supervisors, expires: 24h)
//
// Arguments are written key: value or key=value (the second needs no
// quoting in YAML). A value is a double-quoted string or a bare word;
// expires is a Go duration or a number of days such as 2d, and defaults to
// DefaultApprovalExpiry.
func ParseAction(s string) (Action, error) {
	p := &actionParser{src: s}
	name := p.ident()
	if name == "" {
		return Action{}, fmt.Errorf("want allow, deny(reason: \"...\") or require_approval(group: NAME, expires: DURATION), got %q", s)
	}
	args, err := p.args()
	if err != nil {
		return Action{}, fmt.Errorf("%s: %w", name, err)
	}
	a := Action{Kind: name}
	switch name {
	case ActionAllow:
		if len(args) > 0 {
			return Action{}, errors.New("allow takes no arguments")
		}
	case ActionDeny:
		for _, arg := range args {
			if arg.key != "" && arg.key != "reason" {
				return Action{}, fmt.Errorf("deny: unknown argument %q (deny takes a reason)", arg.key)
			}
		}
		if len(args) > 1 {
			return Action{}, errors.New("deny takes one reason")
		}
		if len(args) == 1 {
			a.Reason = args[0].value
		}
		if len(a.Reason) > maxReasonBytes || !utf8.ValidString(a.Reason) {
			return Action{}, fmt.Errorf("deny: reason must be UTF-8 text of at most %d bytes", maxReasonBytes)
		}
	case ActionRequireApproval:
		a.Expires = DefaultApprovalExpiry
		seen := map[string]bool{}
		for _, arg := range args {
			if seen[arg.key] {
				return Action{}, fmt.Errorf("require_approval: %q given twice", arg.key)
			}
			seen[arg.key] = true
			switch arg.key {
			case "group":
				if !reGroup.MatchString(arg.value) {
					return Action{}, fmt.Errorf("require_approval: group must be lower case letters, digits, _, . and -, starting with a letter (got %q)", arg.value)
				}
				a.Group = arg.value
			case "expires":
				d, err := ParseDuration(arg.value)
				if err != nil || d <= 0 || d > maxApproval {
					return Action{}, fmt.Errorf("require_approval: expires must be a duration such as 30m, 24h or 2d, at most 30d (got %q)", arg.value)
				}
				a.Expires = d
			case "":
				return Action{}, errors.New("require_approval: name each argument (group: NAME, expires: DURATION)")
			default:
				return Action{}, fmt.Errorf("require_approval: unknown argument %q (use group and expires)", arg.key)
			}
		}
		if a.Group == "" {
			return Action{}, errors.New("require_approval: group is required (who may approve)")
		}
	default:
		return Action{}, fmt.Errorf("unknown action %q (use allow, deny or require_approval)", name)
	}
	return a, nil
}

// String writes the action in the form ParseAction reads, with every
// default spelled out.
func (a Action) String() string {
	switch a.Kind {
	case ActionDeny:
		if a.Reason == "" {
			return "deny"
		}
		return fmt.Sprintf("deny(reason: %s)", strconv.Quote(a.Reason))
	case ActionRequireApproval:
		return fmt.Sprintf("require_approval(group: %s, expires: %s)", a.Group, formatDuration(a.Expires))
	}
	return a.Kind
}

type actionArg struct {
	key, value string
}

type actionParser struct {
	src string
	pos int
}

func (p *actionParser) skipSpace() {
	for p.pos < len(p.src) && (p.src[p.pos] == ' ' || p.src[p.pos] == '\t' || p.src[p.pos] == '\n' || p.src[p.pos] == '\r') {
		p.pos++
	}
}

func (p *actionParser) peek() byte {
	p.skipSpace()
	if p.pos < len(p.src) {
		return p.src[p.pos]
	}
	return 0
}

// ident reads [a-z_]+.
func (p *actionParser) ident() string {
	p.skipSpace()
	start := p.pos
	for p.pos < len(p.src) && (p.src[p.pos] >= 'a' && p.src[p.pos] <= 'z' || p.src[p.pos] == '_') {
		p.pos++
	}
	return p.src[start:p.pos]
}

// args reads an optional parenthesised argument list and requires the end
// of input after it.
func (p *actionParser) args() ([]actionArg, error) {
	var out []actionArg
	switch p.peek() {
	case 0:
		return nil, nil
	case '(':
		p.pos++
	default:
		return nil, fmt.Errorf("unexpected %q after the action name", p.src[p.pos:])
	}
	if p.peek() == ')' {
		p.pos++
	} else {
		for {
			arg, err := p.arg()
			if err != nil {
				return nil, err
			}
			out = append(out, arg)
			c := p.peek()
			p.pos++
			if c == ')' {
				break
			}
			if c == 0 {
				return nil, errors.New("missing )")
			}
			if c != ',' {
				return nil, errors.New("arguments must be separated by commas and end with )")
			}
		}
	}
	if p.peek() != 0 {
		return nil, fmt.Errorf("unexpected %q after the closing )", p.src[p.pos:])
	}
	return out, nil
}

func (p *actionParser) arg() (actionArg, error) {
	save := p.pos
	key := p.ident()
	if key != "" {
		if c := p.peek(); c == ':' || c == '=' {
			p.pos++
		} else {
			key, p.pos = "", save
		}
	}
	v, err := p.value()
	if err != nil {
		return actionArg{}, err
	}
	return actionArg{key: key, value: v}, nil
}

func isBare(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("_.-/", c) >= 0
}

// value reads a double-quoted string or a bare word.
func (p *actionParser) value() (string, error) {
	switch c := p.peek(); {
	case c == '"':
		end := p.pos + 1
		for end < len(p.src) && p.src[end] != '"' {
			if p.src[end] == '\\' {
				end++
			}
			end++
		}
		if end >= len(p.src) {
			return "", errors.New("unterminated string")
		}
		s, err := strconv.Unquote(p.src[p.pos : end+1])
		if err != nil {
			return "", fmt.Errorf("invalid string %s", p.src[p.pos:end+1])
		}
		p.pos = end + 1
		return s, nil
	case isBare(c):
		start := p.pos
		for p.pos < len(p.src) && isBare(p.src[p.pos]) {
			p.pos++
		}
		return p.src[start:p.pos], nil
	case c == 0:
		return "", errors.New("missing )")
	default:
		return "", fmt.Errorf("unexpected %q", p.src[p.pos:])
	}
}

// ParseDuration parses a Go duration ("90s", "2h30m") optionally preceded
// by whole days ("1d", "2d12h").
func ParseDuration(s string) (time.Duration, error) {
	days, rest, hasDays := strings.Cut(s, "d")
	if !hasDays {
		return time.ParseDuration(s)
	}
	n, err := strconv.Atoi(days)
	if err != nil || n < 0 || n > 100_000 || days != strconv.Itoa(n) {
		return 0, fmt.Errorf("invalid duration %q", s)
	}
	d := time.Duration(n) * 24 * time.Hour
	if rest == "" {
		return d, nil
	}
	r, err := time.ParseDuration(rest)
	if err != nil || r < 0 || strings.HasPrefix(rest, "+") || strings.HasPrefix(rest, "-") {
		return 0, fmt.Errorf("invalid duration %q", s)
	}
	if d+r < d {
		return 0, fmt.Errorf("duration %q is too long", s)
	}
	return d + r, nil
}

// formatDuration writes d as a Go duration without zero trailing units
// ("2h", "1h30m", "90m" is "1h30m"), which ParseDuration reads back.
func formatDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}
