package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/agentplane/agentplane/examples/carddispute/bank"
	"github.com/agentplane/agentplane/examples/carddispute/bankmcp"
	"github.com/agentplane/agentplane/internal/platform"
	"github.com/agentplane/agentplane/tool"
)

// The card-dispute demo's tools cross MCP: the core-banking service is an
// MCP server over Streamable HTTP on loopback, served by the demo's own
// process, and the e-mail service an MCP server over stdio that runs only
// inside a tier-2 sandbox (this binary's hidden `example-server email`).
// Both are registered as the tenant's connectors, reviewed with the
// example's overlays, and granted by connector in agent.yaml.
//
// Their files sit beside the data directory, in DATA-mcp, because sandbox
// uids must be able to traverse the folders above what is bound into a
// sandbox and the data directory only lets its owner in:
//
//	DATA-mcp/servers/agentplane                  this binary, read-only at /opt/agentplane
//	DATA-mcp/state/TENANT/email/mail.db          the e-mail server's database, read-write at /var/lib/agentplane

// mcpRoot is the folder of the demo's MCP servers for a data directory.
func mcpRoot(data string) string { return filepath.Clean(data) + "-mcp" }

// demoMailDB is the e-mail service's database for a data directory.
func demoMailDB(data, tenant string) string {
	return filepath.Join(mcpRoot(data), "state", tenant, bankmcp.Email, "mail.db")
}

// demoMCPOptions lets the platform reach the demo's servers: loopback for
// core-banking, the folder of servers and the state folder for the e-mail
// server's sandbox.
func demoMCPOptions(data string) func(*platform.Options) {
	return func(o *platform.Options) {
		o.MCP.AllowLoopback = true
		o.MCP.Servers = filepath.Join(mcpRoot(data), "servers")
		o.MCP.State = filepath.Join(mcpRoot(data), "state")
	}
}

// tier2Ready reports why the platform cannot run a stdio server in a
// tier-2 sandbox, or nil.
func tier2Ready(p *platform.Platform) error {
	if p.Sandboxes == nil {
		return errors.New("no sandbox guest is configured (--sandbox-guest, or ./scripts/sandboxes.sh)")
	}
	e, _, err := p.Sandboxes.Executor(2)
	if err != nil {
		return err
	}
	return e.Available()
}

// demoMCP is the demo's MCP servers: core-banking (and, without a tier-2
// sandbox, e-mail) on one loopback listener.
type demoMCP struct {
	data, tenant string
	stdio        bool
	addr         string
	srv          *http.Server
	banks        []*bank.Bank
}

// startDemoMCP starts the loopback server. With stdio the e-mail server
// is this binary in a sandbox (copied into the servers folder); without,
// it is served over HTTP too.
func startDemoMCP(data, tenant string, stdio bool) (*demoMCP, error) {
	d := &demoMCP{data: data, tenant: tenant, stdio: stdio}
	root := mcpRoot(data)
	if err := os.MkdirAll(root, 0o711); err != nil {
		return nil, err
	}
	if err := os.Chmod(root, 0o711); err != nil {
		return nil, err
	}
	// The server has a handle of its own on the bank's file: it outlives
	// the platforms the demo opens.
	core, err := bank.Open(filepath.Join(data, "bank.db"))
	if err != nil {
		return nil, err
	}
	d.banks = append(d.banks, core)
	mux := http.NewServeMux()
	serve := func(service string, b *bank.Bank) error {
		h, err := bankmcp.Handler(service, func() (*bank.Bank, error) { return b, nil })
		if err != nil {
			return err
		}
		mux.Handle("/"+service+"/mcp", h)
		return nil
	}
	if err := serve(bankmcp.CoreBanking, core); err != nil {
		d.Close()
		return nil, err
	}
	if stdio {
		if err := installServerBinary(filepath.Join(root, "servers")); err != nil {
			d.Close()
			return nil, err
		}
	} else {
		if err := os.MkdirAll(filepath.Dir(demoMailDB(data, tenant)), 0o700); err != nil {
			d.Close()
			return nil, err
		}
		mail, err := bank.Open(demoMailDB(data, tenant))
		if err != nil {
			d.Close()
			return nil, err
		}
		d.banks = append(d.banks, mail)
		if err := serve(bankmcp.Email, mail); err != nil {
			d.Close()
			return nil, err
		}
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		d.Close()
		return nil, err
	}
	d.addr = ln.Addr().String()
	d.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go d.srv.Serve(ln)
	return d, nil
}

// Close stops the loopback server (within a bound) and closes the banks.
// Idempotent.
func (d *demoMCP) Close() {
	if d.srv != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_ = d.srv.Shutdown(ctx)
		cancel()
		_ = d.srv.Close()
		d.srv = nil
	}
	for _, b := range d.banks {
		b.Close()
	}
	d.banks = nil
}

