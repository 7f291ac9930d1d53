package tool

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/agentplane/agentplane/internal/yamlissue"
	"io"
	"maps"
	"math"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"gopkg.in/yaml.v3"

	"github.com/agentplane/agentplane/internal/jsoncanon"
)

// Auth modes: whose identity a tool acts with.
const (
	AuthNone           = "none"
	AuthOnBehalfOfUser = "on_behalf_of_user"
	AuthService        = "service"
)

// Approval rules.
const (
	ApprovalNever         = "never"
	ApprovalAlways        = "always"
	ApprovalRequiredAbove = "required_above"
)

// Filesystem modes of a tier-2 or tier-3 tool.
const (
	FilesystemNone      = "none"
	FilesystemEphemeral = "ephemeral"
)

// Limits on manifests and arguments.
const (
	// DefaultMaxOutputBytes is the output bound of a tool that sets none.
	DefaultMaxOutputBytes = 16 << 10
	// MaxArgsBytes bounds the arguments ValidateArgs accepts.
	MaxArgsBytes = 1 << 20
	// MaxManifestBytes bounds one manifest file.
	MaxManifestBytes = 1 << 20

	maxTimeoutMS      = 600_000
	maxMemoryMB       = 65_536
	maxCPUMS          = 3_600_000
	maxOutputBytes    = 16 << 20
	maxDescription    = 8 << 10
	maxSchemaBytes    = 64 << 10
	maxImageLen       = 512
	maxThresholdField = 64
	maxListEntries    = 64 // network.allow, auth.scopes, rate_limit, approval_threshold
)

var (
	reToolName  = regexp.MustCompile(`^[a-z][a-z0-9_]{0,63}$`)
	reConnector = regexp.MustCompile(`^[a-z][a-z0-9-]{0,63}$`)
	reScope     = regexp.MustCompile(`^[a-z][a-z0-9_.-]*:[a-z][a-z0-9_.-]*$`)
	reGroup     = regexp.MustCompile(`^[a-z][a-z0-9_.-]{0,63}$`)
	reArgName   = regexp.MustCompile(`^[A-Za-z0-9_-]+$`)
	reDNSLabel  = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]*[a-z0-9])?$`)
	// reMCPToolName is the MCP specification's tool name: 1 to 128 of
	// A-Z, a-z, 0-9, '_', '-' and '.'.
	reMCPToolName = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,128}$`)
)

// Manifest is the enforced contract of one tool. Manifests come from
// ParseManifests, LoadManifestFile, LoadManifestDir or ManifestFromJSON,
// which validate every field and compile the input schema; a Manifest built
// any other way cannot validate arguments. A loaded Manifest must not be
// modified: sets and the broker share it.
type Manifest struct {
	Name        string
	Description string
	// Connector is the tool source the tool belongs to (an internal API,
	// an MCP server, a sandbox), if any.
	Connector string
	// Tier is the isolation tier: 1 in-process Go, 2 container, 3 gVisor
	// or microVM.
	Tier      int
	TimeoutMS int
	// InputSchema is the JSON Schema of the arguments, canonical JSON.
	InputSchema json.RawMessage
	Network     Network
	Auth        Auth
	// RateLimits all apply; a call must fit every one.
	RateLimits []RateLimit
	// Approval is ApprovalNever, ApprovalAlways or ApprovalRequiredAbove.
	Approval string
	// ApprovalThreshold maps argument names to the value above which a
	// call needs approval (used with ApprovalRequiredAbove).
	ApprovalThreshold map[string]float64
	ApprovalGroup     string
	// SideEffects is SideEffectsNone, SideEffectsInternal or
	// SideEffectsExternal; it decides whether a replay may run the tool.
	SideEffects string
	// UntrustedOutput marks output that may carry injected instructions
	// (tickets, e-mails, web pages); reading it taints the run. It is the
	// default: only "untrusted_output: false" clears it, and the loop
	// honours that only for a tier-1 tool whose manifest the platform
	// reviewed (tool.Catalog.Review); a tier-2 or tier-3 tool may not
	// declare it.
	UntrustedOutput bool
	// Filesystem, MemoryMB, CPUMS and Image describe the sandbox of a
	// tier-2 or tier-3 tool.
	Filesystem     string
	MemoryMB       int
	CPUMS          int
	Image          string
	MaxOutputBytes int
	// MCP is set for a tool served by an MCP connector (package mcphost):
	// the tool's name on the server and the output schema it declared.
	// Such a tool runs out of process (tier 2 or 3) and its output is
	// never trusted.
	MCP *MCP

	schema *jsonschema.Schema
	// pin is the hash of a manifest ManifestCache parsed (shared, never
	// modified). It names the manifest it belongs to, so a copy of the
	// struct, which may be changed, computes its own.
	pin *manifestPin
}

