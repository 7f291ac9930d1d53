// Package tool defines tool manifests (the enforced contract of a tool: tier,
// timeout, input schema, network, auth, rate limit, approval, side effects,
// trust of its output), their validation at load time, and the runtime shapes
// of a call to a tier-1 Go function.
package tool

import (
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"sort"
)

// Side-effect classes.
const (
	SideEffectsNone     = "none"
	SideEffectsInternal = "internal"
	SideEffectsExternal = "external"
)

// Call is one invocation of a tool as the broker hands it to an executor.
type Call struct {
	Tool string
	// Args are the validated arguments, canonical JSON.
	Args json.RawMessage
	// IdempotencyKey is run_id:step:index. Tools with side effects must
	// return the original result when they see a key again.
	IdempotencyKey string
	RunID          string
	Tenant         string
	// User is the invoking user: the tool acts on their behalf only.
	User string
	// Agent names the agent version acting for the user (name@version).
	Agent string
	// Credential, when the broker attached one, is scoped to this call.
	// It never enters the model's context or the log.
	Credential string
	// Bindings are the run's argument bindings; the broker checks them
	// again when the call runs.
	Bindings map[string]string
	// Handles reads the content behind blob handles ("blob:<sha256>") that
	// this run has shown the model (nil outside a run). A handle the run
	// never produced is refused, whatever blob the store holds.
	Handles HandleReader
}

// HandleReader reads a run's own blob handles.
type HandleReader interface {
	ReadHandle(ctx context.Context, handle string, limit int64) ([]byte, error)
}

// Result is what a tool returned. A failed tool is a Result with IsError set,
// which the model sees; a Go error from a Func means the platform failed.
type Result struct {
	Output  json.RawMessage
	IsError bool
}

// ErrorResult builds an error result the model can read.
func ErrorResult(format string, args ...any) Result {
	b, _ := json.Marshal(map[string]string{"error": fmt.Sprintf(format, args...)})
	return Result{Output: b, IsError: true}
}

// JSONResult builds a successful result from a value.
func JSONResult(v any) (Result, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return Result{}, err
	}
	return Result{Output: b}, nil
}

// Func is a tier-1 tool: an in-process Go function written and reviewed by the
// platform team. It must honour ctx cancellation and the idempotency key.
type Func func(ctx context.Context, call Call) (Result, error)

// Catalog maps tier-1 tool names to their functions. Build it in one explicit
// place (see package catalog); libraries register nothing on their own.
//
// The catalog also lists the manifests the platform team reviewed (Review):
// a granted tool whose manifest is not among them is treated as a source of
// untrusted text (its description reaches the model; so does its output).
// A catalog is built before it is used and then only read.
type Catalog struct {
	funcs    map[string]Func
	reviewed map[[32]byte]string // manifest hash -> tool name
}

// NewCatalog returns an empty catalog.
func NewCatalog() *Catalog {
	return &Catalog{funcs: map[string]Func{}, reviewed: map[[32]byte]string{}}
}

// Review records manifests as reviewed by the platform team, by their hash:
// the same tool with any other description, schema or flag is not
// reviewed. One name may have several reviewed manifests (two examples
// each ship a run_python of their own); each is reviewed as it is.
func (c *Catalog) Review(ms ...*Manifest) error {
	for _, m := range ms {
		if m == nil || m.Name == "" {
			return fmt.Errorf("tool catalog: review of a manifest without a name")
		}
		c.reviewed[m.Hash()] = m.Name
	}
	return nil
}

// ReviewFiles reviews every manifest in the named files of fsys: the
// manifests a tool provider compiled into this build ships with its
// functions (an example's tools.yaml). The same names with other text are
// not reviewed.
func (c *Catalog) ReviewFiles(fsys fs.FS, names ...string) error {
	for _, name := range names {
		data, err := fs.ReadFile(fsys, name)
		if err != nil {
			return fmt.Errorf("tool catalog: %w", err)
		}
		ms, err := ParseManifests(name, data)
		if err != nil {
			return err
		}
		if err := c.Review(ms...); err != nil {
			return err
		}
	}
	return nil
}

// Reviewed reports whether m is, byte for byte, a manifest the platform
// reviewed.
func (c *Catalog) Reviewed(m *Manifest) bool {
	name, ok := c.reviewed[m.Hash()]
	return ok && name == m.Name
}

// Register adds fn under name; a duplicate name is an error.
func (c *Catalog) Register(name string, fn Func) error {
	if name == "" || fn == nil {
		return fmt.Errorf("tool catalog: empty name or nil function")
	}
	if _, dup := c.funcs[name]; dup {
		return fmt.Errorf("tool catalog: %q registered twice", name)
	}
	c.funcs[name] = fn
	return nil
}

// Lookup returns the function registered under name.
func (c *Catalog) Lookup(name string) (Func, bool) {
	fn, ok := c.funcs[name]
	return fn, ok
}

// Names lists registered tools in order.
func (c *Catalog) Names() []string {
	out := make([]string, 0, len(c.funcs))
	for n := range c.funcs {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}
