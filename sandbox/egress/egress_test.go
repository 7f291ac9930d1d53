package egress_test

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/netip"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/agentplane/agentplane/sandbox/egress"
)

// fakeDNS answers from a table and remembers every name it was asked; a
// name with two answers gives the first, then the second (rebinding).
type fakeDNS struct {
	mu    sync.Mutex
	table map[string][]string
	asked []string
}

func (f *fakeDNS) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.asked = append(f.asked, host)
	ans := f.table[host]
	if len(ans) == 0 {
		return nil, errors.New("no such host")
	}
	a := ans[0]
	if len(ans) > 1 {
		f.table[host] = ans[1:]
	}
	return []netip.Addr{netip.MustParseAddr(a)}, nil
}

// loopbackDialer sends every dial to an echo server on the host's
// loopback, remembering the address asked for: no traffic leaves the host.
type loopbackDialer struct {
	mu     sync.Mutex
	target string
	dialed []string
}

func (d *loopbackDialer) Dial(ctx context.Context, network, addr string) (net.Conn, error) {
	d.mu.Lock()
	d.dialed = append(d.dialed, addr)
	d.mu.Unlock()
	var nd net.Dialer
	return nd.DialContext(ctx, "tcp", d.target)
}

func echoServer(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); io.Copy(c, c) }()
		}
	}()
	return ln.Addr().String()
}

func connect(t *testing.T, sock, target string) (string, net.Conn) {
	t.Helper()
	c, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.WriteString(c, "CONNECT "+target+" HTTP/1.1\r\nHost: "+target+"\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	status, err := br.ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	for {
		h, err := br.ReadString('\n')
		if err != nil || h == "\r\n" {
			break
		}
	}
	return strings.TrimSpace(status), &bufConn{Conn: c, r: br}
}

type bufConn struct {
	net.Conn
	r *bufio.Reader
}

func (b *bufConn) Read(p []byte) (int, error) { return b.r.Read(p) }

func TestProxy(t *testing.T) {
	dns := &fakeDNS{table: map[string][]string{
		"api.example.test":     {"203.0.113.7"},
		"rebind.example.test":  {"203.0.113.8", "127.0.0.1"},
		"private.example.test": {"10.1.2.3"},
		"meta.example.test":    {"169.254.169.254"},
		"mapped.example.test":  {"::ffff:127.0.0.1"},
		"nat64.example.test":   {"64:ff9b::a9fe:a9fe"},
		"internal.bank.test":   {"10.20.0.5"},
	}}
	dial := &loopbackDialer{target: echoServer(t)}
	var recorded []egress.Attempt
	var mu sync.Mutex
	p := egress.New(egress.Options{Resolver: dns, Dial: dial.Dial,
		Internal: []netip.Prefix{netip.MustParsePrefix("10.20.0.0/16")},
		Record:   func(a egress.Attempt) { mu.Lock(); recorded = append(recorded, a); mu.Unlock() }})
	sock := filepath.Join(t.TempDir(), "egress.sock")
	l, err := p.Serve(sock, egress.Policy{Tenant: "acme", RunID: "run_1", SandboxID: "sb1", Allow: []string{
		"api.example.test:443", "rebind.example.test:443", "private.example.test:443", "meta.example.test:80",
		"mapped.example.test:443", "nat64.example.test:443", "internal.bank.test:443", "127.0.0.1:8080", "169.254.169.254:80"}})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()

	status, c := connect(t, sock, "api.example.test:443")
	if !strings.Contains(status, " 200 ") {
		t.Fatalf("allowed CONNECT: %q", status)
	}
	io.WriteString(c, "ping")
	buf := make([]byte, 4)
	if _, err := io.ReadFull(c, buf); err != nil || string(buf) != "ping" {
		t.Fatalf("tunnel: %q %v", buf, err)
	}
	c.Close()

	for _, tc := range []struct{ target, want string }{
		{"exfil-c2VjcmV0.evil.test:443", " 403 "}, // not allowed: never resolved
		{"api.example.test:8443", " 403 "},        // allowed host, other port
		{"private.example.test:443", " 403 "},     // resolves to a private address
		{"meta.example.test:80", " 403 "},         // resolves to the metadata address
		{"mapped.example.test:443", " 403 "},      // IPv4-mapped loopback
		{"nat64.example.test:443", " 403 "},       // NAT64 of the metadata address
		{"127.0.0.1:8080", " 403 "},               // allowlisted, but loopback
		{"169.254.169.254:80", " 403 "},           // allowlisted, but metadata
		{"internal.bank.test:443", " 200 "},       // private, but opened by the operator
		{"rebind.example.test:443", " 200 "},      // first answer public
	} {
		status, c := connect(t, sock, tc.target)
		c.Close()
		if !strings.Contains(status, tc.want) {
			t.Errorf("%s: status %q, want%s", tc.target, status, tc.want)
		}
	}
	// A second lookup of the rebinding name would give 127.0.0.1; the proxy
	// looked it up once and dialled the address it checked.
	dial.mu.Lock()
	dialed := strings.Join(dial.dialed, " ")
	dial.mu.Unlock()
	if strings.Contains(dialed, "127.0.0.1") || !strings.Contains(dialed, "203.0.113.8:443") {
		t.Fatalf("dialled %s", dialed)
	}
	for _, name := range dns.asked {
		if strings.Contains(name, "evil") {
			t.Fatalf("a name outside the allowlist was resolved: %v", dns.asked)
		}
	}
	// Plain HTTP through the proxy is refused.
	raw, _ := net.Dial("unix", sock)
	io.WriteString(raw, "GET http://api.example.test/ HTTP/1.1\r\nHost: x\r\n\r\n")
	line, _ := bufio.NewReader(raw).ReadString('\n')
	raw.Close()
	if !strings.Contains(line, " 405 ") {
		t.Fatalf("GET: %q", line)
	}
	l.Close()
	got := l.Attempts()
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 12 || len(recorded) != 12 {
		t.Fatalf("recorded %d attempts (callback %d), want 12: %+v", len(got), len(recorded), got)
	}
	allowed := 0
	for _, a := range got {
		if a.Tenant != "acme" || a.RunID != "run_1" || a.SandboxID != "sb1" || a.Reason == "" {
			t.Fatalf("attempt %+v", a)
		}
		if a.Allowed {
			allowed++
		}
	}
	if allowed != 3 {
		t.Fatalf("%d allowed attempts, want 3", allowed)
	}
	// The tunnel is recorded when it closes, with its byte counts.
	for _, a := range got {
		if a.Host == "api.example.test" && a.Port == 443 && (!a.Allowed || a.BytesUp != 4 || a.BytesDown != 4 || a.Addr != "203.0.113.7:443") {
			t.Fatalf("tunnel record %+v", a)
		}
	}
}

