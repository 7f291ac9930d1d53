package cli

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/agentplane/agentplane/internal/platform"
	"github.com/agentplane/agentplane/model"
)

const modelsUsage = "usage: agentplane models test ALIAS [--prompt TEXT] [--max-tokens N] [--stream] | models list"

// models implements `agentplane models test ALIAS` (one small request
// through the gateway, printing latency, tokens and cost) and `models list`.
// It needs only models.yaml, not the data directory's store.
func (c *command) models(args []string) error {
	if len(args) == 0 {
		return exitCode{2, modelsUsage}
	}
	var cm common
	fs := c.flags("models "+args[0], &cm)
	prompt := fs.String("prompt", "Reply with the single word: pong.", "the user message to send")
	maxTokens := fs.Int("max-tokens", 16, "output limit of the test request")
	stream := fs.Bool("stream", false, "stream the answer and report the time to its first text")
	pos, err := parseInterleaved(fs, args[1:])
	if err != nil {
		return err
	}
	cfg, file, err := platform.LoadModelsConfig(cm.data, cm.models)
	if err != nil {
		return err
	}
	ledger := &model.Ledger{}
	gw, rates, err := cfg.BuildWith(file, platform.BuildOptions{Meter: ledger})
	if err != nil {
		return err
	}
	switch args[0] {
	case "list":
		if len(pos) != 0 {
			return exitCode{2, modelsUsage}
		}
		tw := tabwriter.NewWriter(c.out, 0, 2, 2, ' ', 0)
		fmt.Fprintln(tw, "ALIAS\tPROVIDER\tTYPE\tMODEL\tPRICE IN/OUT/WRITE/READ PER MTOK\tFALLBACK")
		for _, name := range gw.Aliases() {
			a, _ := gw.Alias(name)
			price := "unknown"
			if a.Price != nil {
				p := a.Price
				price = fmt.Sprintf("%s %s/%s/%s/%s", p.Currency, perM(p.InputPerMTok), perM(p.OutputPerMTok), perM(p.CacheWritePerMTok), perM(p.CacheReadPerMTok))
			}
			fallback := a.Fallback
			if fallback == "" {
				fallback = "-"
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", name, a.Provider, cfg.Providers[a.Provider].Type, a.ModelID, price, fallback)
		}
		return tw.Flush()
	case "test":
	default:
		return exitCode{2, modelsUsage}
	}
	if len(pos) != 1 {
		return exitCode{2, modelsUsage}
	}
	alias := pos[0]
	a, ok := gw.Alias(alias)
	if !ok {
		return exitCode{2, fmt.Sprintf("models test: unknown alias %q (configured: %s)", alias, strings.Join(gw.Aliases(), ", "))}
	}
	req := &model.Request{
		System:    "You are a connectivity check. Answer as briefly as you can.",
		Messages:  []model.Message{{Role: model.RoleUser, Content: []model.Part{{Type: model.PartText, Text: *prompt}}}},
		MaxTokens: *maxTokens,
	}
	attr := model.Attribution{Tenant: "cli", Agent: "models-test", RunID: "models-test"}
	fmt.Fprintf(c.out, "alias     %s -> %s (provider %s, %s)\n", alias, a.ModelID, a.Provider, cfg.Providers[a.Provider].Type)
	start := time.Now()
	var first time.Duration
	var res *model.CallResult
	if *stream {
		res, err = gw.CompleteStream(c.ctx, alias, req, attr, func(d model.Delta) {
			if first == 0 && d.Text != "" {
				first = time.Since(start)
			}
		})
	} else {
		res, err = gw.Complete(c.ctx, alias, req, attr)
	}
	total := time.Since(start)
	if err != nil {
		kind := "not retryable"
		if model.IsRetryable(err) {
			kind = "retryable; retries exhausted"
		}
		var be *model.BudgetError
		if errors.As(err, &be) {
			kind = "refused by budget"
		}
		fmt.Fprintf(c.out, "result    FAILED after %s (%s)\n", total.Round(time.Millisecond), kind)
		return fmt.Errorf("models test %s: %w", alias, err)
	}
	if res.Alias != alias {
		fmt.Fprintf(c.out, "failover  answered by fallback %s -> %s\n", res.Alias, res.ModelID)
	}
	fmt.Fprintf(c.out, "reply     %q\n", clipText(res.Response.Text(), 200))
	fmt.Fprintf(c.out, "stop      %s\n", res.Response.StopReason)
	line := fmt.Sprintf("latency   %d ms provider, %d ms total, %d attempt(s)", res.LatencyMS, total.Milliseconds(), res.Attempts)
	if *stream && first > 0 {
		line += fmt.Sprintf(", first text after %d ms", first.Milliseconds())
	}
	fmt.Fprintln(c.out, line)
	u := res.Usage
	fmt.Fprintf(c.out, "tokens    input %d, output %d, cache write %d, cache read %d\n", u.InputTokens, u.OutputTokens, u.CacheCreationTokens, u.CacheReadTokens)
	if !res.CostKnown {
		fmt.Fprintf(c.out, "cost      unknown (alias %s has no price)\n", res.Alias)
		return nil
	}
	cost := res.Cost.String()
	for _, cur := range convertTargets(cfg) {
		if cur == res.Cost.Currency {
			continue
		}
		if m, err := rates.Convert(res.Cost, cur); err == nil {
			cost += " = " + m.String()
		}
	}
	fmt.Fprintf(c.out, "cost      %s\n", cost)
	return nil
}

// convertTargets are the currencies the rates convert into, sorted.
func convertTargets(cfg *platform.ModelsConfig) []string {
	seen := map[string]bool{}
	var out []string
	for pair := range cfg.Rates {
		if _, to, ok := strings.Cut(pair, "_"); ok && !seen[to] {
			seen[to] = true
			out = append(out, to)
		}
	}
	slices.Sort(out)
	return out
}

// perM formats micro-units per million tokens as units: 2500000 -> 2.5.
func perM(micros int64) string {
	s := model.Money{Micros: micros}.String()
	s = strings.TrimRight(strings.TrimRight(s, "0"), ".")
	return s
}

func clipText(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
