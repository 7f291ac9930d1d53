package temporal

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	tlog "go.temporal.io/sdk/log"
)

// Defaults for what an engine URL leaves out.
const (
	DefaultNamespace = "default"
	DefaultTaskQueue = "agentplane"
	// DefaultDialTimeout bounds Dial when DialOptions.Timeout is zero.
	DefaultDialTimeout = 10 * time.Second
	// maxNameLen bounds a namespace or task-queue name.
	maxNameLen = 200
	// maxURLLen bounds the whole engine URL.
	maxURLLen = 2048
	// maxPathLen bounds a file path given in the URL.
	maxPathLen = 1024
	// maxPEMBytes bounds a CA, certificate or key file.
	maxPEMBytes = 1 << 20
	// maxAPIKeyBytes bounds an API key (Temporal Cloud's are JWTs of a
	// few hundred bytes to a few KB).
	maxAPIKeyBytes = 16 << 10
)

// APIKeyEnv names the environment variable an API key for the Temporal
// server is read from, when the engine URL names no api_key_file. A key is
// never taken from the URL itself: URLs end up in logs and process lists.
const APIKeyEnv = "AGENTPLANE_TEMPORAL_API_KEY"

// URLForm is the engine URL's form, for help texts and errors.
const URLForm = "temporal://HOST:PORT?namespace=N&task_queue=Q[&tls=1&ca_file=PATH&server_name=NAME&cert_file=PATH&key_file=PATH&api_key_file=PATH]"

// Config is where the Temporal engine finds its server and how it proves
// who it is: parsed from an engine URL (URLForm).
type Config struct {
	// HostPort is the frontend's gRPC address (host:port, IPv6 in brackets).
	HostPort string
	// Namespace the runs live in.
	Namespace string
	// TaskQueue the agentplane workers poll.
	TaskQueue string
	// TLS connects over TLS, verifying the server's certificate against
	// the system roots, or CAFile's when set.
	TLS bool
	// CAFile is a PEM file of the CA certificates the server's certificate
	// must chain to (instead of the system roots). Requires TLS.
	CAFile string
	// ServerName is the name the server's certificate must hold, when it
	// is not the host of HostPort. Requires TLS.
	ServerName string
	// CertFile and KeyFile are the client's PEM certificate and key for
	// mutual TLS, both or neither. Require TLS.
	CertFile, KeyFile string
	// APIKeyFile holds the API key sent as a bearer token (else APIKeyEnv
	// is read at Dial). Requires TLS.
	APIKeyFile string
}

// String returns the engine URL that parses back to c.
func (c Config) String() string {
	q := url.Values{"namespace": {c.Namespace}, "task_queue": {c.TaskQueue}}
	if c.TLS {
		q.Set("tls", "1")
	}
	for k, v := range map[string]string{"ca_file": c.CAFile, "server_name": c.ServerName, "cert_file": c.CertFile, "key_file": c.KeyFile, "api_key_file": c.APIKeyFile} {
		if v != "" {
			q.Set(k, v)
		}
	}
	return (&url.URL{Scheme: "temporal", Host: c.HostPort, RawQuery: q.Encode()}).String()
}