type manifestPin struct {
	m   *Manifest
	sum [32]byte
}

// MCP binds a manifest to a tool of an MCP server. The manifest's
// description and input schema are the server's, as a reviewer approved
// them (the connector's snapshot); everything else is the overlay's.
type MCP struct {
	// Tool is the tool's name on the server (MCP names allow upper case,
	// '-' and '.'; the manifest's Name is the agentplane name).
	Tool string
	// OutputSchema is the server's declared output schema, canonical JSON
	// (nil: none declared).
	OutputSchema json.RawMessage

	output *jsonschema.Schema
}

// Network lists the endpoints a tool may reach. An empty list means no
// network at all.
type Network struct {
	// Allow holds host:port entries, sorted.
	Allow []string
}

// Auth says whose identity a tool uses and with which scopes.
type Auth struct {
	Mode string
	// Scopes are sorted resource:action pairs such as docs:read.
	Scopes []string
}

// ManifestError is one problem found while loading a manifest.
type ManifestError struct {
	File string
	// Tool is the name the document gives, possibly invalid; empty when
	// the document has none.
	Tool string
	// Doc is the 1-based index of the YAML document in File.
	Doc  int
	Line int
	// Field is the path of the offending field, e.g. network.allow[1].
	Field   string
	Problem string
	// Err is the underlying error, if any (a file that cannot be read).
	Err error
}

func (e *ManifestError) Error() string {
	var b strings.Builder
	b.WriteString(e.File)
	if e.Line > 0 {
		fmt.Fprintf(&b, ":%d", e.Line)
	}
	b.WriteString(": ")
	switch {
	case e.Tool != "":
		fmt.Fprintf(&b, "tool %q: ", e.Tool)
	case e.Doc > 0:
		fmt.Fprintf(&b, "document %d: ", e.Doc)
	}
	if e.Field != "" {
		fmt.Fprintf(&b, "field %q: ", e.Field)
	}
	b.WriteString(e.Problem)
	return b.String()
}

func (e *ManifestError) Unwrap() error { return e.Err }

// rawManifest is a manifest as written, before validation. It is filled
// from YAML (strictly, unknown fields rejected) or from JSON.
type rawManifest struct {
	Name              string             `yaml:"name" json:"name"`
	Description       string             `yaml:"description" json:"description"`
	Connector         string             `yaml:"connector" json:"connector"`
	Tier              int                `yaml:"tier" json:"tier"`
	TimeoutMS         int                `yaml:"timeout_ms" json:"timeout_ms"`
	InputSchema       *jsonValue         `yaml:"input_schema" json:"input_schema"`
	Network           *rawNetwork        `yaml:"network" json:"network"`
	Auth              *rawAuth           `yaml:"auth" json:"auth"`
	RateLimit         stringList         `yaml:"rate_limit" json:"rate_limit"`
	Approval          string             `yaml:"approval" json:"approval"`
	ApprovalThreshold map[string]float64 `yaml:"approval_threshold" json:"approval_threshold"`
	ApprovalGroup     string             `yaml:"approval_group" json:"approval_group"`
	SideEffects       string             `yaml:"side_effects" json:"side_effects"`
	UntrustedOutput   *bool              `yaml:"untrusted_output" json:"untrusted_output"`
	Filesystem        string             `yaml:"filesystem" json:"filesystem"`
	MemoryMB          int                `yaml:"memory_mb" json:"memory_mb"`
	CPUMS             int                `yaml:"cpu_ms" json:"cpu_ms"`
	Image             string             `yaml:"image" json:"image"`
	MaxOutputBytes    int                `yaml:"max_output_bytes" json:"max_output_bytes"`
	MCP               *rawMCP            `yaml:"mcp" json:"mcp"`
}

