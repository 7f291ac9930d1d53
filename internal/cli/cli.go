// Package cli implements the agentplane command line: agents, tools, run,
// runs, trace, demo and worker. Every command takes --data DIR (or
// AGENTPLANE_DATA; default ./.agentplane).
package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/agentplane/agentplane/api"
	"github.com/agentplane/agentplane/internal/platform"
	"github.com/agentplane/agentplane/trace/otelexport"
)

// Main runs the CLI and returns the process exit code.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		usage(stderr)
		return 2
	}
	cmd, rest := args[0], args[1:]
	c := &command{ctx: ctx, out: stdout, err: stderr}
	var err error
	switch cmd {
	case remoteCommand(cmd): // AGENTPLANE_SERVER is set: an HTTP client (client.go)
		err = c.remote(cmd, rest)
	case "serve":
		err = c.serve(rest)
	case "mcp":
		err = c.mcp(rest)
	case "apikey":
		err = c.apikey(rest)
	case "agents":
		err = c.agents(rest)
	case "tools":
		err = c.tools(rest)
	case "connectors":
		err = c.connectors(rest)
	case "run":
		err = c.run(rest)
	case "runs":
		err = c.runs(rest)
	case "trace":
		err = c.trace(rest)
	case "purge":
		err = c.purge(rest)
	case "erase":
		err = c.erase(rest)
	case "demo":
		err = c.demo(rest)
	case "worker":
		err = c.worker(rest)
	case "bank":
		err = c.bankCmd(rest)
	case "example-server": // hidden: the demo's e-mail server, run in a sandbox (demomcp.go)
		err = c.exampleServer(rest)
	case "users":
		err = c.users(rest)
	case "tenants":
		err = c.tenants(rest)
	case "models":
		err = c.models(rest)
	case "replay":
		err = c.replay(rest)
	case "eval":
		err = c.eval(rest)
	case "approvals":
		err = c.approvals(rest)
	case "approve", "reject", "edit":
		err = c.decide(cmd, rest)
	case "cancel", "message":
		err = c.signalRun(cmd, rest)
	case "help", "-h", "--help":
		usage(stdout)
		return 0
	default:
		fmt.Fprintf(stderr, "agentplane: unknown command %q\n", cmd)
		usage(stderr)
		return 2
	}
	if err == nil {
		return 0
	}
	var ec exitCode
	if errors.As(err, &ec) {
		if ec.msg != "" {
			fmt.Fprintln(stderr, "agentplane:", ec.msg)
		}
		return ec.code
	}
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	fmt.Fprintln(stderr, "agentplane:", err)
	return 1
}

// exitCode carries a specific exit status.
type exitCode struct {
	code int
	msg  string
}

func (e exitCode) Error() string { return e.msg }