// ParseURL parses an engine URL (URLForm). The port is required; the
// namespace defaults to "default" and the task queue to "agentplane" when
// absent, but a parameter given empty, given twice, or unknown is an error,
// as is anything else in the URL (user info, a path, a fragment). TLS is
// off unless tls=1; ca_file, server_name, cert_file, key_file and
// api_key_file require it, and cert_file and key_file go together. An API
// key in the URL (api_key=) is refused: name a file, or set APIKeyEnv.
func ParseURL(raw string) (Config, error) {
	fail := func(format string, args ...any) (Config, error) {
		return Config{}, fmt.Errorf("temporal engine URL: "+format+" (want "+URLForm+")", args...)
	}
	if len(raw) > maxURLLen {
		return fail("%d bytes, longer than %d", len(raw), maxURLLen)
	}
	u, err := url.Parse(raw)
	if err != nil {
		return fail("%v", errors.Unwrap(err))
	}
	if u.Scheme != "temporal" {
		return fail("scheme %q, not temporal", u.Scheme)
	}
	if u.Opaque != "" {
		return fail("no // before the host")
	}
	if u.User != nil {
		return fail("user info is not supported")
	}
	if u.Path != "" && u.Path != "/" {
		return fail("unexpected path %q", u.Path)
	}
	if u.Fragment != "" || strings.Contains(raw, "#") {
		return fail("unexpected fragment")
	}
	host, port := u.Hostname(), u.Port()
	if host == "" {
		return fail("no host")
	}
	if port == "" {
		return fail("no port in %q", u.Host)
	}
	n, err := strconv.Atoi(port)
	if err != nil || n < 1 || n > 65535 || port[0] == '0' {
		return fail("port %q is not a number from 1 to 65535", port)
	}
	if strings.ContainsAny(host, "%") {
		return fail("zoned IPv6 addresses are not supported")
	}
	q, err := url.ParseQuery(u.RawQuery)
	if err != nil {
		return fail("query: %v", err)
	}
	c := Config{HostPort: net.JoinHostPort(host, port), Namespace: DefaultNamespace, TaskQueue: DefaultTaskQueue}
	for k, vs := range q {
		if k == "api_key" || k == "apikey" || k == "api-key" {
			return fail("an API key in the URL would be logged: put it in a file named by api_key_file=PATH, or in %s", APIKeyEnv)
		}
		if len(vs) != 1 {
			return fail("parameter %s given %d times", k, len(vs))
		}
		v := vs[0]
		var dst *string
		switch k {
		case "namespace", "task_queue":
			if err := validName(v); err != nil {
				return fail("%s: %v", k, err)
			}
			dst = &c.Namespace
			if k == "task_queue" {
				dst = &c.TaskQueue
			}
		case "tls":
			switch v {
			case "1", "true":
				c.TLS = true
			case "0", "false":
			default:
				return fail("tls=%q: want 1 or 0", v)
			}
			continue
		case "server_name":
			if !validDNSName(v) {
				return fail("server_name %q: want the DNS name the server's certificate holds", v)
			}
			dst = &c.ServerName
		case "ca_file", "cert_file", "key_file", "api_key_file":
			if err := validPath(v); err != nil {
				return fail("%s: %v", k, err)
			}
			dst = map[string]*string{"ca_file": &c.CAFile, "cert_file": &c.CertFile, "key_file": &c.KeyFile, "api_key_file": &c.APIKeyFile}[k]
		default:
			return fail("unknown parameter %q (known: namespace, task_queue, tls, ca_file, server_name, cert_file, key_file, api_key_file)", k)
		}
		*dst = v
	}
	if !c.TLS {
		for k, v := range map[string]string{"ca_file": c.CAFile, "server_name": c.ServerName, "cert_file": c.CertFile, "key_file": c.KeyFile, "api_key_file": c.APIKeyFile} {
			if v != "" {
				return fail("%s needs TLS: add tls=1", k)
			}
		}
	}
	if (c.CertFile == "") != (c.KeyFile == "") {
		return fail("cert_file and key_file go together (mutual TLS needs both)")
	}
	return c, nil
}

// validDNSName accepts a host name: 1 to 253 letters, digits, '.' and '-'.
func validDNSName(s string) bool {
	if s == "" || len(s) > 253 {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '-') {
			return false
		}
	}
	return true
}

// validPath accepts a file path given in the URL: absolute (a relative
// path would depend on each process's working directory), bounded, no
// control characters.
func validPath(p string) error {
	switch {
	case p == "":
		return errors.New("empty")
	case len(p) > maxPathLen:
		return fmt.Errorf("%d bytes, more than %d", len(p), maxPathLen)
	case !strings.HasPrefix(p, "/"):
		return fmt.Errorf("%q is not an absolute path", p)
	}
	for _, r := range p {
		if r < 0x20 || r == 0x7f {
			return fmt.Errorf("%q holds a control character", p)
		}
	}
	return nil
}

// tlsConfig is the TLS configuration c asks for: nil without TLS; else at
// least TLS 1.2, the server verified against CAFile's certificates (or the
// system roots) under ServerName (or the host), and the client's
// certificate when CertFile is set. Files are read now, bounded.
func (c Config) tlsConfig() (*tls.Config, error) {
	if !c.TLS {
		return nil, nil
	}
	t := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: c.ServerName}
	if t.ServerName == "" {
		host, _, err := net.SplitHostPort(c.HostPort)
		if err != nil {
			return nil, fmt.Errorf("temporal: %q: %w", c.HostPort, err)
		}
		t.ServerName = host
	}
	if c.CAFile != "" {
		pem, err := readBounded(c.CAFile, maxPEMBytes)
		if err != nil {
			return nil, fmt.Errorf("temporal: ca_file: %w", err)
		}
		t.RootCAs = x509.NewCertPool()
		if !t.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("temporal: ca_file %s holds no PEM certificate; give the CA that signed the server's certificate", c.CAFile)
		}
	}
	if c.CertFile != "" {
		certPEM, err := readBounded(c.CertFile, maxPEMBytes)
		if err != nil {
			return nil, fmt.Errorf("temporal: cert_file: %w", err)
		}
		keyPEM, err := readBounded(c.KeyFile, maxPEMBytes)
		if err != nil {
			return nil, fmt.Errorf("temporal: key_file: %w", err)
		}
		cert, err := tls.X509KeyPair(certPEM, keyPEM)
		if err != nil {
			return nil, fmt.Errorf("temporal: cert_file %s and key_file %s: %w; give a PEM certificate and its private key", c.CertFile, c.KeyFile, err)
		}
		t.Certificates = []tls.Certificate{cert}
	}
	return t, nil
}