type rawMCP struct {
	Tool         string     `yaml:"tool" json:"tool"`
	OutputSchema *jsonValue `yaml:"output_schema" json:"output_schema"`
}

type rawNetwork struct {
	Allow []string `yaml:"allow" json:"allow"`
}

type rawAuth struct {
	Mode   string   `yaml:"mode" json:"mode"`
	Scopes []string `yaml:"scopes" json:"scopes"`
}

// ParseManifests parses the manifests in data, one per YAML document
// (documents are separated by "---"; empty ones are skipped). filename is
// used in errors only. Parsing is strict: an unknown field, a value of the
// wrong type, an invalid input schema or two tools of the same name are
// errors. Every problem found is reported, each as a *ManifestError.
func ParseManifests(filename string, data []byte) ([]*Manifest, error) {
	if len(data) > MaxManifestBytes {
		return nil, &ManifestError{File: filename, Problem: fmt.Sprintf("file is larger than %d bytes", MaxManifestBytes)}
	}
	// Two decoders read the same stream in step: one into nodes, to know
	// where each field is written, and one strictly into rawManifest.
	nodes := yaml.NewDecoder(bytes.NewReader(data))
	strict := yaml.NewDecoder(bytes.NewReader(data))
	strict.KnownFields(true)

	var (
		out   []*Manifest
		errs  []error
		first = map[string]int{}
	)
	for doc := 1; ; doc++ {
		var node yaml.Node
		err := nodes.Decode(&node)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			line, problem := yamlissue.SplitLine(strings.TrimPrefix(err.Error(), "yaml: "))
			errs = append(errs, &ManifestError{File: filename, Doc: doc, Line: line, Problem: problem})
			break
		}
		var raw rawManifest
		strictErr := strict.Decode(&raw)
		if yamlissue.EmptyDocument(&node) {
			continue
		}
		c := &checker{file: filename, doc: doc, tool: yamlissue.ScalarField(&node, "name"), node: &node}
		if !yamlissue.MappingDocument(&node) {
			c.add("", "a tool manifest must be a mapping of fields")
			errs = append(errs, c.errs...)
			continue
		}
		if strictErr != nil {
			var te *yaml.TypeError
			if !errors.As(strictErr, &te) {
				c.add("", "%s", strings.TrimPrefix(strictErr.Error(), "yaml: "))
			} else {
				for _, is := range yamlissue.Issues(&node, te.Errors) {
					c.errs = append(c.errs, &ManifestError{File: filename, Tool: c.tool, Doc: doc, Line: is.Line, Field: is.Field, Problem: is.Problem})
				}
			}
			errs = append(errs, c.errs...)
			continue
		}
		m := c.build(&raw)
		if len(c.errs) > 0 {
			errs = append(errs, c.errs...)
			continue
		}
		if prev, dup := first[m.Name]; dup {
			errs = append(errs, &ManifestError{File: filename, Tool: m.Name, Doc: doc, Line: yamlissue.LineOf(&node, "name"), Field: "name",
				Problem: fmt.Sprintf("tool defined twice (documents %d and %d)", prev, doc)})
			continue
		}
		first[m.Name] = doc
		out = append(out, m)
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return out, nil
}

// LoadManifestFile reads and parses the manifests in the file at path.
func LoadManifestFile(path string) ([]*Manifest, error) {
	data, err := readBounded(path)
	if err != nil {
		return nil, &ManifestError{File: path, Problem: err.Error(), Err: err}
	}
	return ParseManifests(path, data)
}

// LoadManifestDir loads every *.yaml and *.yml file directly in dir, in
// name order. A tool name defined in two files is an error.
func LoadManifestDir(dir string) ([]*Manifest, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("tool manifests: %w", err)
	}
	var (
		out  []*Manifest
		errs []error
		from = map[string]string{}
	)
	for _, e := range entries { // os.ReadDir sorts by name
		ext := filepath.Ext(e.Name())
		if e.IsDir() || (ext != ".yaml" && ext != ".yml") {
			continue
		}
		path := filepath.Join(dir, e.Name())
		ms, err := LoadManifestFile(path)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for _, m := range ms {
			if prev, dup := from[m.Name]; dup {
				errs = append(errs, &ManifestError{File: path, Tool: m.Name, Field: "name",
					Problem: fmt.Sprintf("tool already defined in %s", prev)})
				continue
			}
			from[m.Name] = path
			out = append(out, m)
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return out, nil
}

func readBounded(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxManifestBytes+1))
	if err != nil {
		return nil, err
	}
	if len(data) > MaxManifestBytes {
		return nil, fmt.Errorf("file is larger than %d bytes", MaxManifestBytes)
	}
	return data, nil
}

