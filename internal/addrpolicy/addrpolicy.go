// Package addrpolicy is the one decision of which IP addresses a connection
// the platform makes on a tenant's behalf may reach: the sandbox egress
// proxy (sandbox/egress) and webhook delivery (api) both ask it, after
// resolution, about the address they are about to connect to.
//
// An address is judged as what it reaches, not as it is written: an
// IPv4-mapped IPv6 address (::ffff:a.b.c.d) is its IPv4 address, and the
// NAT64 (64:ff9b::/96) and 6to4 (2002::/16) forms are judged by the IPv4
// address they embed, which must be public. Forms whose destination cannot
// be read from the address (local-use NAT64 64:ff9b:1::/48, Teredo in
// 2001::/32, the deprecated IPv4-compatible ::/96) are refused outright.
//
// Classes of refused addresses:
//
//   - never reachable, whatever an operator opens: loopback, link-local
//     (and with it the 169.254.169.254 metadata service), "this network"
//     0.0.0.0/8 and the unspecified address, multicast, broadcast, the
//     cloud metadata addresses outside link-local (100.100.100.200,
//     168.63.129.16, fd00:ec2::254, 192.0.0.192), and reserved
//     special-purpose ranges (IETF protocol assignments, discard-only,
//     SRv6 SIDs, IPv4-compatible and -translated forms);
//   - private, which an operator may open for internal services by prefix
//     (Policy.Internal): RFC 1918, shared address space 100.64.0.0/10,
//     benchmarking 198.18.0.0/15, 240.0.0.0/4, unique local fc00::/7,
//     site-local fec0::/10, local-use NAT64 64:ff9b:1::/48.
//
// The documentation ranges (192.0.2.0/24, 198.51.100.0/24, 203.0.113.0/24,
// 2001:db8::/32, 3fff::/20) are not refused: no network routes them, and
// tests use them as stand-ins for public addresses.
package addrpolicy

import (
	"fmt"
	"net"
	"net/netip"
	"syscall"
)

// Class names what kind of address an address is.
type Class string

// The classes the policy tells apart.
const (
	Public      Class = "public"
	Loopback    Class = "loopback"
	LinkLocal   Class = "link-local"
	Unspecified Class = "unspecified or this-network"
	Multicast   Class = "multicast"
	Broadcast   Class = "broadcast"
	Metadata    Class = "cloud metadata"
	Reserved    Class = "reserved special-purpose"
	Translation Class = "translation form without a readable destination"
	Private     Class = "private"
	Shared      Class = "shared address space (carrier-grade NAT)"
	Benchmark   Class = "benchmarking"
)

// metadata are cloud metadata and platform service addresses. Those in
// link-local are refused as link-local anyway; the others would otherwise
// pass as public (168.63.129.16) or be openable as private.
var metadata = map[netip.Addr]bool{
	netip.MustParseAddr("169.254.169.254"): true, // AWS, GCP, Azure, OpenStack, DigitalOcean
	netip.MustParseAddr("169.254.170.2"):   true, // AWS ECS task metadata
	netip.MustParseAddr("100.100.100.200"): true, // Alibaba Cloud
	netip.MustParseAddr("168.63.129.16"):   true, // Azure wire server
	netip.MustParseAddr("192.0.0.192"):     true, // Oracle Cloud
	netip.MustParseAddr("fd00:ec2::254"):   true, // AWS over IPv6
}

type rangeClass struct {
	prefix   netip.Prefix
	class    Class
	openable bool // Policy.Internal may open it
}

func r(p string, c Class, openable bool) rangeClass {
	return rangeClass{netip.MustParsePrefix(p), c, openable}
}