// TestClass13EgressAddressPolicy (issue 15, class 13): the proxy judges
// resolved addresses by the shared policy, including the forms its own copy
// used to let through (Teredo, IPv4-compatible, Oracle's metadata address,
// Alibaba's inside an opened shared-address prefix). A refused address is
// never dialled; the dialler would only ever reach the loopback echo server.
func TestClass13EgressAddressPolicy(t *testing.T) {
	refused := map[string]string{
		"teredo.example.test":  "2001:0:4136:e378:8000:63bf:3fff:fdd2",
		"compat.example.test":  "::7f00:1",
		"oracle.example.test":  "192.0.0.192",
		"alibaba.example.test": "100.100.100.200",
		"azure.example.test":   "168.63.129.16",
		"bench.example.test":   "198.18.0.1",
		"zero.example.test":    "0.1.2.3",
		"sixto4.example.test":  "2002:a9fe:a9fe::1",
		"nat64lo.example.test": "64:ff9b::7f00:1",
	}
	dns := &fakeDNS{table: map[string][]string{"shared.example.test": {"100.64.0.9"}}}
	allow := []string{"shared.example.test:443"}
	for name, ip := range refused {
		dns.table[name] = []string{ip}
		allow = append(allow, name+":443")
	}
	dial := &loopbackDialer{target: echoServer(t)}
	// The operator opened the shared address space; metadata inside it
	// stays refused.
	p := egress.New(egress.Options{Resolver: dns, Dial: dial.Dial, Internal: []netip.Prefix{netip.MustParsePrefix("100.64.0.0/10")}})
	sock := filepath.Join(t.TempDir(), "egress.sock")
	l, err := p.Serve(sock, egress.Policy{Tenant: "acme", Allow: allow})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	for name := range refused {
		status, c := connect(t, sock, name+":443")
		c.Close()
		if !strings.Contains(status, " 403 ") {
			t.Errorf("%s (%s): status %q, want 403", name, refused[name], status)
		}
	}
	status, c := connect(t, sock, "shared.example.test:443")
	c.Close()
	if !strings.Contains(status, " 200 ") {
		t.Errorf("opened shared address: status %q, want 200", status)
	}
	dial.mu.Lock()
	defer dial.mu.Unlock()
	if len(dial.dialed) != 1 || dial.dialed[0] != "100.64.0.9:443" {
		t.Fatalf("dialled %v, want only the opened shared address", dial.dialed)
	}
	for _, a := range l.Attempts() {
		if !a.Allowed && !strings.Contains(a.Reason, "destination address refused: ") {
			t.Errorf("denial %+v does not name the address class", a)
		}
	}
}
