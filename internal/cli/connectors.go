package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/agentplane/agentplane/internal/platform"
	"github.com/agentplane/agentplane/mcphost"
)

// mcpLoopbackEnv lets http connectors reach loopback addresses: tests and
// single-machine setups only. Unset, loopback is refused like any private
// address.
const mcpLoopbackEnv = "AGENTPLANE_MCP_ALLOW_LOOPBACK"

// mcpServersEnv names the host folder of installed stdio MCP servers,
// mounted read-only into their sandboxes at /opt/agentplane.
const mcpServersEnv = "AGENTPLANE_MCP_SERVERS"

// mcpStateEnv names the host folder where stdio MCP servers keep data
// that outlives their sandboxes (bound read-write at /var/lib/agentplane).
const mcpStateEnv = "AGENTPLANE_MCP_STATE"

func mcpOptions() platform.MCPOptions {
	return platform.MCPOptions{AllowLoopback: os.Getenv(mcpLoopbackEnv) == "1", Servers: os.Getenv(mcpServersEnv), State: os.Getenv(mcpStateEnv)}
}

// connectors is `agentplane connectors add|list|show|review|diff|remove`.
func (c *command) connectors(args []string) error {
	usage := exitCode{2, "usage: " + usageLines["connectors"]}
	if len(args) == 0 {
		return usage
	}
	sub := args[0]
	if isHelp(sub) {
		fmt.Fprintf(c.out, "usage: %s\n", usageLines["connectors"])
		return nil
	}
	var cm common
	fs := c.flags("connectors "+sub, &cm)
	tenant := fs.String("tenant", "default", "the connector's tenant")
	file := fs.String("f", "", "connectors add: the connector definition (YAML)")
	overlays := fs.String("overlays", "", "the tools' manifest overlays (YAML documents); add: required, review: replaces the stored ones")
	as := fs.String("as", "", "connectors review: the reviewer; diff: the user whose account lists an oauth server; connect, disconnect: whose account")
	listen := fs.String("listen", "127.0.0.1:0", "connectors connect: the loopback address that receives the authorization server's answer")
	wait := fs.Duration("wait", 5*time.Minute, "connectors connect: how long to wait for the answer")
	hash := fs.String("hash", "", "connectors review: approve only if the server still lists the snapshot with this hash (from connectors diff)")
	asJSON := fs.Bool("json", false, "print JSON")
	pos, err := parseInterleaved(fs, args[1:])
	if err != nil {
		return err
	}
	needName := map[string]bool{"show": true, "review": true, "diff": true, "remove": true, "connect": true, "disconnect": true}
	switch {
	case needName[sub] && len(pos) != 1, !needName[sub] && len(pos) != 0:
		return usage
	case sub != "add" && sub != "list" && !needName[sub]:
		return exitCode{2, fmt.Sprintf("connectors: unknown subcommand %q\nusage: %s", sub, usageLines["connectors"])}
	}
	p, err := c.open(&cm, nil)
	if err != nil {
		return err
	}
	defer p.Close()
	switch sub {
	case "add":
		if *file == "" || *overlays == "" {
			return exitCode{2, "connectors add: -f CONNECTOR.yaml and --overlays OVERLAYS.yaml are required"}
		}
		spec, err := os.ReadFile(*file)
		if err != nil {
			return err
		}
		ov, err := os.ReadFile(*overlays)
		if err != nil {
			return err
		}
		s, err := p.AddConnector(c.ctx, *tenant, spec, ov)
		if err != nil {
			return err
		}
		fmt.Fprintf(c.out, "connector %s of tenant %s registered (%s); its tools are offered to no agent until it is reviewed: agentplane connectors diff %s, then connectors review %s --as USER\n",
			s.Name, *tenant, s.Transport, s.Name, s.Name)
		return nil
	case "list":
		vs, err := p.ListConnectors(c.ctx, *tenant)
		if err != nil {
			return err
		}
		if *asJSON {
			return c.printJSON(connectorsJSON(vs))
		}
		tw := tabwriter.NewWriter(c.out, 0, 2, 2, ' ', 0)
		fmt.Fprintln(tw, "CONNECTOR\tTRANSPORT\tAUTH\tTOOLS\tSNAPSHOT\tREVIEWED BY")
		for _, v := range vs {
			snap, by := "unreviewed", "-"
			if v.Reviewed != nil {
				snap, by = v.Record.SnapshotHash[:12], v.Record.ReviewedBy
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\n", v.Spec.Name, v.Spec.Transport, v.Spec.Auth, len(v.Tools), snap, by)
		}
		return tw.Flush()
	case "show":
		v, err := p.GetConnector(c.ctx, *tenant, pos[0])
		if err != nil {
			return err
		}
		if *asJSON {
			return c.printJSON(connectorsJSON([]*platform.ConnectorView{v})[0])
		}
		c.showConnector(v)
		return nil
	case "diff":
		changes, live, err := p.DiffConnector(c.ctx, *tenant, pos[0], *as)
		if err != nil {
			return err
		}
		if *asJSON {
			return c.printJSON(map[string]any{"live_hash": live.Hash(), "changes": changes})
		}
		fmt.Fprintf(c.out, "live snapshot %s: %d tools, %d changes from the reviewed snapshot\n", live.Hash(), len(live.Tools), len(changes))
		for _, ch := range changes {
			fmt.Fprintf(c.out, "\n%s %s", strings.ToUpper(ch.Kind), ch.Tool)
			if len(ch.Fields) > 0 {
				fmt.Fprintf(c.out, " (%s)", strings.Join(ch.Fields, ", "))
			}
			fmt.Fprintln(c.out)
			if ch.Reviewed != nil && ch.Kind == mcphost.ChangeChanged {
				c.toolText("  reviewed", *ch.Reviewed)
			}
			if ch.Live != nil {
				c.toolText("  live", *ch.Live)
			}
		}
		if len(changes) > 0 {
			fmt.Fprintf(c.out, "\nchanged and removed tools are quarantined until: agentplane connectors review %s --as USER --hash %s\n", pos[0], live.Hash())
		}
		return nil
	case "review":
		var ov []byte
		if *overlays != "" {
			if ov, err = os.ReadFile(*overlays); err != nil {
				return err
			}
		}
		v, err := p.ReviewConnector(c.ctx, platform.ReviewRequest{Tenant: *tenant, Name: pos[0], Reviewer: *as, Overlays: ov, ExpectHash: *hash})
		if err != nil {
			return err
		}
		fmt.Fprintf(c.out, "connector %s reviewed by %s: snapshot %s, %d tools approved\n", pos[0], *as, v.Record.SnapshotHash, len(v.Tools))
		for _, m := range v.Tools {
			fmt.Fprintf(c.out, "  %s (%s on the server): tier %d, side effects %s\n", m.Name, m.MCP.Tool, m.Tier, m.SideEffects)
		}
		return nil
	case "connect":
		if *as == "" {
			return exitCode{2, "connectors connect: --as USER is required: the account connected is that user's"}
		}
		return c.connectAccount(p, *tenant, *as, pos[0], *listen, *wait)
	case "disconnect":
		if *as == "" {
			return exitCode{2, "connectors disconnect: --as USER is required"}
		}
		if err := p.DisconnectAccount(c.ctx, *tenant, *as, pos[0]); err != nil {
			return err
		}
		fmt.Fprintf(c.out, "user %s's account at connector %s is disconnected; its token is deleted\n", *as, pos[0])
		return nil
	case "remove":
		if err := p.RemoveConnector(c.ctx, *tenant, pos[0]); err != nil {
			return err
		}
		fmt.Fprintf(c.out, "connector %s of tenant %s removed; its tools are no longer offered or called\n", pos[0], *tenant)
		return nil
	}
	return usage
}

// connectAccount runs the authorization-code flow for user at an oauth
// connector: it listens on loopback for the authorization server's
// answer, prints the link to open, and stores the token once the answer
// comes back for the flow it started (the state is bound to the user).
func (c *command) connectAccount(p *platform.Platform, tenant, user, name, listen string, wait time.Duration) error {
	host, _, err := net.SplitHostPort(listen)
	if ip := net.ParseIP(host); err != nil || ip == nil || !ip.IsLoopback() {
		return exitCode{2, fmt.Sprintf("connectors connect: --listen %q must be a loopback IP address and port", listen)}
	}
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return fmt.Errorf("connectors connect: listen for the answer: %w", err)
	}
	defer ln.Close()
	path := "/v1/connectors/" + name + "/oauth/callback"
	authURL, err := p.ConnectAccount(c.ctx, tenant, user, name, "http://"+ln.Addr().String()+path)
	if err != nil {
		return err
	}
	fmt.Fprintf(c.out, "open this link to connect %s's account at connector %s (waiting up to %s):\n%s\n", user, name, wait, authURL)
	done := make(chan error, 1)
	var once sync.Once
	srv := &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != path || r.Method != http.MethodGet {
			http.NotFound(w, r)
			return
		}
		q := r.URL.Query()
		handled := false
		once.Do(func() {
			handled = true
			err := p.FinishConnect(c.ctx, tenant, user, name, mcphost.Callback{State: q.Get("state"), Code: q.Get("code"), Iss: q.Get("iss"), Error: q.Get("error")})
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
			if err != nil {
				w.WriteHeader(http.StatusBadRequest)
				fmt.Fprintln(w, "agentplane could not connect your account:", err)
			} else {
				fmt.Fprintf(w, "agentplane: %s's account at connector %s is connected; you may close this page.\n", user, name)
			}
			if f, ok := w.(http.Flusher); ok {
				f.Flush()
			}
			done <- err
		})
		if !handled {
			http.Error(w, "this connection attempt is already finished", http.StatusGone)
		}
	})}
	go func() { _ = srv.Serve(ln) }()
	defer func() {
		// Let the browser's page finish, within a bound.
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if srv.Shutdown(ctx) != nil {
			srv.Close()
		}
	}()
	select {
	case err := <-done:
		if err != nil {
			return err
		}
		fmt.Fprintf(c.out, "connected: user %s's token for connector %s is stored sealed\n", user, name)
		return nil
	case <-time.After(wait):
		return fmt.Errorf("connectors connect: no answer from the authorization server within %s; run it again", wait)
	case <-c.ctx.Done():
		return c.ctx.Err()
	}
}

