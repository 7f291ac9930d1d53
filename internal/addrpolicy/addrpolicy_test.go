package addrpolicy_test

import (
	"errors"
	"net/netip"
	"testing"

	"github.com/agentplane/agentplane/internal/addrpolicy"
)

// TestClass13AddressPolicy (issue 15, class 13): the decision over every
// range the egress proxy and webhook delivery must refuse, including the
// ones the webhook filter used to miss (shared address space with Alibaba's
// metadata, Azure's wire server, benchmarking, 0.0.0.0/8, NAT64, 6to4,
// Teredo, IPv4-compatible and IPv4-mapped forms). Only decisions are
// tested: nothing here opens a connection.
func TestClass13AddressPolicy(t *testing.T) {
	const (
		A = addrpolicy.Public
		L = addrpolicy.Loopback
		K = addrpolicy.LinkLocal
		U = addrpolicy.Unspecified
		M = addrpolicy.Multicast
		B = addrpolicy.Broadcast
		D = addrpolicy.Metadata
		R = addrpolicy.Reserved
		T = addrpolicy.Translation
		P = addrpolicy.Private
		S = addrpolicy.Shared
		N = addrpolicy.Benchmark
	)
	// openable: whether Internal covering the address opens it.
	cases := []struct {
		ip       string
		class    addrpolicy.Class
		openable bool
	}{
		// Public addresses (documentation ranges stand in for them).
		{"203.0.113.7", A, false}, {"198.51.100.1", A, false}, {"192.0.2.1", A, false},
		{"8.8.8.8", A, false}, {"1.1.1.1", A, false}, {"100.63.255.255", A, false}, {"100.128.0.0", A, false},
		{"198.17.255.255", A, false}, {"198.20.0.0", A, false}, {"2001:4860:4860::8888", A, false},
		{"2001:db8::1", A, false}, {"2606:4700::1111", A, false},
		{"64:ff9b::203.0.113.7", A, false}, {"2002:cb00:7107::1", A, false}, // NAT64 and 6to4 of a public address
		{"::ffff:203.0.113.7", A, false},

		// This network and unspecified.
		{"0.0.0.0", U, false}, {"0.1.2.3", U, false}, {"0.255.255.255", U, false}, {"::", U, false},
		// Loopback in every spelling.
		{"127.0.0.1", L, false}, {"127.255.255.254", L, false}, {"::1", L, false}, {"::ffff:127.0.0.1", L, false},
		{"64:ff9b::7f00:1", L, false}, {"2002:7f00:1::1", L, false},
		// Link-local, metadata inside it, over IPv6, mapped, NAT64.
		{"169.254.0.1", K, false}, {"169.254.169.254", D, false}, {"169.254.170.2", D, false},
		{"::ffff:169.254.169.254", D, false}, {"64:ff9b::a9fe:a9fe", D, false}, {"2002:a9fe:a9fe::1", D, false},
		{"fe80::1", K, false}, {"fe80::1%eth0", K, false}, {"febf::1", K, false},
		// Cloud metadata outside link-local.
		{"100.100.100.200", D, false}, {"168.63.129.16", D, false}, {"fd00:ec2::254", D, false}, {"192.0.0.192", D, false},
		{"::ffff:100.100.100.200", D, false}, {"64:ff9b::6464:64c8", D, false}, {"64:ff9b::a83f:8110", D, false},
		// Multicast and broadcast.
		{"224.0.0.1", M, false}, {"239.255.255.250", M, false}, {"ff02::1", M, false}, {"ff05::1:3", M, false},
		{"255.255.255.255", B, false},
		// Reserved special-purpose ranges.
		{"192.0.0.8", R, false}, {"192.88.99.1", R, false}, {"100::1", R, false}, {"2001:10::1", R, false},
		{"2001:1ff::1", R, false}, {"5f00::1", R, false}, {"240.0.0.1", R, true}, {"255.255.255.254", R, true},
		// Private, shared, benchmarking: refused unless an operator opens them.
		{"10.0.0.1", P, true}, {"10.255.255.255", P, true}, {"172.16.5.4", P, true}, {"172.31.255.255", P, true},
		{"192.168.1.1", P, true}, {"::ffff:10.0.0.1", P, true}, {"fc00::1", P, true}, {"fd12:3456::1", P, true},
		{"fec0::1", P, true},
		{"100.64.0.1", S, true}, {"100.127.255.254", S, true}, {"::ffff:100.64.0.1", S, true},
		{"198.18.0.1", N, true}, {"198.19.255.255", N, true},
		// Embedded forms of private addresses are never opened: NAT64 and
		// 6to4 stand for global IPv4 addresses only.
		{"64:ff9b::a00:1", P, false}, {"64:ff9b::6440:1", S, false}, {"64:ff9b::c612:1", N, false},
		{"2002:a00:1::1", P, false}, {"2002:c0a8:101::1", P, false},
		// Forms whose destination cannot be read from the address.
		{"64:ff9b:1::a00:1", T, true}, {"64:ff9b:1:ffff::1", T, true},
		{"2001:0:4136:e378:8000:63bf:3fff:fdd2", T, false}, // Teredo
		{"::7f00:1", T, false}, {"::a9fe:a9fe", T, false},  // IPv4-compatible
		{"::ffff:0:7f00:1", T, false}, // IPv4-translated
	}
	everything := []netip.Prefix{netip.MustParsePrefix("0.0.0.0/0"), netip.MustParsePrefix("::/0")}
	for _, c := range cases {
		ip := netip.MustParseAddr(c.ip)
		if got := addrpolicy.Classify(ip); got != c.class {
			t.Errorf("Classify(%s) = %q, want %q", c.ip, got, c.class)
		}
		strict := &addrpolicy.Policy{}
		err := strict.Check(ip)
		if (err == nil) != (c.class == A) {
			t.Errorf("zero policy Check(%s) = %v, want allowed=%v", c.ip, err, c.class == A)
		}
		var re *addrpolicy.RefusedError
		if err != nil && (!errors.As(err, &re) || re.Class != c.class) {
			t.Errorf("Check(%s) = %v, want a refusal of class %q", c.ip, err, c.class)
		}
		// Opening every prefix opens exactly the openable classes.
		open := &addrpolicy.Policy{Internal: everything}
		if got, want := open.Check(ip) == nil, c.class == A || c.openable; got != want {
			t.Errorf("Internal=everything Check(%s) allowed=%v, want %v", c.ip, got, want)
		}
		// Opening loopback opens this machine's loopback, not its NAT64 or
		// 6to4 spellings.
		lo := &addrpolicy.Policy{Loopback: true}
		wantLo := c.class == A || (c.class == L && ip.Unmap().IsLoopback())
		if got := lo.Check(ip) == nil; got != wantLo {
			t.Errorf("Loopback Check(%s) allowed=%v, want %v", c.ip, got, wantLo)
		}
	}

	// Internal opens only the prefixes it names.
	p := &addrpolicy.Policy{Internal: []netip.Prefix{netip.MustParsePrefix("10.20.0.0/16"), netip.MustParsePrefix("100.64.0.0/10")}}
	for ip, want := range map[string]bool{"10.20.1.1": true, "::ffff:10.20.1.1": true, "10.21.0.1": false, "192.168.1.1": false,
		"100.64.0.1": true, "100.100.100.200": false, "64:ff9b::a14:101": false} {
		if got := p.Check(netip.MustParseAddr(ip)) == nil; got != want {
			t.Errorf("Internal 10.20/16,100.64/10: Check(%s) allowed=%v, want %v", ip, got, want)
		}
	}
}

// TestControl: the dialer hook judges the address it is handed, port and
// all, and refuses what is not an IP address.
func TestControl(t *testing.T) {
	p := &addrpolicy.Policy{}
	for addr, want := range map[string]bool{"203.0.113.7:443": true, "[2001:db8::1]:443": true, "127.0.0.1:80": false,
		"[::ffff:169.254.169.254]:80": false, "100.100.100.200:80": false, "example.com:443": false, "nonsense": false} {
		if got := p.Control("tcp", addr, nil) == nil; got != want {
			t.Errorf("Control(%s) allowed=%v, want %v", addr, got, want)
		}
	}
}
