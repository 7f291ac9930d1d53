package model

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Compaction keeps a long run's prompt from growing with the square of its
// steps: when the prompt passes a threshold, a smaller model rewrites the
// older steps as a progress note, and the prompt becomes the task, the note
// and the last few steps verbatim. The raw steps stay in the run's log; the
// note is the output of a recorded activity, so a replay reads it back
// rather than asking a model again.
//
// A transcript, for compaction, is its first message (the head: the task,
// any early user messages, and the note of an earlier compaction) followed
// by steps, each starting at an assistant message and running up to the
// next one.

// NotePrefix starts the text part that carries a progress note in the
// head. ApplyCompaction replaces a part starting with it, so compacting
// twice leaves one note.
const NotePrefix = "Progress note (earlier steps were compacted; their identifiers are kept verbatim):\n"

// CompactionPolicy says when to compact and what to keep.
type CompactionPolicy struct {
	// MaxPromptTokens compacts when the estimated prompt exceeds it
	// (0: never on size).
	MaxPromptTokens int64
	// EverySteps compacts when at least this many steps follow the head
	// (0: never on count).
	EverySteps int
	// KeepSteps is how many of the most recent steps stay verbatim.
	KeepSteps int
}

// Due reports whether a transcript of msgs, whose next request is
// estimated at promptTokens, should be compacted under p: a threshold is
// passed and there is at least one step older than the KeepSteps kept.
func (p CompactionPolicy) Due(msgs []Message, promptTokens int64) bool {
	steps := countSteps(msgs)
	passed := (p.MaxPromptTokens > 0 && promptTokens > p.MaxPromptTokens) || (p.EverySteps > 0 && steps >= p.EverySteps)
	return passed && steps > max(p.KeepSteps, 0)
}

func countSteps(msgs []Message) int {
	n := 0
	for i, m := range msgs {
		if i > 0 && m.Role == RoleAssistant {
			n++
		}
	}
	return n
}

// SplitSteps divides msgs into the head (msgs[0]), the steps to compact
// and the last keep steps, which stay verbatim. ok is false when there is
// no step to compact.
func SplitSteps(msgs []Message, keep int) (head Message, old, recent []Message, ok bool) {
	if len(msgs) == 0 {
		return Message{}, nil, nil, false
	}
	var starts []int
	for i := 1; i < len(msgs); i++ {
		if msgs[i].Role == RoleAssistant {
			starts = append(starts, i)
		}
	}
	keep = max(keep, 0)
	if len(starts) <= keep {
		return msgs[0], nil, msgs[1:], false
	}
	cut := len(msgs)
	if keep > 0 {
		cut = starts[len(starts)-keep]
	}
	return msgs[0], msgs[1:cut], msgs[cut:], true
}

// ApplyCompaction is the transcript after a compaction: the head with note
// in place of any earlier note, then the recent steps. Nothing of old
// steps remains but the note.
func ApplyCompaction(head Message, note string, recent []Message) []Message {
	h := Message{Role: head.Role}
	for _, p := range head.Content {
		if p.Type == PartText && strings.HasPrefix(p.Text, NotePrefix) {
			continue
		}
		h.Content = append(h.Content, p)
	}
	h.Content = append(h.Content, Part{Type: PartText, Text: NotePrefix + note})
	return append([]Message{h}, recent...)
}

// PreviousNote returns the note an earlier compaction left in head, or "".
func PreviousNote(head Message) string {
	for _, p := range head.Content {
		if p.Type == PartText && strings.HasPrefix(p.Text, NotePrefix) {
			return strings.TrimPrefix(p.Text, NotePrefix)
		}
	}
	return ""
}

// Completer is the gateway as the compactor uses it.
type Completer interface {
	Complete(ctx context.Context, alias string, req *Request, a Attribution) (*CallResult, error)
}

// Compactor rewrites older steps into a progress note with a (smaller)
// model alias. It is safe for concurrent use.
type Compactor struct {
	// Models makes the call; Alias names the model (say "reasoning-small").
	Models Completer
	Alias  string
	// MaxNoteTokens is the note call's output limit (default 2048).
	MaxNoteTokens int
	// Instructions replaces the default system prompt of the note call.
	Instructions string
}

// CompactInput is what to compact.
type CompactInput struct {
	// PreviousNote is the note of an earlier compaction (PreviousNote of the
	// head), folded into the new one.
	PreviousNote string
	// Steps are the messages to compact (old from SplitSteps).
	Steps []Message
	// FirstStep numbers the first of Steps in the rendering (default 1).
	FirstStep int
}

// Compaction is a compactor's result.
type Compaction struct {
	// Note is the progress note. Every identifier of the compacted steps and
	// of the previous note appears in it as a whole token.
	Note string
	// Identifiers are the identifiers that had to survive, in order of
	// first appearance.
	Identifiers []string
	// Restored are the identifiers the model left out, which the compactor
	// appended to its note verbatim.
	Restored []string
	// Call is the note call's result: its usage and cost belong to the run.
	Call *CallResult
}

const defaultCompactionInstructions = `You compact the history of an AI agent's run so that it can continue with a shorter prompt.
Rewrite the steps you are given as a progress note for the agent itself:
- facts learned, with every identifier, amount, date and handle copied exactly as written;
- decisions taken and actions already done (so they are not repeated);
- what is still open and what the next step was going to be.
Keep it under 1,200 words. Do not invent anything. Do not address the user.`