// ranges are checked in order; the first that holds the address decides.
var ranges = []rangeClass{
	// IPv4 (IANA IPv4 special-purpose address registry).
	r("0.0.0.0/8", Unspecified, false),
	r("127.0.0.0/8", Loopback, false),
	r("169.254.0.0/16", LinkLocal, false),
	r("224.0.0.0/4", Multicast, false),
	r("255.255.255.255/32", Broadcast, false),
	r("192.0.0.0/24", Reserved, false),   // IETF protocol assignments
	r("192.88.99.0/24", Reserved, false), // deprecated 6to4 relay anycast
	r("10.0.0.0/8", Private, true),
	r("172.16.0.0/12", Private, true),
	r("192.168.0.0/16", Private, true),
	r("100.64.0.0/10", Shared, true),
	r("198.18.0.0/15", Benchmark, true),
	r("240.0.0.0/4", Reserved, true), // some clouds route it internally
	// IPv6 (IANA IPv6 special-purpose address registry).
	r("::1/128", Loopback, false),
	r("::/128", Unspecified, false),
	r("::/96", Translation, false),           // deprecated IPv4-compatible
	r("::ffff:0:0:0/96", Translation, false), // IPv4-translated (SIIT)
	r("64:ff9b:1::/48", Translation, true),   // local-use NAT64: the operator's own
	r("100::/64", Reserved, false),           // discard-only
	r("2001::/32", Translation, false),       // Teredo: the client hides in the address
	r("2001::/23", Reserved, false),          // IETF protocol assignments
	r("5f00::/16", Reserved, false),          // SRv6 SIDs
	r("fe80::/10", LinkLocal, false),
	r("ff00::/8", Multicast, false),
	r("fc00::/7", Private, true),
	r("fec0::/10", Private, true), // deprecated site-local
}

var (
	nat64     = netip.MustParsePrefix("64:ff9b::/96")
	sixToFour = netip.MustParsePrefix("2002::/16")
)

// Classify says what kind of address ip is, judging the IPv4 address an
// IPv4-mapped, NAT64 or 6to4 address embeds. The zone is ignored.
func Classify(ip netip.Addr) Class {
	c, _ := classify(ip)
	return c
}

// classify returns the class and whether an operator may open it.
func classify(ip netip.Addr) (Class, bool) {
	ip = ip.WithZone("").Unmap()
	if !ip.IsValid() {
		return Unspecified, false
	}
	if metadata[ip] {
		return Metadata, false
	}
	if ip.Is6() {
		b := ip.As16()
		var embedded netip.Addr
		switch {
		case nat64.Contains(ip):
			embedded = netip.AddrFrom4([4]byte{b[12], b[13], b[14], b[15]})
		case sixToFour.Contains(ip):
			embedded = netip.AddrFrom4([4]byte{b[2], b[3], b[4], b[5]})
		}
		if embedded.IsValid() {
			// RFC 6052 and RFC 3056 forms stand for global IPv4 addresses
			// only: an embedded non-public address is never opened.
			if c, _ := classify(embedded); c != Public {
				return c, false
			}
			return Public, false
		}
	}
	for _, rc := range ranges {
		if rc.prefix.Contains(ip) {
			return rc.class, rc.openable
		}
	}
	return Public, false
}

// Policy decides which addresses may be reached. The zero Policy allows
// public addresses only. Safe for concurrent use once built.
type Policy struct {
	// Internal opens private addresses in these prefixes for internal
	// services an operator chose to reach. It never opens loopback,
	// link-local, metadata, multicast, reserved or embedded forms.
	Internal []netip.Prefix
	// Loopback opens this machine's loopback addresses (tests and
	// single-machine setups; never the sandbox egress proxy).
	Loopback bool
}

// RefusedError says why an address was refused.
type RefusedError struct {
	Addr  netip.Addr
	Class Class
}

func (e *RefusedError) Error() string {
	return fmt.Sprintf("address %s is refused: %s", e.Addr, e.Class)
}

// Check returns nil when ip may be reached, else a *RefusedError.
func (p *Policy) Check(ip netip.Addr) error {
	c, openable := classify(ip)
	switch {
	case c == Public:
		return nil
	case c == Loopback && p.Loopback && ip.WithZone("").Unmap().IsLoopback():
		return nil // this machine's loopback itself, not an embedded form of it
	case openable:
		u := ip.WithZone("").Unmap()
		for _, open := range p.Internal {
			if open.Contains(u) {
				return nil
			}
		}
	}
	return &RefusedError{Addr: ip, Class: c}
}

// Control is a net.Dialer Control function that refuses, at connect
// time, an address the policy does not allow: it sees the address after
// resolution, so a name whose answer changed since it was checked (DNS
// rebinding) cannot reach a refused address.
func (p *Policy) Control(network, address string, _ syscall.RawConn) error {
	host, _, err := net.SplitHostPort(address)
	if err != nil {
		return err
	}
	ip, err := netip.ParseAddr(host)
	if err != nil {
		return fmt.Errorf("dialing %q: not an IP address", address)
	}
	return p.Check(ip)
}
