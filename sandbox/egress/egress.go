// Package egress is the only way out of a sandbox: an allowlisting HTTP
// CONNECT proxy served on a Unix socket that is bound into the sandbox
// (which has no network interface but loopback). For each sandbox it
// allows exactly the host:port pairs of the tool's manifest for that
// tenant's run, and nothing else:
//
//   - the allowlist is checked before any DNS lookup, so a name that is
//     not allowed is never resolved (no DNS exfiltration through the proxy);
//   - the proxy resolves an allowed name itself and connects to the address
//     it checked, so DNS rebinding cannot swap in another address;
//   - the resolved address is judged by the platform's one address policy
//     (internal/addrpolicy, which webhook delivery uses too): loopback,
//     link-local, cloud metadata, multicast, reserved, private, shared
//     address space and their IPv4-mapped, NAT64 and 6to4 forms are
//     refused, unless an operator opened a private prefix for internal
//     services (loopback, link-local and metadata can never be opened);
//   - every attempt, allowed or denied, is recorded.
package egress

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/agentplane/agentplane/internal/addrpolicy"
)

// Resolver looks up a host's addresses. net.DefaultResolver is one.
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// Options configure a Proxy.
type Options struct {
	// Resolver defaults to net.DefaultResolver.
	Resolver Resolver
	// Dial connects to a checked address (ip:port); default a net.Dialer
	// that checks the address again at connect time.
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
	// Internal lists private prefixes an operator opened for internal
	// services reached by allowlisted names (addrpolicy.Policy.Internal).
	Internal []netip.Prefix
	// Record, when set, receives every attempt as it is decided.
	Record func(Attempt)
	// Timeouts (defaults 10 s each).
	HeaderTimeout  time.Duration
	ConnectTimeout time.Duration
	// MaxConns caps concurrent connections per sandbox (default 64).
	MaxConns int
	Logger   *slog.Logger
}

// Policy is what one sandbox may reach.
type Policy struct {
	Tenant    string
	RunID     string
	SandboxID string
	Tool      string
	// Allow holds host:port pairs from the tool's manifest.
	Allow []string
}

// Attempt is one connection attempt through the proxy.
type Attempt struct {
	At        time.Time `json:"at"`
	Tenant    string    `json:"tenant,omitempty"`
	RunID     string    `json:"run_id,omitempty"`
	SandboxID string    `json:"sandbox_id,omitempty"`
	Host      string    `json:"host"`
	Port      int       `json:"port"`
	Allowed   bool      `json:"allowed"`
	// Reason says why it was denied (or "allowed").
	Reason string `json:"reason"`
	// Addr is the address connected to, when allowed.
	Addr      string `json:"addr,omitempty"`
	BytesUp   int64  `json:"bytes_up,omitempty"`
	BytesDown int64  `json:"bytes_down,omitempty"`
}

// Proxy serves egress for many sandboxes. Safe for concurrent use.
type Proxy struct {
	o      Options
	policy *addrpolicy.Policy
}

// New returns a proxy.
func New(o Options) *Proxy {
	if o.Resolver == nil {
		o.Resolver = net.DefaultResolver
	}
	policy := &addrpolicy.Policy{Internal: o.Internal}
	if o.Dial == nil {
		d := &net.Dialer{Control: policy.Control}
		o.Dial = d.DialContext
	}
	if o.HeaderTimeout <= 0 {
		o.HeaderTimeout = 10 * time.Second
	}
	if o.ConnectTimeout <= 0 {
		o.ConnectTimeout = 10 * time.Second
	}
	if o.MaxConns <= 0 {
		o.MaxConns = 64
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return &Proxy{o: o, policy: policy}
}

// Listener is the proxy serving one sandbox's socket.
type Listener struct {
	p     *Proxy
	pol   Policy
	allow map[string]bool
	ln    net.Listener
	path  string
	conns atomic.Int64

	mu       sync.Mutex
	attempts []Attempt
	closed   bool
	wg       sync.WaitGroup
	open     map[net.Conn]bool
}

// maxAttempts bounds what one listener keeps for the boundary record.
const maxAttempts = 1000

// Serve listens on the Unix socket at path (replacing whatever the sandbox
// left there) and serves pol until Close.
func (p *Proxy) Serve(path string, pol Policy) (*Listener, error) {
	_ = os.Remove(path)
	ln, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("egress: %w", err)
	}
	// The sandbox's uid must be able to connect.
	if err := os.Chmod(path, 0o666); err != nil {
		ln.Close()
		return nil, fmt.Errorf("egress: %w", err)
	}
	l := &Listener{p: p, pol: pol, allow: map[string]bool{}, ln: ln, path: path, open: map[net.Conn]bool{}}
	for _, a := range pol.Allow {
		l.allow[strings.ToLower(a)] = true
	}
	l.wg.Add(1)
	go l.serve()
	return l, nil
}

// Attempts returns the attempts recorded so far.
func (l *Listener) Attempts() []Attempt {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]Attempt(nil), l.attempts...)
}

// TakeAttempts returns and forgets the attempts recorded so far.
func (l *Listener) TakeAttempts() []Attempt {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := l.attempts
	l.attempts = nil
	return out
}

// Close stops serving, closes open connections and removes the socket.
func (l *Listener) Close() error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil
	}
	l.closed = true
	for c := range l.open {
		c.Close()
	}
	l.mu.Unlock()
	err := l.ln.Close()
	l.wg.Wait()
	_ = os.Remove(l.path)
	return err
}

func (l *Listener) track(c net.Conn, add bool) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if add {
		if l.closed {
			return false
		}
		l.open[c] = true
	} else {
		delete(l.open, c)
	}
	return true
}

