// Package mcphost makes the tool broker an MCP host (the official Go SDK,
// github.com/modelcontextprotocol/go-sdk): a tenant registers a connector
// (an MCP server: its transport, endpoint or command and image, auth
// method, network allowlist), a reviewer approves a snapshot of the
// server's tools with a manifest overlay for each, and the approved tools
// become tool manifests that agents are granted by connector and that pass
// the broker like every other tool.
//
// The host opens one client session per connector per run, so servers
// never see the conversation or each other. Remote servers speak Streamable
// HTTP through a dialer that refuses addresses the platform's address
// policy (internal/addrpolicy) refuses and host:port pairs outside the
// connector's allowlist, and never follows a redirect. stdio servers run
// only through a Launcher (a tier-2 sandbox); without one they are refused,
// never started on the host.
//
// At every connection the host lists the server's tools and compares them
// with the reviewed snapshot: a tool whose description or schemas changed,
// or that is new, is quarantined (never offered to a model, calls refused
// with the reason) until the connector is reviewed again. Server text is
// untrusted: descriptions are shown to reviewers neutralised (package
// render) and reach a model only once reviewed.
package mcphost

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"net/url"
	"regexp"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/agentplane/agentplane/internal/jsoncanon"
)

// Transports a connector may use.
const (
	TransportHTTP  = "http"  // Streamable HTTP to a remote server
	TransportStdio = "stdio" // a local program, only inside a tier-2 sandbox
)

// Auth methods of a connector.
const (
	AuthNone    = "none"    // the server needs no credential
	AuthService = "service" // a per-tenant secret held by the credential broker
	AuthOAuth   = "oauth"   // per-user OAuth 2.1 tokens, each for this one server (oauth.go)
)

// Limits on a connector's definition.
const (
	maxSpecBytes   = 64 << 10
	maxArgv        = 64
	maxArgBytes    = 4096
	maxAllow       = 64
	maxEndpointLen = 2048
)

var reName = regexp.MustCompile(`^[a-z][a-z0-9-]{0,63}$`)

// Spec is a connector's definition, as a tenant registers it.
type Spec struct {
	Name      string `json:"name" yaml:"name"`
	Transport string `json:"transport" yaml:"transport"`
	// Endpoint is the Streamable HTTP URL (transport http).
	Endpoint string `json:"endpoint,omitempty" yaml:"endpoint"`
	// Command is the program and its arguments, resolved inside the
	// sandbox (transport stdio); Image is the sandbox's root filesystem
	// ("" for the host's /usr, read-only).
	Command []string `json:"command,omitempty" yaml:"command"`
	Image   string   `json:"image,omitempty" yaml:"image"`
	Auth    string   `json:"auth" yaml:"auth"`
	// Allow lists the host:port pairs the server may be reached at (http)
	// or may reach itself (stdio, through the sandbox's egress proxy).
	// An http endpoint's own host:port must be listed.
	Allow []string `json:"allow,omitempty" yaml:"allow"`
	// OAuth configures auth oauth (and only it).
	OAuth *OAuthSpec `json:"oauth,omitempty" yaml:"oauth"`
}

// OAuthSpec is how agentplane acts as an OAuth 2.1 client of the
// connector's authorization server. The authorization server is
// discovered from the server (RFC 9728) and must be reachable through the
// allowlist: its host:port is listed in allow like the endpoint's.
type OAuthSpec struct {
	// ClientID is agentplane's client at the authorization server
	// (registered there; a public client using PKCE).
	ClientID string `json:"client_id" yaml:"client_id"`
	// Scopes are asked for when a user connects (default: the scopes the
	// server's metadata lists).
	Scopes []string `json:"scopes,omitempty" yaml:"scopes"`
	// Issuer, when set, is the only authorization server accepted: a
	// server whose metadata names another is refused.
	Issuer string `json:"issuer,omitempty" yaml:"issuer"`
}