// ManifestFromJSON parses a manifest in the form CanonicalJSON writes,
// validating it as ParseManifests does and compiling its schema.
func ManifestFromJSON(data []byte) (*Manifest, error) {
	const file = "manifest JSON"
	if len(data) > MaxManifestBytes {
		return nil, &ManifestError{File: file, Problem: fmt.Sprintf("larger than %d bytes", MaxManifestBytes)}
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var raw rawManifest
	if err := dec.Decode(&raw); err != nil {
		return nil, &ManifestError{File: file, Problem: err.Error(), Err: err}
	}
	if dec.More() {
		return nil, &ManifestError{File: file, Problem: "trailing data after the manifest"}
	}
	c := &checker{file: file, tool: raw.Name}
	m := c.build(&raw)
	if len(c.errs) > 0 {
		return nil, errors.Join(c.errs...)
	}
	return m, nil
}

// checker collects the problems of one manifest document.
type checker struct {
	file string
	doc  int
	tool string
	node *yaml.Node // nil for JSON input
	errs []error
}

func (c *checker) add(field, format string, args ...any) {
	line := 0
	if c.node != nil && field != "" {
		line = yamlissue.LineOf(c.node, field)
	}
	c.errs = append(c.errs, &ManifestError{File: c.file, Tool: c.tool, Doc: c.doc, Line: line, Field: field, Problem: fmt.Sprintf(format, args...)})
}

func (c *checker) oneOf(field, got string, allowed ...string) {
	c.add(field, "must be one of %s (got %q)", strings.Join(allowed, ", "), got)
}

// build validates raw and returns the manifest, with defaults filled in.
// Problems are collected in c.errs.
func (c *checker) build(raw *rawManifest) *Manifest {
	m := &Manifest{
		Name:          raw.Name,
		Description:   raw.Description,
		Connector:     raw.Connector,
		Tier:          raw.Tier,
		TimeoutMS:     raw.TimeoutMS,
		Approval:      raw.Approval,
		ApprovalGroup: raw.ApprovalGroup,
		SideEffects:   raw.SideEffects,
		// Output is untrusted unless the manifest says otherwise.
		UntrustedOutput: raw.UntrustedOutput == nil || *raw.UntrustedOutput,
		Filesystem:      raw.Filesystem,
		MemoryMB:        raw.MemoryMB,
		CPUMS:           raw.CPUMS,
		Image:           raw.Image,
		MaxOutputBytes:  raw.MaxOutputBytes,
	}

	switch {
	case m.Name == "":
		c.add("name", "required")
	case !reToolName.MatchString(m.Name):
		c.add("name", "must be lower case letters, digits and _, starting with a letter, at most 64 characters (got %q)", m.Name)
	}
	if len(m.Description) > maxDescription {
		c.add("description", "longer than %d bytes", maxDescription)
	}
	if m.Connector != "" && !reConnector.MatchString(m.Connector) {
		c.add("connector", "must be lower case letters, digits and -, starting with a letter, at most 64 characters (got %q)", m.Connector)
	}
	switch m.Tier {
	case 1, 2, 3:
	case 0:
		c.add("tier", "required: 1 (in-process Go), 2 (container) or 3 (gVisor or microVM)")
	default:
		c.add("tier", "must be 1, 2 or 3 (got %d)", m.Tier)
	}
	switch {
	case m.TimeoutMS == 0:
		c.add("timeout_ms", "required: milliseconds, 1 to %d", maxTimeoutMS)
	case m.TimeoutMS < 1 || m.TimeoutMS > maxTimeoutMS:
		c.add("timeout_ms", "must be between 1 and %d (got %d)", maxTimeoutMS, m.TimeoutMS)
	}

	c.schema(m, raw.InputSchema)
	lists := []struct {
		field string
		n     int
	}{
		{"network.allow", lenAllow(raw.Network)},
		{"auth.scopes", lenScopes(raw.Auth)},
		{"rate_limit", len(raw.RateLimit)},
		{"approval_threshold", len(raw.ApprovalThreshold)},
	}
	for _, l := range lists {
		if l.n > maxListEntries {
			c.add(l.field, "more than %d entries", maxListEntries)
			return m
		}
	}
	if raw.Network != nil {
		m.Network.Allow = c.network(raw.Network.Allow)
	}
	c.auth(m, raw.Auth)

	// rate_limit is one string or a list; errors index it only if a list.
	listed := len(raw.RateLimit) > 1 || yamlissue.LineOf(c.node, "rate_limit[0]") > 0
	for i, s := range raw.RateLimit {
		rl, err := ParseRateLimit(s)
		field := "rate_limit"
		if listed {
			field = fmt.Sprintf("rate_limit[%d]", i)
		}
		if err != nil {
			c.add(field, "%v", err)
			continue
		}
		m.RateLimits = append(m.RateLimits, rl)
	}

	c.approval(m, raw.ApprovalThreshold)

	switch m.SideEffects {
	case SideEffectsNone, SideEffectsInternal, SideEffectsExternal:
	case "":
		c.add("side_effects", "required: none, internal or external (it decides whether a replay may run the tool)")
	default:
		c.oneOf("side_effects", m.SideEffects, SideEffectsNone, SideEffectsInternal, SideEffectsExternal)
	}

	c.sandbox(m)
	c.mcp(m, raw.MCP)

	switch {
	case m.MaxOutputBytes == 0:
		m.MaxOutputBytes = DefaultMaxOutputBytes
	case m.MaxOutputBytes < 0 || m.MaxOutputBytes > maxOutputBytes:
		c.add("max_output_bytes", "must be between 1 and %d (got %d)", maxOutputBytes, m.MaxOutputBytes)
	}
	return m
}

func lenAllow(n *rawNetwork) int {
	if n == nil {
		return 0
	}
	return len(n.Allow)
}

func lenScopes(a *rawAuth) int {
	if a == nil {
		return 0
	}
	return len(a.Scopes)
}

func (c *checker) schema(m *Manifest, v *jsonValue) {
	if v == nil || v.raw == nil {
		c.add("input_schema", "required: a JSON Schema of the tool's arguments (type: object)")
		return
	}
	if len(v.raw) > maxSchemaBytes {
		c.add("input_schema", "larger than %d bytes", maxSchemaBytes)
		return
	}
	var top map[string]any
	if err := json.Unmarshal(v.raw, &top); err != nil {
		c.add("input_schema", "must be a mapping (a JSON Schema object)")
		return
	}
	if top["type"] != "object" {
		c.add("input_schema", `top-level "type" must be "object" (tool arguments are a JSON object)`)
		return
	}
	if err := checkFormats(v.raw); err != nil {
		c.add("input_schema", "%s", oneLine(err.Error()))
		return
	}
	sch, err := compileSchema(v.raw)
	if err != nil {
		c.add("input_schema", "invalid JSON Schema: %s", oneLine(err.Error()))
		return
	}
	m.InputSchema = v.raw
	m.schema = sch
}

// schemaURL names an input schema while it is compiled. References to any
// other document are refused, so a schema cannot make the loader read
// files or fetch URLs.
const schemaURL = "https://schemas.agentplane.invalid/tool-input.json"

type noLoader struct{}

func (noLoader) Load(url string) (any, error) {
	return nil, fmt.Errorf("external schema references are not allowed (%s)", url)
}

func compileSchema(raw json.RawMessage) (*jsonschema.Schema, error) {
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		return nil, err
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	c.AssertFormat() // see formats.go: a declared format is enforced
	c.RegisterFormat(emailFormat)
	c.UseLoader(noLoader{})
	if err := c.AddResource(schemaURL, doc); err != nil {
		return nil, err
	}
	return c.Compile(schemaURL)
}

func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}