func (l *Listener) serve() {
	defer l.wg.Done()
	for {
		c, err := l.ln.Accept()
		if err != nil {
			return
		}
		if !l.track(c, true) {
			c.Close()
			return
		}
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			defer l.track(c, false)
			defer c.Close()
			if l.conns.Add(1) > int64(l.p.o.MaxConns) {
				l.conns.Add(-1)
				_, _ = io.WriteString(c, "HTTP/1.1 429 Too Many Requests\r\n\r\n")
				return
			}
			defer l.conns.Add(-1)
			l.handle(c)
		}()
	}
}

func (l *Listener) record(a Attempt) {
	a.At = time.Now().UTC()
	a.Tenant, a.RunID, a.SandboxID = l.pol.Tenant, l.pol.RunID, l.pol.SandboxID
	l.mu.Lock()
	if len(l.attempts) < maxAttempts {
		l.attempts = append(l.attempts, a)
	}
	l.mu.Unlock()
	if l.p.o.Record != nil {
		l.p.o.Record(a)
	}
	l.p.o.Logger.Info("egress", "tenant", a.Tenant, "run", a.RunID, "sandbox", a.SandboxID, "host", a.Host, "port", a.Port, "allowed", a.Allowed, "reason", a.Reason)
}

func (l *Listener) deny(c net.Conn, a Attempt, status int, reason string) {
	a.Allowed, a.Reason = false, reason
	l.record(a)
	fmt.Fprintf(c, "HTTP/1.1 %d %s\r\nContent-Type: text/plain\r\nConnection: close\r\n\r\negress denied: %s\n", status, statusText(status), reason)
}

func statusText(code int) string {
	switch code {
	case 400:
		return "Bad Request"
	case 403:
		return "Forbidden"
	case 405:
		return "Method Not Allowed"
	case 502:
		return "Bad Gateway"
	}
	return "Error"
}

func (l *Listener) handle(c net.Conn) {
	_ = c.SetReadDeadline(time.Now().Add(l.p.o.HeaderTimeout))
	br := bufio.NewReaderSize(io.LimitReader(c, 16<<10), 4096)
	line, err := br.ReadString('\n')
	if err != nil {
		return
	}
	// Skip the headers; a CONNECT carries nothing we use.
	for {
		h, err := br.ReadString('\n')
		if err != nil {
			return
		}
		if h == "\r\n" || h == "\n" {
			break
		}
	}
	_ = c.SetReadDeadline(time.Time{})
	f := strings.Fields(line)
	if len(f) != 3 || !strings.HasPrefix(f[2], "HTTP/1.") {
		l.deny(c, Attempt{Host: "?"}, 400, "malformed request")
		return
	}
	if f[0] != "CONNECT" {
		l.deny(c, Attempt{Host: clip(f[1])}, 405, "only CONNECT is supported")
		return
	}
	host, portS, err := net.SplitHostPort(f[1])
	port, perr := strconv.Atoi(portS)
	if err != nil || perr != nil || port < 1 || port > 65535 || host == "" || len(host) > 253 {
		l.deny(c, Attempt{Host: clip(f[1])}, 400, "target must be host:port")
		return
	}
	host = strings.ToLower(strings.TrimSuffix(host, "."))
	a := Attempt{Host: clip(host), Port: port}
	target := net.JoinHostPort(host, strconv.Itoa(port))
	if !l.allow[target] {
		// Refused before any lookup: the name is never resolved.
		l.deny(c, a, 403, "not in the tool's network allowlist")
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), l.p.o.ConnectTimeout)
	defer cancel()
	var addrs []netip.Addr
	if ip, err := netip.ParseAddr(host); err == nil {
		addrs = []netip.Addr{ip}
	} else {
		addrs, err = l.p.o.Resolver.LookupNetIP(ctx, "ip", host)
		if err != nil || len(addrs) == 0 {
			l.deny(c, a, 502, "name did not resolve")
			return
		}
	}
	var pick netip.Addr
	reason := ""
	for _, ip := range addrs {
		if err := l.p.policy.Check(ip); err != nil {
			var re *addrpolicy.RefusedError
			if errors.As(err, &re) {
				reason = string(re.Class) + " address"
			}
			continue
		}
		pick = ip.Unmap()
		break
	}
	if !pick.IsValid() {
		l.deny(c, a, 403, "destination address refused: "+reason)
		return
	}
	addr := netip.AddrPortFrom(pick, uint16(port)).String()
	up, err := l.p.o.Dial(ctx, "tcp", addr)
	if err != nil {
		a.Addr = addr
		l.deny(c, a, 502, "connect failed")
		return
	}
	defer up.Close()
	if !l.track(up, true) {
		return
	}
	defer l.track(up, false)
	if _, err := io.WriteString(c, "HTTP/1.1 200 Connection Established\r\n\r\n"); err != nil {
		return
	}
	a.Allowed, a.Reason, a.Addr = true, "allowed", addr
	var upN, downN int64
	done := make(chan struct{})
	go func() {
		// Bytes the client sent after its headers are still buffered.
		n, _ := io.Copy(up, io.MultiReader(br, c))
		upN = n
		if cw, ok := up.(interface{ CloseWrite() error }); ok {
			_ = cw.CloseWrite()
		}
		close(done)
	}()
	downN, _ = io.Copy(c, up)
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
	}
	<-done
	a.BytesUp, a.BytesDown = upN, downN
	l.record(a)
}

func clip(s string) string {
	if len(s) > 253 {
		return s[:253]
	}
	return s
}
