package mcphost

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/agentplane/agentplane/sandbox"
)

// SandboxLauncher starts stdio servers in tier-2 sandboxes of a
// sandbox.Manager: no network but the connector's allowlist (through the
// manager's egress proxy), the host's /usr read-only (node is there), the
// operator's folder of installed servers read-only at sandbox.GuestMount,
// and nothing of the host's environment. Each server gets a sandbox of its
// own, never shared with the run's other tools; Stop kills it.
type SandboxLauncher struct {
	Manager *sandbox.Manager
	// Folder is the host folder of installed MCP servers (an npm prefix)
	// bound read-only at sandbox.GuestMount; "" binds nothing. It is the
	// operator's choice, never a tenant's.
	Folder string
	// State is the host folder under which each stdio server keeps data
	// that outlives its sandbox (its idempotency records, say): the
	// folder STATE/TENANT/CONNECTOR is bound read-write at
	// sandbox.GuestState. "" gives servers no state. Like Folder it is
	// the operator's choice, and sandbox uids must be able to traverse
	// the folders above it.
	State string
	// Lifetime bounds one server's life (default 30 minutes).
	Lifetime time.Duration
	// MemoryMB caps each server's sandbox (default 512).
	MemoryMB int
}

// stopGrace is how long a server may take to exit after its stdin closes
// before its sandbox is killed; killGrace bounds the kill.
const (
	stopGrace = 2 * time.Second
	killGrace = 10 * time.Second
)

// Launch implements Launcher.
func (l *SandboxLauncher) Launch(ctx context.Context, x Launch) (Process, error) {
	e, _, err := l.Manager.Executor(2)
	if err != nil {
		return nil, err
	}
	caps := e.Capabilities()
	if caps.Tier != 2 || !caps.Streams || (l.Folder != "" && !caps.Mounts) {
		return nil, fmt.Errorf("the tier-2 executor %s cannot run a stdio server (streams %v, mounts %v)", caps.Name, caps.Streams, caps.Mounts)
	}
	state, err := l.stateDir(x.Tenant, x.Connector)
	if err != nil {
		return nil, err
	}
	life := l.Lifetime
	if life <= 0 {
		life = 30 * time.Minute
	}
	inR, inW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		inR.Close()
		inW.Close()
		return nil, err
	}
	// The server's sandbox is a session of its own: a run id of the
	// server's, so ending it destroys nothing else of the run.
	run := x.RunID
	if run == "" {
		run = "listing-" + rand.Text()
	}
	p := &sandboxProcess{in: inW, out: outR, done: make(chan struct{}), m: l.Manager, tenant: x.Tenant,
		run: run + "/mcp/" + x.Connector}
	runCtx, cancel := context.WithCancel(context.Background()) // lives past the connect call
	p.cancel = cancel
	req := sandbox.Request{Tier: 2, Tenant: x.Tenant, RunID: p.run, Tool: "mcp-" + x.Connector,
		Spec: sandbox.Spec{Image: x.Image, Mount: l.Folder, State: state, MemoryMB: l.MemoryMB}, Allow: x.Allow,
		Exec: sandbox.Exec{Argv: x.Command, Env: x.Env, StdinFile: inR, StdoutFile: outW, Timeout: life, TailBytes: 16 << 10}}
	go func() {
		defer close(p.done)
		call, err := l.Manager.Run(runCtx, req)
		// The server is gone: its reader sees the end of the stream.
		inR.Close()
		outW.Close()
		p.mu.Lock()
		p.err, p.result = err, call.Result
		p.mu.Unlock()
	}()
	return p, nil
}

// stateDir makes the state folder of a tenant's connector ("" without
// State): root and tenant folders 0711, so that the sandbox's uid reaches
// its own folder and lists none.
func (l *SandboxLauncher) stateDir(tenant, connector string) (string, error) {
	if l.State == "" {
		return "", nil
	}
	for _, n := range []string{tenant, connector} {
		if n == "" || n == "." || n == ".." || strings.ContainsAny(n, "/\\\x00") {
			return "", fmt.Errorf("mcphost: %q cannot name a state folder", n)
		}
	}
	root := filepath.Clean(l.State)
	if err := Traversable(root); err != nil {
		return "", fmt.Errorf("mcphost: the stdio servers' state folder: %w", err)
	}
	dir := root
	for _, n := range []string{tenant, connector} {
		if err := os.MkdirAll(dir, 0o711); err != nil {
			return "", fmt.Errorf("mcphost: state folder: %w", err)
		}
		if err := os.Chmod(dir, 0o711); err != nil {
			return "", fmt.Errorf("mcphost: state folder: %w", err)
		}
		dir = filepath.Join(dir, n)
	}
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
		return "", fmt.Errorf("mcphost: state folder: %w", err)
	}
	return dir, nil
}

// Traversable reports whether sandbox uids (any uid) can pass through
// every folder above path, as they must to reach a folder bound into a
// sandbox: nil, or an error naming the first folder that stops them.
func Traversable(path string) error {
	path = filepath.Clean(path)
	for d := filepath.Dir(path); ; d = filepath.Dir(d) {
		st, err := os.Stat(d)
		if err != nil {
			return err
		}
		if st.Mode().Perm()&0o001 == 0 {
			return fmt.Errorf("%s is below %s, which sandbox uids cannot traverse (mode %v); put it elsewhere or make %s o+x", path, d, st.Mode().Perm(), d)
		}
		if d == "/" || d == "." {
			return nil
		}
	}
}

type sandboxProcess struct {
	in     *os.File
	out    *os.File
	done   chan struct{}
	cancel context.CancelFunc
	m      *sandbox.Manager
	tenant string
	run    string

	once   sync.Once
	mu     sync.Mutex
	err    error
	result sandbox.Result
}

func (p *sandboxProcess) Stdin() io.WriteCloser { return p.in }
func (p *sandboxProcess) Stdout() io.ReadCloser { return p.out }

// Stop closes the server's stdin, gives it stopGrace to exit, then kills
// its sandbox; the sandbox session is destroyed in every case.
func (p *sandboxProcess) Stop() error {
	var err error
	p.once.Do(func() {
		p.in.Close()
		select {
		case <-p.done:
		case <-time.After(stopGrace):
			p.cancel()
			select {
			case <-p.done:
			case <-time.After(killGrace):
				err = errors.New("mcphost: the stdio server's sandbox did not stop in time")
			}
		}
		p.cancel()
		p.out.Close()
		ctx, cancel := context.WithTimeout(context.Background(), killGrace)
		defer cancel()
		for _, td := range p.m.EndRun(ctx, p.tenant, p.run) {
			if td.Err != "" {
				err = errors.Join(err, errors.New(td.Err))
			}
		}
	})
	return err
}

// Why says how the server ended, for an error message (its stderr is the
// server's text: sanitised and cut); "" while it runs.
func (p *sandboxProcess) Why() string {
	select {
	case <-p.done:
	case <-time.After(stopGrace):
		return ""
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.err != nil {
		return "its sandbox failed: " + p.err.Error()
	}
	r := p.result
	return fmt.Sprintf("the server ended (%s, exit %d): %s", r.Outcome, r.ExitCode, sandbox.Sanitize(r.Stderr.Tail, 512, false, false).Text)
}