func (c *checker) network(allow []string) []string {
	seen := map[string]bool{}
	out := make([]string, 0, len(allow))
	for i, entry := range allow {
		field := fmt.Sprintf("network.allow[%d]", i)
		if err := checkHostPort(entry); err != nil {
			c.add(field, "%v", err)
			continue
		}
		if seen[entry] {
			c.add(field, "%q listed twice", entry)
			continue
		}
		seen[entry] = true
		out = append(out, entry)
	}
	sort.Strings(out)
	return out
}

// checkHostPort accepts host:port where host is a lower-case DNS name or an
// IP address (IPv6 in brackets) and port is 1..65535.
func checkHostPort(s string) error {
	if strings.Contains(s, "*") {
		return fmt.Errorf("%q: wildcards are not allowed; list each host:port", s)
	}
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		return fmt.Errorf("%q: want host:port", s)
	}
	p, err := strconv.Atoi(port)
	if err != nil || p < 1 || p > 65535 || port != strconv.Itoa(p) {
		return fmt.Errorf("%q: port must be a number from 1 to 65535", s)
	}
	if ip := net.ParseIP(host); ip != nil {
		if strings.Contains(host, ":") != strings.HasPrefix(s, "[") {
			return fmt.Errorf("%q: want host:port", s)
		}
		return nil
	}
	if strings.ContainsAny(host, "[]%") {
		return fmt.Errorf("%q: invalid IP address", s)
	}
	if len(host) == 0 || len(host) > 253 {
		return fmt.Errorf("%q: host must be a DNS name or an IP address", s)
	}
	for _, label := range strings.Split(host, ".") {
		if len(label) > 63 || !reDNSLabel.MatchString(label) {
			return fmt.Errorf("%q: host must be a lower-case DNS name or an IP address", s)
		}
	}
	return nil
}