// specs returns the connector definitions the demo registers, from the
// example's files: core-banking at the listener's address, e-mail over
// stdio (or at the listener, without a sandbox).
func (d *demoMCP) specs(files fs.FS) (map[string][]byte, error) {
	out := map[string][]byte{}
	for _, name := range bankmcp.Services() {
		b, err := fs.ReadFile(files, "connectors/"+name+".yaml")
		if err != nil {
			return nil, err
		}
		out[name] = []byte(strings.ReplaceAll(string(b), "127.0.0.1:0", d.addr))
	}
	if !d.stdio {
		out[bankmcp.Email] = fmt.Appendf(nil, "# The e-mail service over Streamable HTTP on loopback (no tier-2 sandbox here for its stdio server).\nname: email\ntransport: http\nendpoint: http://%s/email/mcp\nallow: [%q]\nauth: none\n", d.addr, d.addr)
	}
	return out, nil
}

// register adds and reviews both connectors, as a tenant's admin would
// with `connectors add`, `diff` and `review --hash`: the reviewer approves
// exactly the listing shown.
func (d *demoMCP) register(c *command, p *platform.Platform, files fs.FS, fdir, reviewer string) error {
	specs, err := d.specs(files)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Join(fdir, "connectors"), 0o700); err != nil {
		return err
	}
	for _, name := range bankmcp.Services() {
		overlays, err := fs.ReadFile(files, "connectors/"+name+"-tools.yaml")
		if err != nil {
			return err
		}
		for f, data := range map[string][]byte{name + ".yaml": specs[name], name + "-tools.yaml": overlays} {
			if err := os.WriteFile(filepath.Join(fdir, "connectors", f), data, 0o600); err != nil {
				return err
			}
		}
		s, err := p.AddConnector(c.ctx, d.tenant, specs[name], overlays)
		if err != nil {
			return fmt.Errorf("connector %s: %w", name, err)
		}
		_, live, err := p.DiffConnector(c.ctx, d.tenant, name, reviewer)
		if err != nil {
			return fmt.Errorf("connector %s: %w", name, err)
		}
		v, err := p.ReviewConnector(c.ctx, platform.ReviewRequest{Tenant: d.tenant, Name: name, Reviewer: reviewer, ExpectHash: live.Hash()})
		if err != nil {
			return fmt.Errorf("connector %s: %w", name, err)
		}
		where := "Streamable HTTP at " + s.Endpoint
		if s.Transport == "stdio" {
			where = "stdio, inside a tier-2 sandbox"
		}
		fmt.Fprintf(c.out, "  connector %s (MCP over %s): %d tools reviewed by %s, snapshot %s\n",
			name, where, len(v.Tools), reviewer, short(v.Reviewed.Hash()))
	}
	return nil
}

// short cuts a sha256:HEX hash for display.
func short(h string) string {
	if len(h) > 19 {
		return h[:19] + "…"
	}
	return h
}

// servedOverMCP reports whether the demo serves the tool over MCP (its
// tools.yaml connector is one of bankmcp's services): the demo applies
// only the other tools as tier-1 manifests.
func servedOverMCP(m *tool.Manifest) bool {
	for _, s := range bankmcp.Services() {
		if m.Connector == s {
			return true
		}
	}
	return false
}

// installServerBinary puts the agentplane binary the e-mail server runs
// from into the servers folder (a hard link when it can, else a copy),
// readable and executable by sandbox uids.
func installServerBinary(dir string) error {
	src, err := os.Executable()
	if err != nil {
		return fmt.Errorf("find the agentplane binary for the e-mail server: %w", err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		return err
	}
	dst := filepath.Join(dir, "agentplane")
	_ = os.Remove(dst)
	if err := os.Link(src, dst); err == nil {
		return os.Chmod(dst, 0o755)
	}
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o755)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// findTier2 fills in the sandbox guest from the tools cache when no flag
// named one, and reports whether a tier-2 sandbox could run here (the
// guest, root, bubblewrap); the platform then says for sure.
func findTier2(cm *common) bool {
	bin := filepath.Join(toolsDir(), "bin")
	if cm.guest == "" && isExecutable(filepath.Join(bin, "agentplane-guest")) {
		cm.guest = filepath.Join(bin, "agentplane-guest")
	}
	if _, err := exec.LookPath("bwrap"); err != nil {
		return false
	}
	return cm.guest != "" && os.Geteuid() == 0
}

// exampleServer is the hidden `agentplane example-server SERVICE --db
// FILE`: one of the card-dispute services as an MCP server on stdin and
// stdout, over the bank database FILE (created with the seed data when
// missing). The demo runs it inside a tier-2 sandbox.
func (c *command) exampleServer(args []string) error {
	usage := exitCode{2, "usage: agentplane example-server " + strings.Join(bankmcp.Services(), "|") + " --db FILE"}
	if len(args) == 0 {
		return usage
	}
	service := args[0]
	fs := flag.NewFlagSet("agentplane example-server", flag.ContinueOnError)
	fs.SetOutput(c.err)
	db := fs.String("db", "", "the bank's database file")
	if err := fs.Parse(args[1:]); err != nil || *db == "" || fs.NArg() != 0 {
		return usage
	}
	var (
		mu     sync.Mutex
		opened []*bank.Bank
	)
	defer func() {
		mu.Lock()
		defer mu.Unlock()
		for _, b := range opened {
			b.Close()
		}
	}()
	return bankmcp.ServeStdio(c.ctx, service, func() (*bank.Bank, error) {
		b, err := bank.Open(*db)
		if err == nil {
			mu.Lock()
			opened = append(opened, b)
			mu.Unlock()
		}
		return b, err
	})
}