func usage(w io.Writer) {
	fmt.Fprint(w, `agentplane — run LLM agents with safe tools and a replayable event log

Usage:
  agentplane demo [--example NAME] [--data DIR]    run an example's demo (card-dispute, helpdesk) on a fresh data directory
  agentplane models test ALIAS | models list       one small request through the gateway: latency, tokens, cost
  agentplane agents apply -f FILE                  store an immutable agent version
  agentplane agents list                           list versions and aliases
  agentplane agents alias NAME ALIAS=VERSION       move an alias (e.g. prod=7)
  agentplane tools apply -f FILE|DIR               load and store tool manifests
  agentplane tools list
  agentplane connectors add -f FILE --overlays F   register an MCP server; diff NAME, review NAME --as USER, list, show, remove
  agentplane connectors connect NAME --as USER     connect a user's own account to an oauth connector (prints the link)
  agentplane run AGENT --task TEXT [--user U]      run an agent in-process and stream its timeline
  agentplane runs                                  list runs with status, steps, tokens and cost
  agentplane runs RUN|last                         one run: its status, usage and its whole output
  agentplane trace RUN|last                        every prompt, tool call and result of a run
  agentplane trace verify RUN                      check the hash chain and every blob
  agentplane purge [--dry-run]                     apply the tenants' retention (payload and metadata TTLs) now
  agentplane erase --run ID | --user U --tenant T  erase a run or everything about a user; trace verify still passes
  agentplane trace export RUN --otlp URL           send the run's OpenTelemetry GenAI spans over OTLP/HTTP
  agentplane worker [--until-idle]                 execute queued runs (resumes crashed and woken ones)
  agentplane replay RUN --from-step N [...]        re-run a recorded run from step N with a change
  agentplane replay diff A B                       where a replay left its original; decisions; side effects
  agentplane eval run SET --agent NAME@VERSION     run an eval set on simulated tools, graded in code
  agentplane eval compare BASE CAND --set SET      compare two versions (--runs QUERY: replay runs)
  agentplane approvals                             list approvals waiting for a human
  agentplane approve|reject APPROVAL --as USER     decide an approval
  agentplane edit APPROVAL --as USER --args JSON   approve it with changed arguments (checked by the broker again)
  agentplane cancel RUN | message RUN --text T     signal a run (takes effect at its next step)
  agentplane bank                                  the demo's simulated bank: what it did, counted
  agentplane serve [--addr A] [--config FILE]      the HTTP API and the workers in one process; MCP at /mcp
  agentplane mcp serve --stdio                     agentplane's runs, approvals, trace and replay as MCP tools, as the
                                                   principal of the key in AGENTPLANE_TOKEN or --token-file
  agentplane apikey create --tenant T --user U     an API key (stored hashed, shown once); list; revoke ID
  agentplane users set TENANT USER --scopes S,...  who an agent may act for: scopes, --groups, --bind ARG=VALUE
  agentplane users list | users secret set T CONN  the users; connector secrets credentials are minted from

Exit status: 0 success; 1 an error, or a run that ended other than completed
(failed, cancelled, completed_partial), or integrity problems (trace verify),
failed tasks or a regression (eval); 2 a usage error; 3 the run waits for an
approval (run, replay: decide it, then agentplane worker).

Every command accepts --data DIR (env AGENTPLANE_DATA, default ./.agentplane)
and --blobs s3://BUCKET?endpoint=URL... (env AGENTPLANE_BLOBS, or blobs: in
DATA/storage.yaml; default the blob folder DATA/blobs).
With AGENTPLANE_SERVER=URL and AGENTPLANE_TOKEN=KEY set, run, runs, trace, approvals,
approve, reject, edit, cancel and message are clients of that server instead.
Run 'agentplane COMMAND -h' for a command's flags.
`)
}

type command struct {
	ctx context.Context
	out io.Writer
	err io.Writer
}

// common holds flags every command shares.
type common struct {
	data     string
	store    string
	engine   string
	blobs    string
	models   string
	verbose  bool
	leaseTTL time.Duration
	// sandboxes
	guest, runsc string
	downgrade    bool
	// otlp is where live spans go ("" exports none).
	otlp string
}

func (c *command) flags(name string, cm *common) *flag.FlagSet {
	fs := flag.NewFlagSet("agentplane "+name, flag.ContinueOnError)
	fs.SetOutput(c.err)
	setUsage(fs, name)
	def := os.Getenv("AGENTPLANE_DATA")
	if def == "" {
		def = ".agentplane"
	}
	fs.StringVar(&cm.data, "data", def, "data directory (env AGENTPLANE_DATA)")
	fs.StringVar(&cm.store, "store", os.Getenv("AGENTPLANE_STORE"), "run store: postgres://USER@HOST:PORT/DB shared by many processes (password from PGPASSWORD or ~/.pgpass), or empty for the embedded SQLite store in DATA (env AGENTPLANE_STORE; default the store key of DATA/api.yaml)")
	fs.StringVar(&cm.engine, "engine", os.Getenv("AGENTPLANE_ENGINE"), "engine that executes runs: "+platform.EngineHelp+" (env AGENTPLANE_ENGINE; default the engine key of DATA/api.yaml); every process of a deployment names the same one")
	fs.StringVar(&cm.blobs, "blobs", os.Getenv("AGENTPLANE_BLOBS"),
		"where blobs are kept: s3://BUCKET?endpoint=URL&region=R&prefix=P&path_style=true (key in AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY) or an absolute folder (env AGENTPLANE_BLOBS; default: blobs in DATA/storage.yaml, else DATA/blobs)")
	fs.BoolVar(&cm.verbose, "v", false, "log platform diagnostics to stderr")
	cm.leaseTTL = 15 * time.Second
	if executesRuns[name] || strings.HasPrefix(name, "models") {
		fs.StringVar(&cm.models, "models", "", "models.yaml (default DATA/models.yaml)")
	}
	if executesRuns[name] {
		fs.DurationVar(&cm.leaseTTL, "lease-ttl", 15*time.Second, "how long a worker's lease on a run lasts without renewal")
		fs.StringVar(&cm.guest, "sandbox-guest", os.Getenv("AGENTPLANE_GUEST"), "static sandbox wrapper binary; enables tier 2 (bubblewrap) and tier 3 (gVisor) tools (env AGENTPLANE_GUEST)")
		fs.StringVar(&cm.runsc, "runsc", os.Getenv("AGENTPLANE_RUNSC"), "static gVisor runsc for tier 3 (env AGENTPLANE_RUNSC; default runsc on PATH)")
		fs.BoolVar(&cm.downgrade, "downgrade-tier3", false, "let tier-3 tools run at tier 2 when gVisor is unavailable (logged, recorded on every call)")
		fs.StringVar(&cm.otlp, "otlp", os.Getenv("AGENTPLANE_OTLP"), "send live OpenTelemetry spans of the runs executed here to this endpoint (env AGENTPLANE_OTLP): "+otelexport.EndpointHelp)
	}
	return fs
}

