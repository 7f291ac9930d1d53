package temporal

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
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
)

// Config is where the Temporal engine finds its server: parsed from an
// engine URL, temporal://HOST:PORT?namespace=N&task_queue=Q.
type Config struct {
	// HostPort is the frontend's gRPC address (host:port, IPv6 in brackets).
	HostPort string
	// Namespace the runs live in.
	Namespace string
	// TaskQueue the agentplane workers poll.
	TaskQueue string
}

// String returns the engine URL that parses back to c.
func (c Config) String() string {
	q := url.Values{"namespace": {c.Namespace}, "task_queue": {c.TaskQueue}}
	return (&url.URL{Scheme: "temporal", Host: c.HostPort, RawQuery: q.Encode()}).String()
}

// ParseURL parses an engine URL of the form
// temporal://HOST:PORT?namespace=N&task_queue=Q. The port is required; the
// namespace defaults to "default" and the task queue to "agentplane" when
// absent, but a parameter given empty, given twice, or unknown is an error,
// as is anything else in the URL (user info, a path, a fragment).
func ParseURL(raw string) (Config, error) {
	fail := func(format string, args ...any) (Config, error) {
		return Config{}, fmt.Errorf("temporal engine URL: "+format+" (want temporal://HOST:PORT?namespace=N&task_queue=Q)", args...)
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
		var dst *string
		switch k {
		case "namespace":
			dst = &c.Namespace
		case "task_queue":
			dst = &c.TaskQueue
		default:
			return fail("unknown parameter %q (known: namespace, task_queue)", k)
		}
		if len(vs) != 1 {
			return fail("parameter %s given %d times", k, len(vs))
		}
		if err := validName(vs[0]); err != nil {
			return fail("%s: %v", k, err)
		}
		*dst = vs[0]
	}
	return c, nil
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
}

// Dial connects to the server c names and checks that its namespace exists,
// within a bounded time. The caller closes the client.
func Dial(ctx context.Context, c Config, o DialOptions) (client.Client, error) {
	if o.Timeout <= 0 {
		o.Timeout = DefaultDialTimeout
	}
	if o.Logger == nil {
		o.Logger = tlog.NewStructuredLogger(discardLogger)
	}
	ctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	cl, err := client.DialContext(ctx, client.Options{
		HostPort:      c.HostPort,
		Namespace:     c.Namespace,
		DataConverter: o.DataConverter,
		Logger:        o.Logger,
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