func (c *command) printJSON(v any) error {
	enc := json.NewEncoder(c.out)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// toolText prints a server's tool for a reviewer: its text is untrusted,
// shown neutralised and quoted, never as instructions.
func (c *command) toolText(label string, t mcphost.ToolDef) {
	fmt.Fprintf(c.out, "%s description: %q\n", label, mcphost.ReviewerText(t.Description))
	fmt.Fprintf(c.out, "%s input_schema: %s\n", label, mcphost.ReviewerText(string(t.InputSchema)))
	if t.OutputSchema != nil {
		fmt.Fprintf(c.out, "%s output_schema: %s\n", label, mcphost.ReviewerText(string(t.OutputSchema)))
	}
}

func (c *command) showConnector(v *platform.ConnectorView) {
	s := v.Spec
	fmt.Fprintf(c.out, "connector %s of tenant %s\n  transport %s, auth %s\n", s.Name, v.Record.Tenant, s.Transport, s.Auth)
	if s.Endpoint != "" {
		fmt.Fprintf(c.out, "  endpoint %s\n", s.Endpoint)
	}
	if len(s.Command) > 0 {
		fmt.Fprintf(c.out, "  command %q image %q\n", s.Command, s.Image)
	}
	fmt.Fprintf(c.out, "  allow %v\n", s.Allow)
	if v.Reviewed == nil {
		fmt.Fprintln(c.out, "  not reviewed: no tool is offered")
		return
	}
	fmt.Fprintf(c.out, "  snapshot %s reviewed by %s at %s\n", v.Record.SnapshotHash, v.Record.ReviewedBy, v.Record.ReviewedAt.Format("2006-01-02 15:04:05Z"))
	for _, m := range v.Tools {
		fmt.Fprintf(c.out, "  tool %s (%s): tier %d, side effects %s, approval %s\n", m.Name, m.MCP.Tool, m.Tier, m.SideEffects, m.Approval)
		fmt.Fprintf(c.out, "    description: %q\n", mcphost.ReviewerText(m.Description))
	}
}

// connectorJSON is a connector as `connectors list|show --json` and the
// API print it.
type connectorJSON struct {
	Tenant       string             `json:"tenant"`
	Spec         *mcphost.Spec      `json:"spec"`
	SnapshotHash string             `json:"snapshot_hash,omitempty"`
	ReviewedBy   string             `json:"reviewed_by,omitempty"`
	Tools        []connectorToolRef `json:"tools"`
}

type connectorToolRef struct {
	Name        string `json:"name"`
	ServerName  string `json:"server_name"`
	Tier        int    `json:"tier"`
	SideEffects string `json:"side_effects"`
}

func connectorsJSON(vs []*platform.ConnectorView) []connectorJSON {
	out := make([]connectorJSON, 0, len(vs))
	for _, v := range vs {
		j := connectorJSON{Tenant: v.Record.Tenant, Spec: v.Spec, SnapshotHash: v.Record.SnapshotHash, ReviewedBy: v.Record.ReviewedBy, Tools: []connectorToolRef{}}
		for _, m := range v.Tools {
			j.Tools = append(j.Tools, connectorToolRef{Name: m.Name, ServerName: m.MCP.Tool, Tier: m.Tier, SideEffects: m.SideEffects})
		}
		out = append(out, j)
	}
	return out
}