func (c *checker) auth(m *Manifest, raw *rawAuth) {
	if raw == nil {
		raw = &rawAuth{}
	}
	m.Auth.Mode = raw.Mode
	switch m.Auth.Mode {
	case "":
		m.Auth.Mode = AuthNone
	case AuthNone, AuthOnBehalfOfUser, AuthService:
	default:
		c.oneOf("auth.mode", raw.Mode, AuthNone, AuthOnBehalfOfUser, AuthService)
	}
	seen := map[string]bool{}
	for i, s := range raw.Scopes {
		field := fmt.Sprintf("auth.scopes[%d]", i)
		switch {
		case !reScope.MatchString(s) || len(s) > 128:
			c.add(field, "want resource:action in lower case, e.g. docs:read (got %q)", s)
		case seen[s]:
			c.add(field, "%q listed twice", s)
		default:
			seen[s] = true
			m.Auth.Scopes = append(m.Auth.Scopes, s)
		}
	}
	sort.Strings(m.Auth.Scopes)
	switch {
	case m.Auth.Mode == AuthOnBehalfOfUser && len(raw.Scopes) == 0:
		c.add("auth.scopes", "mode on_behalf_of_user needs at least one scope")
	case m.Auth.Mode == AuthNone && len(raw.Scopes) > 0:
		c.add("auth.scopes", "scopes need auth mode on_behalf_of_user or service")
	}
}

func (c *checker) approval(m *Manifest, threshold map[string]float64) {
	switch m.Approval {
	case "":
		m.Approval = ApprovalNever
	case ApprovalNever, ApprovalAlways, ApprovalRequiredAbove:
	default:
		c.oneOf("approval", m.Approval, ApprovalNever, ApprovalAlways, ApprovalRequiredAbove)
	}
	if m.Approval == ApprovalRequiredAbove && len(threshold) == 0 {
		c.add("approval_threshold", "required with approval required_above: map argument names to the value above which approval is needed")
	}
	if m.Approval != ApprovalRequiredAbove && threshold != nil {
		c.add("approval_threshold", "only used with approval required_above (approval is %q)", m.Approval)
	}
	if m.Approval == ApprovalRequiredAbove && len(threshold) > 0 {
		props, closed := schemaProperties(m.InputSchema)
		m.ApprovalThreshold = make(map[string]float64, len(threshold))
		for _, k := range slices.Sorted(maps.Keys(threshold)) {
			v := threshold[k]
			field := "approval_threshold." + k
			switch {
			case len(k) > maxThresholdField || !reArgName.MatchString(k):
				c.add(field, "must name a top-level argument")
			case math.IsNaN(v) || v < 0 || v > 1e300:
				c.add(field, "must be a number of at least 0")
			case closed && !props[k]:
				c.add(field, "input_schema does not allow an argument %q, so this threshold could never apply", k)
			default:
				m.ApprovalThreshold[k] = v
			}
		}
	}
	if m.ApprovalGroup != "" && !reGroup.MatchString(m.ApprovalGroup) {
		c.add("approval_group", "must be lower case letters, digits, _, . and -, starting with a letter (got %q)", m.ApprovalGroup)
	}
}