// usageLines are the synopses -h prints above the flags.
var usageLines = map[string]string{
	"agents":       "agentplane agents apply -f FILE | list | alias NAME ALIAS=VERSION | retire NAME@VERSION",
	"apikey":       "agentplane apikey create --tenant T --user U [--scopes S,S] [--name N] | apikey list [--tenant T] | apikey revoke ID",
	"approvals":    "agentplane approvals [--tenant T]",
	"approve":      "agentplane approve APPROVAL_ID --as USER [--comment TEXT]",
	"reject":       "agentplane reject APPROVAL_ID --as USER [--comment TEXT]",
	"edit":         "agentplane edit APPROVAL_ID --as USER --args JSON [--comment TEXT]",
	"bank":         "agentplane bank [--json] [--check-one-refund-per-run] | bank generate [--customer ID] [--count N] [--seed S]",
	"demo":         "agentplane demo [--example NAME] [--data DIR] [--analysis auto|on|off] [--setup-only] [--reject-refund]",
	"erase":        "agentplane erase --run RUN | --user USER --tenant T [--reason TEXT] [--by WHO] [--json]",
	"purge":        "agentplane purge [--dry-run] [--config api.yaml] [--json]",
	"eval run":     "agentplane eval run SET --agent NAME@VERSION [--parallel N] [--tasks GLOB] [--record] [--keep DIR] [--json]",
	"eval compare": "agentplane eval compare BASE CANDIDATE --set SET [--runs QUERY] [--thresholds FILE] [--max-... F] [--json]",
	"models":       "agentplane models list | models test ALIAS [--prompt TEXT] [--max-tokens N] [--stream]",
	"replay":       "agentplane replay RUN|last --from-step N [--agent NAME@VERSION] [--model ALIAS] [--instructions FILE] [--mode recorded|live] [--mock TOOL=JSON] [--admin]",
	"replay diff":  "agentplane replay diff RUN_A RUN_B",
	"run":          "agentplane run AGENT --task TEXT [--user U] [--tenant T] [--bind NAME=VALUE] [--admin] [--json] [--detach]",
	"runs":         "agentplane runs [--status S] [--tenant T] [--prompt-hash H] [--json] | runs RUN|last [--json]",
	"serve":        "agentplane serve [--addr HOST:PORT] [--config api.yaml] [--store postgres://...] [--engine temporal://...] [--workers N] [--models FILE] [--mcp=false] [--...-timeout D] [--max-...-per-client N]",
	"mcp serve":    "agentplane mcp serve --stdio [--token-file FILE] [--workers N] [--config api.yaml] [--store postgres://...] [--engine temporal://...] [--models FILE]",
	"tenants":      "agentplane tenants show TENANT | set TENANT [--link-domains D1,D2] [--require-alias=true|false]",
	"tools":        "agentplane tools apply -f FILE|DIR | list",
	"connectors":   "agentplane connectors add -f CONNECTOR.yaml --overlays OVERLAYS.yaml | list | show NAME | diff NAME | review NAME --as USER [--hash H] [--overlays F] | remove NAME | connect NAME --as USER [--listen 127.0.0.1:PORT] [--wait D] | disconnect NAME --as USER [--tenant T] [--json]",
	"trace":        "agentplane trace [verify] RUN|last [--full] [--json] | trace export RUN [RUN...] --otlp URL",
	"trace export": "agentplane trace export RUN [RUN...] --otlp URL",
	"users":        "agentplane users set TENANT USER --scopes S1,S2 [--groups G1,G2] [--bind ARG=VALUE,...] | list [TENANT] | delete TENANT USER | secret ...",
	"users secret": "agentplane users secret set TENANT CONNECTOR (--random | value on stdin) | list TENANT | delete TENANT CONNECTOR",
	"worker":       "agentplane worker [--until-idle] [--concurrency N] [--store postgres://...] [--engine temporal://...]",
}