// Compact asks the model for a note of in.Steps, then checks that every
// identifier of the steps (and of the previous note) occurs in it, and
// appends any that do not, verbatim. The guarantee holds whatever the model
// writes. a attributes the call (its Step is the step about to run).
func (c *Compactor) Compact(ctx context.Context, in CompactInput, a Attribution) (*Compaction, error) {
	if c.Models == nil || c.Alias == "" {
		return nil, errors.New("compactor: Models and Alias are required")
	}
	if len(in.Steps) == 0 {
		return nil, errors.New("compactor: no steps to compact")
	}
	first := in.FirstStep
	if first <= 0 {
		first = 1
	}
	rendered := RenderSteps(in.Steps, first)
	ids := Identifiers(in.PreviousNote + "\n" + rendered)
	var b strings.Builder
	if in.PreviousNote != "" {
		b.WriteString("Progress note so far:\n")
		b.WriteString(in.PreviousNote)
		b.WriteString("\n\n")
	}
	b.WriteString("Steps to fold into the note:\n")
	b.WriteString(rendered)
	if len(ids) > 0 {
		b.WriteString("\nIdentifiers that must appear in the note exactly as written: ")
		b.WriteString(strings.Join(ids, ", "))
		b.WriteString("\n")
	}
	instructions := c.Instructions
	if instructions == "" {
		instructions = defaultCompactionInstructions
	}
	maxTokens := c.MaxNoteTokens
	if maxTokens <= 0 {
		maxTokens = 2048
	}
	req := &Request{
		System:    instructions,
		Messages:  []Message{{Role: RoleUser, Content: []Part{{Type: PartText, Text: b.String()}}}},
		MaxTokens: maxTokens,
	}
	res, err := c.Models.Complete(ctx, c.Alias, req, a)
	if err != nil {
		return nil, fmt.Errorf("compactor: %w", err)
	}
	note := strings.TrimSpace(res.Response.Text())
	if note == "" {
		return nil, fmt.Errorf("compactor: alias %q returned an empty note (stop reason %s)", c.Alias, res.Response.StopReason)
	}
	have := tokenSet(note)
	var restored []string
	for _, id := range ids {
		if !have[id] {
			restored = append(restored, id)
		}
	}
	if len(restored) > 0 {
		note += "\n\nIdentifiers from the compacted steps, verbatim: " + strings.Join(restored, ", ")
	}
	return &Compaction{Note: note, Identifiers: ids, Restored: restored, Call: res}, nil
}

// RenderSteps is the deterministic text form of steps that the note call
// reads: one line per part, numbered from first.
func RenderSteps(steps []Message, first int) string {
	var b strings.Builder
	n := first - 1
	for _, m := range steps {
		if m.Role == RoleAssistant || n < first {
			n++
		}
		for _, p := range m.Content {
			switch p.Type {
			case PartText:
				who := "agent"
				if m.Role == RoleUser {
					who = "platform/user"
				}
				fmt.Fprintf(&b, "[step %d] %s: %s\n", n, who, p.Text)
			case PartToolUse:
				fmt.Fprintf(&b, "[step %d] tool call %s %s\n", n, p.Name, p.Input)
			case PartToolResult:
				status := "ok"
				if p.IsError {
					status = "error"
				}
				fmt.Fprintf(&b, "[step %d] tool result (%s): %s\n", n, status, p.Text)
			}
		}
	}
	return b.String()
}

// Identifiers returns the identifiers in s, in order of first appearance:
// its tokens (runs of letters, digits and the joiners - _ . : / @ #, with a
// comma kept between digits as in 12,499; leading and trailing joiners
// trimmed) that contain a digit and are either at least four characters
// long or contain a joiner, and e-mail-like tokens. So T-40127, c_88213,
// D-2026-55102, 12499, 12,499, 4417, 0.0231, blob:9f2c... and
// priya@example-bank.in are identifiers; 3, 12, v7 and amount_inr are not.
func Identifiers(s string) []string {
	var out []string
	seen := map[string]bool{}
	for _, tok := range tokens(s) {
		if seen[tok] || !isIdentifier(tok) {
			continue
		}
		seen[tok] = true
		out = append(out, tok)
	}
	return out
}

const joiners = "-_.:/@#"

func isTokenRune(r rune) bool {
	return r < utf8.RuneSelf && (unicode.IsLetter(r) || unicode.IsDigit(r) || strings.ContainsRune(joiners, r)) ||
		r >= utf8.RuneSelf && (unicode.IsLetter(r) || unicode.IsDigit(r))
}

// tokens splits s into candidate tokens.
func tokens(s string) []string {
	var out []string
	rs := []rune(s)
	start := -1
	flush := func(end int) {
		if start >= 0 {
			if t := strings.Trim(string(rs[start:end]), joiners+","); t != "" {
				out = append(out, t)
			}
			start = -1
		}
	}
	for i, r := range rs {
		in := isTokenRune(r) ||
			r == ',' && i > 0 && i+1 < len(rs) && unicode.IsDigit(rs[i-1]) && unicode.IsDigit(rs[i+1])
		if in {
			if start < 0 {
				start = i
			}
			continue
		}
		flush(i)
	}
	flush(len(rs))
	return out
}

func isIdentifier(tok string) bool {
	digit, joiner := false, false
	for _, r := range tok {
		switch {
		case unicode.IsDigit(r):
			digit = true
		case strings.ContainsRune(joiners, r) || r == ',':
			joiner = true
		}
	}
	if at := strings.IndexByte(tok, '@'); at > 0 && at < len(tok)-1 {
		return true
	}
	return digit && (joiner || utf8.RuneCountInString(tok) >= 4)
}

func tokenSet(s string) map[string]bool {
	m := map[string]bool{}
	for _, t := range tokens(s) {
		m[t] = true
	}
	return m
}
