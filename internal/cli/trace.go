package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/agentplane/agentplane/internal/platform"
	"github.com/agentplane/agentplane/model"
	"github.com/agentplane/agentplane/render"
	"github.com/agentplane/agentplane/store"
	"github.com/agentplane/agentplane/trace"
)

// printTrace prints every event and, before each model call, the full prompt
// rebuilt from the log.
// With full false only the messages added since the previous call are shown.
func printTrace(ctx context.Context, w io.Writer, src trace.Source, evs []store.Event, full bool, pol *render.Policy) error {
	prompts := map[int64]*model.Request{}
	if err := trace.Prompts(ctx, src, evs, func(ev *store.Event, mc *trace.ModelCall, req *model.Request) error {
		prompts[ev.Seq] = req
		return nil
	}); err != nil {
		return err
	}
	tl := &timeline{w: w, pol: pol, stamps: true, removed: removedPayloads(ctx, src, evs)}
	if len(evs) > 0 {
		fmt.Fprintf(w, "  SEQ TIME (UTC, %s)  the sequence number is the event's SSE id (Last-Event-ID resumes after it)\n", evs[0].At.UTC().Format("2006-01-02"))
	}
	shown := 0
	for i := range evs {
		ev := &evs[i]
		if req, ok := prompts[ev.Seq]; ok {
			var mc trace.ModelCall
			_ = json.Unmarshal(ev.Payload, &mc)
			h, size := trace.PromptHash(req)
			match := "matches"
			if h != mc.PromptHash {
				match = "DOES NOT MATCH"
			}
			fmt.Fprintf(w, "  ── prompt for step %d (%d bytes, %s; %s the recorded hash; %d messages, %d tools) ──\n", ev.Step, size, h[:19], match, len(req.Messages), len(req.Tools))
			if ev.Step == 1 || mc.NoTools {
				fmt.Fprintf(w, "    [system] %s\n", indent(tl.cleanLines(req.System, 4000)))
			}
			msgs := req.Messages
			if !full && shown <= len(msgs) {
				if shown > 0 {
					fmt.Fprintf(w, "    … %d earlier messages (use --full to print every prompt whole)\n", shown)
				}
				msgs = msgs[shown:]
			}
			shown = len(req.Messages)
			for _, m := range msgs {
				for _, p := range m.Content {
					switch p.Type {
					case model.PartText:
						fmt.Fprintf(w, "    [%s] %s\n", m.Role, indent(tl.cleanLines(p.Text, 4000)))
					case model.PartToolUse:
						fmt.Fprintf(w, "    [%s tool_use %s] %s %s\n", m.Role, p.ToolUseID, p.Name, tl.clean(string(p.Input), 2000))
					case model.PartToolResult:
						fmt.Fprintf(w, "    [%s tool_result %s] %s\n", m.Role, p.ToolUseID, tl.clean(p.Text, 2000))
					}
				}
			}
		}
		tl.event(ev)
	}
	writeFlags(w, platform.OutputFlags(pol, evs))
	return nil
}

// printVerify checks a run's hash chain, blobs and prompts and prints the
// report; integrity problems exit 1. A queued run that no worker has
// started has no events yet: there is nothing to verify, which is not a
// failure. An empty log of a run that has started is (trace.Verify).
func (c *command) printVerify(src trace.Source, runID, status string) error {
	if status == store.StatusQueued {
		if evs, err := src.Events(c.ctx, runID, 0, 1); err == nil && len(evs) == 0 {
			fmt.Fprintf(c.out, "run %s is queued: no events yet; nothing to verify\n", runID)
			return nil
		}
	}
	rep, err := trace.Verify(c.ctx, src, runID)
	if err != nil {
		return err
	}
	for _, pr := range rep.Problems {
		fmt.Fprintf(c.out, "FAIL seq %d: %s\n", pr.Seq, pr.Detail)
	}
	if !rep.OK() {
		return exitCode{1, fmt.Sprintf("run %s: %d integrity problems", runID, len(rep.Problems))}
	}
	for _, e := range rep.Erasures {
		who := "run " + e.RunID
		if e.User != "" {
			who = "everything about user " + e.User
		}
		fmt.Fprintf(c.out, "erased: %s (%s) at %s, requested by %s", e.ID, who, e.At.UTC().Format(time.RFC3339), e.RequestedBy)
		if e.Reason != "" {
			fmt.Fprintf(c.out, ": %s", clean(e.Reason, 200))
		}
		fmt.Fprintf(c.out, "; %d event payloads replaced, %d payload keys destroyed\n", e.Events, e.Blobs)
	}
	if rep.Removed == 0 && rep.Erased == 0 {
		fmt.Fprintf(c.out, "ok: run %s: %d events chained, %d blobs verified, %d prompts rebuilt byte for byte; head %s\n",
			runID, rep.Events, rep.Blobs, rep.Prompts, rep.HeadHash[:16])
		return nil
	}
	fmt.Fprintf(c.out, "ok: run %s: %d events chained (%d erased: hashes kept, content gone), %d blobs verified (%d payloads expired or erased: hash and size kept, content gone), prompts not rebuilt (%s); head %s\n",
		runID, rep.Events, rep.Erased, rep.Blobs-rep.Removed, rep.Removed, rep.PromptsUnchecked, rep.HeadHash[:16])
	return nil
}

// removedPayloads notes, by blob hex, the payloads of evs that retention
// or an erasure removed.
func removedPayloads(ctx context.Context, src trace.Source, evs []store.Event) map[string]string {
	out := map[string]string{}
	for i := range evs {
		refs, _ := trace.BlobRefs(&evs[i])
		for _, c := range refs {
			if _, seen := out[c.Blob]; seen {
				continue
			}
			sum, err := c.Sum()
			if err != nil {
				continue
			}
			if _, err := src.BlobSize(ctx, sum); err != nil {
				if note, ok := trace.RemovedNote(err); ok {
					out[c.Blob] = note
				}
			}
		}
	}
	return out
}

func indent(s string) string { return strings.ReplaceAll(s, "\n", "\n      ") }