// setUsage makes -h print the command's synopsis, then its flags.
func setUsage(fs *flag.FlagSet, name string) {
	// A subcommand (apikey create, users secret set) shares the synopsis
	// of the longest command it belongs to.
	line, ok := usageLines[name]
	for key := name; !ok; {
		i := strings.LastIndex(key, " ")
		if i < 0 {
			return
		}
		key = key[:i]
		line, ok = usageLines[key]
	}
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: %s\n\nflags:\n", line)
		fs.PrintDefaults()
		fmt.Fprintf(fs.Output(), "\nexit status: %s\n", exitStatus(name))
	}
}

// exitStatus says what a command's exit status means (agentplane help and
// the README's "Exit codes" say the same).
func exitStatus(name string) string {
	switch name {
	case "run", "replay":
		return "0 the run completed; 1 it ended otherwise (failed, cancelled, completed_partial) or an error; 2 usage; 3 it waits for an approval (decide it, then agentplane worker)"
	case "demo":
		return "0 the demo run completed and its checks held; 1 otherwise; 2 usage"
	case "trace":
		return "0 ok (verify: the log is intact, or a queued run has no events yet); 1 an error or, for verify, integrity problems; 2 usage"
	case "eval run":
		return "0 every task passed; 1 a task failed or an error; 2 usage"
	case "eval compare":
		return "0 the candidate holds the thresholds; 1 it regresses or an error; 2 usage"
	}
	return "0 success; 1 an error; 2 usage"
}

// executesRuns names the commands that execute runs, and so take the model,
// lease and sandbox flags; the others only read or change stored state.
var executesRuns = map[string]bool{"run": true, "worker": true, "serve": true, "demo": true, "eval run": true, "replay": true, "mcp serve": true}

// useConfig takes the store and the engine from the API config where no
// flag or environment variable named them.
func (cm *common) useConfig(cfg *api.Config) {
	if cm.store == "" {
		cm.store = cfg.Store
	}
	if cm.engine == "" {
		cm.engine = cfg.Engine
	}
}

func (c *command) open(cm *common, extra func(*platform.Options)) (*platform.Platform, error) {
	blobs, err := blobsOf(cm)
	if err != nil {
		return nil, err
	}
	if cm.store == "" || cm.engine == "" {
		cfg, err := loadAPIConfig("", cm.data)
		if err != nil {
			return nil, err
		}
		cm.useConfig(cfg)
	}
	o := platform.Options{DataDir: cm.data, Store: cm.store, Engine: cm.engine, Blobs: blobs, ModelsFile: cm.models, LeaseTTL: cm.leaseTTL,
		Sandbox: platform.SandboxOptions{Guest: cm.guest, Runsc: cm.runsc, DowngradeTier3: cm.downgrade}, MCP: mcpOptions(),
		Telemetry: platform.TelemetryOptions{OTLP: cm.otlp}}
	if cm.verbose {
		o.Logger = slog.New(slog.NewTextHandler(c.err, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	if extra != nil {
		extra(&o)
	}
	// The examples' worlds live in the data directory; their tools are
	// registered in every platform the CLI opens (examples.go).
	o.ProviderTypes = exampleProviders()
	if o.DataDir != "" {
		tools, err := openExampleWorlds(c.ctx, o.DataDir)
		if err != nil {
			return nil, err
		}
		o.Tools = append(o.Tools, tools...)
	}
	p, err := platform.Open(c.ctx, o)
	if err != nil {
		for _, t := range o.Tools {
			if e, ok := t.(interface{ Close() error }); ok {
				e.Close()
			}
		}
		return nil, err
	}
	return p, nil
}

// parseAndOpen parses a command's flags (interleaved with its positional
// arguments) and opens the platform they name.
func (c *command) parseAndOpen(fs *flag.FlagSet, cm *common, args []string) ([]string, *platform.Platform, error) {
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return nil, nil, err
	}
	p, err := c.open(cm, nil)
	if err != nil {
		return nil, nil, err
	}
	return pos, p, nil
}

// parseInterleaved parses flags that may follow positional arguments.
func parseInterleaved(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		args = fs.Args()
		if len(args) == 0 {
			return pos, nil
		}
		pos = append(pos, args[0])
		args = args[1:]
	}
}

func splitAssign(s string) (string, string, bool) {
	k, v, ok := strings.Cut(s, "=")
	return strings.TrimSpace(k), strings.TrimSpace(v), ok && k != "" && v != ""
}