// schemaProperties returns the top-level properties of an object schema and
// whether the schema forbids any other property.
func schemaProperties(schema json.RawMessage) (map[string]bool, bool) {
	var top struct {
		Properties           map[string]json.RawMessage `json:"properties"`
		PatternProperties    json.RawMessage            `json:"patternProperties"`
		AdditionalProperties json.RawMessage            `json:"additionalProperties"`
	}
	if json.Unmarshal(schema, &top) != nil {
		return nil, false
	}
	props := map[string]bool{}
	for k := range top.Properties {
		props[k] = true
	}
	closed := string(top.AdditionalProperties) == "false" && top.PatternProperties == nil
	return props, closed
}

func (c *checker) sandbox(m *Manifest) {
	if !m.UntrustedOutput && m.Tier != 1 && c.node != nil {
		// What a sandboxed program prints is never the platform's text.
		// (Stored manifests of older builds still load: the loop ignores
		// the flag for tiers 2 and 3.)
		c.add("untrusted_output", "only a tier-1 tool (the platform's own code) may declare its output trusted; output of a tier-%d program is untrusted", m.Tier)
	}
	switch m.Filesystem {
	case "", FilesystemNone:
	case FilesystemEphemeral:
		if m.Tier == 1 {
			c.add("filesystem", "ephemeral needs a sandbox (tier 2 or 3); a tier-1 tool runs in-process")
		}
	default:
		c.oneOf("filesystem", m.Filesystem, FilesystemNone, FilesystemEphemeral)
	}
	switch {
	case m.MemoryMB < 0 || m.MemoryMB > maxMemoryMB:
		c.add("memory_mb", "must be between 0 and %d (got %d)", maxMemoryMB, m.MemoryMB)
	case m.MemoryMB > 0 && m.Tier == 1:
		c.add("memory_mb", "cannot be enforced for a tier-1 (in-process) tool")
	}
	switch {
	case m.CPUMS < 0 || m.CPUMS > maxCPUMS:
		c.add("cpu_ms", "must be between 0 and %d (got %d)", maxCPUMS, m.CPUMS)
	case m.CPUMS > 0 && m.Tier == 1:
		c.add("cpu_ms", "cannot be enforced for a tier-1 (in-process) tool")
	}
	if m.Image != "" {
		switch {
		case m.Tier == 1:
			c.add("image", "only tier-2 and tier-3 tools run in an image")
		case len(m.Image) > maxImageLen || !utf8.ValidString(m.Image) || strings.ContainsFunc(m.Image, isSpaceOrControl):
			c.add("image", "must be an image reference without spaces, at most %d bytes", maxImageLen)
		}
	}
}

// mcp checks the binding of a tool to an MCP server's tool.
func (c *checker) mcp(m *Manifest, raw *rawMCP) {
	if raw == nil {
		return
	}
	m.MCP = &MCP{Tool: raw.Tool}
	if !reMCPToolName.MatchString(raw.Tool) {
		c.add("mcp.tool", "must be the server's tool name: 1 to 128 letters, digits, _, - and . (got %q)", raw.Tool)
	}
	if m.Connector == "" {
		c.add("connector", "required for an MCP tool: the connector whose server serves it")
	}
	if m.Tier == 1 {
		c.add("tier", "an MCP tool runs out of process: tier 2 (a sandbox or a remote server behind the egress proxy) or 3")
	}
	if !m.UntrustedOutput {
		c.add("untrusted_output", "an MCP server's output is never the platform's text; it cannot be declared trusted")
	}
	if raw.OutputSchema == nil || raw.OutputSchema.raw == nil {
		return
	}
	if len(raw.OutputSchema.raw) > maxSchemaBytes {
		c.add("mcp.output_schema", "larger than %d bytes", maxSchemaBytes)
		return
	}
	sch, err := compileSchema(raw.OutputSchema.raw)
	if err != nil {
		c.add("mcp.output_schema", "invalid JSON Schema: %s", oneLine(err.Error()))
		return
	}
	m.MCP.OutputSchema, m.MCP.output = raw.OutputSchema.raw, sch
}