// ParseSpec reads a connector definition (YAML or JSON), strictly.
func ParseSpec(data []byte) (*Spec, error) {
	if len(data) > maxSpecBytes {
		return nil, fmt.Errorf("connector definition larger than %d bytes", maxSpecBytes)
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	var s Spec
	if err := dec.Decode(&s); err != nil {
		return nil, fmt.Errorf("connector definition: %v", strings.TrimPrefix(err.Error(), "yaml: "))
	}
	if err := s.Validate(); err != nil {
		return nil, err
	}
	return &s, nil
}

// Validate checks every field; all problems are reported.
func (s *Spec) Validate() error {
	var errs []error
	bad := func(field, format string, a ...any) {
		errs = append(errs, fmt.Errorf("connector %q: %s: %s", s.Name, field, fmt.Sprintf(format, a...)))
	}
	if !reName.MatchString(s.Name) {
		bad("name", "must be lower case letters, digits and -, starting with a letter, at most 64 characters")
	}
	if s.Auth == "" {
		s.Auth = AuthNone
	}
	switch s.Auth {
	case AuthNone, AuthService, AuthOAuth:
	default:
		bad("auth", "must be none, service or oauth (got %q)", s.Auth)
	}
	switch {
	case s.Auth == AuthOAuth && s.OAuth == nil:
		bad("oauth", "auth oauth needs oauth.client_id: agentplane's client at the server's authorization server")
	case s.Auth != AuthOAuth && s.OAuth != nil:
		bad("oauth", "set only with auth: oauth")
	case s.OAuth != nil:
		for _, err := range s.OAuth.validate() {
			bad("oauth", "%v", err)
		}
	}
	if len(s.Allow) > maxAllow {
		bad("allow", "more than %d entries", maxAllow)
	}
	for _, a := range s.Allow {
		if err := checkHostPort(a); err != nil {
			bad("allow", "%v", err)
		}
	}
	switch s.Transport {
	case TransportHTTP:
		if len(s.Command) > 0 || s.Image != "" {
			bad("command", "an http connector has an endpoint, not a command or image")
		}
		hp, err := endpointHostPort(s.Endpoint)
		if err != nil {
			bad("endpoint", "%v", err)
		} else if !contains(s.Allow, hp) {
			bad("allow", "must list the endpoint's %s: the server is reached only through the allowlist", hp)
		}
	case TransportStdio:
		if s.Endpoint != "" {
			bad("endpoint", "a stdio connector has a command, not an endpoint")
		}
		if s.Auth == AuthOAuth {
			bad("auth", "oauth is for http connectors; a stdio server gets its credential in its environment (service)")
		}
		switch {
		case len(s.Command) == 0:
			bad("command", "required: the program and its arguments, as seen inside the sandbox")
		case len(s.Command) > maxArgv:
			bad("command", "more than %d arguments", maxArgv)
		}
		for _, a := range s.Command {
			if len(a) > maxArgBytes || strings.ContainsRune(a, 0) {
				bad("command", "an argument is longer than %d bytes or holds a NUL", maxArgBytes)
			}
		}
		if len(s.Image) > 512 || strings.ContainsFunc(s.Image, func(r rune) bool { return r <= ' ' }) {
			bad("image", "must be an image reference without spaces, at most 512 bytes")
		}
	default:
		bad("transport", "must be http (Streamable HTTP) or stdio (a program in a sandbox); got %q", s.Transport)
	}
	return errors.Join(errs...)
}

// CanonicalJSON is the spec as stored.
func (s *Spec) CanonicalJSON() []byte {
	b, err := jsoncanon.Marshal(s)
	if err != nil {
		return nil // unreachable: strings only
	}
	return b
}

// SpecFromJSON reads a stored spec.
func SpecFromJSON(data []byte) (*Spec, error) {
	return ParseSpec(data) // JSON is YAML; the same strict checks apply
}

func (o *OAuthSpec) validate() []error {
	var errs []error
	if o.ClientID == "" || len(o.ClientID) > 256 || strings.ContainsFunc(o.ClientID, func(r rune) bool { return r <= ' ' || r == 0x7f }) {
		errs = append(errs, errors.New("client_id: required, at most 256 printable characters without spaces"))
	}
	if len(o.Scopes) > 32 {
		errs = append(errs, errors.New("scopes: at most 32"))
	}
	for _, sc := range o.Scopes {
		if !reScope.MatchString(sc) {
			errs = append(errs, fmt.Errorf("scopes: %q is not an OAuth scope token", sc))
		}
	}
	if o.Issuer != "" {
		if _, err := endpointHostPort(o.Issuer); err != nil {
			errs = append(errs, fmt.Errorf("issuer: %v", err))
		}
	}
	return errs
}

// reScope is RFC 6749's scope-token, bounded.
var reScope = regexp.MustCompile(`^[\x21\x23-\x5b\x5d-\x7e]{1,128}$`)

func endpointHostPort(endpoint string) (string, error) {
	if endpoint == "" || len(endpoint) > maxEndpointLen {
		return "", fmt.Errorf("required: the server's Streamable HTTP URL, at most %d bytes", maxEndpointLen)
	}
	u, err := url.Parse(endpoint)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || u.User != nil || u.Fragment != "" {
		return "", fmt.Errorf("want an http or https URL without credentials or fragment (got %q)", endpoint)
	}
	port := u.Port()
	if port == "" {
		port = map[string]string{"https": "443", "http": "80"}[u.Scheme]
	}
	return net.JoinHostPort(strings.ToLower(u.Hostname()), port), nil
}

func checkHostPort(s string) error {
	host, port, err := net.SplitHostPort(s)
	if err != nil || host == "" || strings.ContainsAny(host, "*/ ") || host != strings.ToLower(host) {
		return fmt.Errorf("%q: want host:port, lower case, no wildcards", s)
	}
	if p, err := strconv.Atoi(port); err != nil || p < 1 || p > 65535 || strconv.Itoa(p) != port {
		return fmt.Errorf("%q: port must be 1 to 65535", s)
	}
	return nil
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