// apiKey is the API key c's client sends: api_key_file's contents, else
// APIKeyEnv's value, else none. A key without TLS is refused: it would
// cross the network in the clear.
func (c Config) apiKey(getenv func(string) string) (string, error) {
	if getenv == nil {
		getenv = os.Getenv
	}
	key, from := strings.TrimSpace(getenv(APIKeyEnv)), APIKeyEnv
	if c.APIKeyFile != "" {
		if key != "" {
			return "", fmt.Errorf("temporal: an API key is both in %s and in api_key_file; keep one", APIKeyEnv)
		}
		data, err := readBounded(c.APIKeyFile, maxAPIKeyBytes)
		if err != nil {
			return "", fmt.Errorf("temporal: api_key_file: %w", err)
		}
		key, from = strings.TrimSpace(string(data)), c.APIKeyFile
		if key == "" {
			return "", fmt.Errorf("temporal: api_key_file %s is empty", c.APIKeyFile)
		}
	}
	if key == "" {
		return "", nil
	}
	if len(key) > maxAPIKeyBytes {
		return "", fmt.Errorf("temporal: the API key in %s is over %d bytes", from, maxAPIKeyBytes)
	}
	for _, r := range key {
		if r <= 0x20 || r >= 0x7f {
			return "", fmt.Errorf("temporal: the API key in %s holds a character outside printable ASCII", from)
		}
	}
	if !c.TLS {
		return "", fmt.Errorf("temporal: an API key (from %s) is sent only over TLS: add tls=1 to the engine URL", from)
	}
	return key, nil
}

// readBounded reads a file of at most limit bytes.
func readBounded(path string, limit int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	if int64(len(data)) > limit {
		return nil, fmt.Errorf("%s is over %d bytes", path, limit)
	}
	return data, nil
}

// validName accepts a namespace or task-queue name: 1 to 200 characters of
// letters, digits, '.', '-' and '_', starting with a letter or digit.
func validName(s string) error {
	if s == "" {
		return errors.New("empty")
	}
	if len(s) > maxNameLen {
		return fmt.Errorf("%d characters, more than %d", len(s), maxNameLen)
	}
	for i, r := range s {
		ok := r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || i > 0 && (r == '.' || r == '-' || r == '_')
		if !ok {
			return fmt.Errorf("%q: only letters, digits, '.', '-' and '_' (not first) are allowed", s)
		}
	}
	return nil
}

// DialOptions tune Dial.
type DialOptions struct {
	// Timeout bounds connecting and checking the namespace (default 10 s).
	Timeout time.Duration
	// DataConverter, when set, encodes every payload (see NewBlobCodec).
	DataConverter converter.DataConverter
	// Logger receives the SDK's logs (default: none).
	Logger tlog.Logger
	// Getenv reads APIKeyEnv (default os.Getenv).
	Getenv func(string) string
}

// Dial connects to the server c names (over TLS and with an API key when c
// says so) and checks that its namespace exists, within a bounded time. The
// caller closes the client.
func Dial(ctx context.Context, c Config, o DialOptions) (client.Client, error) {
	tc, err := c.tlsConfig()
	if err != nil {
		return nil, err
	}
	key, err := c.apiKey(o.Getenv)
	if err != nil {
		return nil, err
	}
	var creds client.Credentials
	if key != "" {
		creds = client.NewAPIKeyStaticCredentials(key)
	}
	if o.Timeout <= 0 {
		o.Timeout = DefaultDialTimeout
	}
	if o.Logger == nil {
		o.Logger = tlog.NewStructuredLogger(discardLogger)
	}
	ctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	cl, err := client.DialContext(ctx, client.Options{
		HostPort:          c.HostPort,
		Namespace:         c.Namespace,
		DataConverter:     o.DataConverter,
		Logger:            o.Logger,
		Credentials:       creds,
		ConnectionOptions: client.ConnectionOptions{TLS: tc, TLSDisabled: tc == nil},
	})
	if err != nil {
		return nil, fmt.Errorf("temporal: cannot reach %s within %v: %w; check that a Temporal server listens there (for development: temporal server start-dev)", c.HostPort, o.Timeout, err)
	}
	_, err = cl.WorkflowService().DescribeNamespace(ctx, &workflowservice.DescribeNamespaceRequest{Namespace: c.Namespace})
	if err != nil {
		cl.Close()
		var nf *serviceerror.NamespaceNotFound
		if errors.As(err, &nf) {
			return nil, fmt.Errorf("temporal: namespace %q does not exist on %s; create it (temporal operator namespace create --namespace %s) or name another in the engine URL", c.Namespace, c.HostPort, c.Namespace)
		}
		return nil, fmt.Errorf("temporal: describe namespace %q on %s: %w", c.Namespace, c.HostPort, err)
	}
	return cl, nil
}