func isSpaceOrControl(r rune) bool { return r <= ' ' || r == 0x7f }

// CanonicalJSON returns the manifest as canonical JSON, with every default
// written out, so equal manifests have equal bytes. ManifestFromJSON reads
// it back.
func (m *Manifest) CanonicalJSON() []byte {
	auth := map[string]any{"mode": m.Auth.Mode}
	if auth["mode"] == "" {
		auth["mode"] = AuthNone
	}
	if len(m.Auth.Scopes) > 0 {
		auth["scopes"] = m.Auth.Scopes
	}
	approval := m.Approval
	if approval == "" {
		approval = ApprovalNever
	}
	w := map[string]any{
		"name":             m.Name,
		"tier":             m.Tier,
		"timeout_ms":       m.TimeoutMS,
		"input_schema":     nil,
		"auth":             auth,
		"approval":         approval,
		"side_effects":     m.SideEffects,
		"untrusted_output": m.UntrustedOutput,
		"max_output_bytes": m.MaxOutput(),
	}
	if json.Valid(m.InputSchema) {
		w["input_schema"] = m.InputSchema
	}
	optional := map[string]string{
		"description":    m.Description,
		"connector":      m.Connector,
		"approval_group": m.ApprovalGroup,
		"filesystem":     m.Filesystem,
		"image":          m.Image,
	}
	for k, v := range optional {
		if v != "" {
			w[k] = v
		}
	}
	if len(m.Network.Allow) > 0 {
		w["network"] = map[string]any{"allow": m.Network.Allow}
	}
	if len(m.RateLimits) > 0 {
		rls := make([]string, len(m.RateLimits))
		for i, rl := range m.RateLimits {
			rls[i] = rl.String()
		}
		w["rate_limit"] = rls
	}
	if len(m.ApprovalThreshold) > 0 {
		th := make(map[string]any, len(m.ApprovalThreshold))
		for k, v := range m.ApprovalThreshold {
			if math.IsNaN(v) || math.IsInf(v, 0) {
				th[k] = "invalid" // loading rejects it; never produced by a loaded manifest
				continue
			}
			th[k] = v
		}
		w["approval_threshold"] = th
	}
	if m.MemoryMB != 0 {
		w["memory_mb"] = m.MemoryMB
	}
	if m.CPUMS != 0 {
		w["cpu_ms"] = m.CPUMS
	}
	if m.MCP != nil {
		mw := map[string]any{"tool": m.MCP.Tool}
		if json.Valid(m.MCP.OutputSchema) {
			mw["output_schema"] = m.MCP.OutputSchema
		}
		w["mcp"] = mw
	}
	b, err := jsoncanon.Marshal(w)
	if err != nil {
		// Unreachable: every value above encodes.
		return nil
	}
	return b
}

// Hash returns the sha256 of the manifest's canonical JSON (computed once
// for a manifest from a ManifestCache).
func (m *Manifest) Hash() [32]byte {
	if p := m.pin; p != nil && p.m == m {
		return p.sum
	}
	return sha256.Sum256(m.CanonicalJSON())
}

// Def returns what the model is shown of the tool: its name, description
// and input schema.
func (m *Manifest) Def() (name, description string, schema json.RawMessage) {
	return m.Name, m.Description, slices.Clone(m.InputSchema)
}

// Replayable reports whether a replay may run the tool again: only tools
// without side effects are.
func (m *Manifest) Replayable() bool { return m.SideEffects == SideEffectsNone }

// MaxOutput is the largest output, in bytes, the tool may return.
func (m *Manifest) MaxOutput() int {
	if m.MaxOutputBytes <= 0 {
		return DefaultMaxOutputBytes
	}
	return m.MaxOutputBytes
}

// Timeout is the longest one call of the tool may run.
func (m *Manifest) Timeout() time.Duration {
	return time.Duration(m.TimeoutMS) * time.Millisecond
}
