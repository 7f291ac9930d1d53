package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"

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
	tl := &timeline{w: w, pol: pol}
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

func indent(s string) string { return strings.ReplaceAll(s, "\n", "\n      ") }
