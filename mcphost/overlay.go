package mcphost

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/agentplane/agentplane/tool"
)

// maxOverlayBytes bounds a connector's overlay file.
const maxOverlayBytes = 1 << 20

// Overlay is what the platform adds to one server tool: everything of a
// tool manifest (package tool) that the server cannot be trusted to say
// (tier, timeout, side effects, auth mode and scopes, approval rule, rate
// limit, risk), keyed by the server's tool name. The description and the
// schemas are the server's, from the reviewed snapshot; an overlay may not
// set them, nor the connector.
type Overlay struct {
	// Tool is the server's name of the tool.
	Tool string
	// Risk is the reviewer's risk label (low, medium, high).
	Risk string
	// fields are the manifest fields, as JSON values.
	fields map[string]any
}

// Risk labels.
var riskLabels = []string{"low", "medium", "high"}

// setByServer are the manifest fields that come from the snapshot.
var setByServer = []string{"description", "input_schema", "connector", "mcp"}

// ParseOverlays reads a connector's overlay file: YAML documents, each a
// tool manifest without description, input_schema and connector, plus
// `tool:` (the server's name; `name:` defaults to it with - and . turned
// into _) and `risk:`.
func ParseOverlays(data []byte) (map[string]*Overlay, error) {
	if len(data) > maxOverlayBytes {
		return nil, fmt.Errorf("overlay file larger than %d bytes", maxOverlayBytes)
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	out := map[string]*Overlay{}
	var errs []error
	for doc := 1; ; doc++ {
		var m map[string]any
		err := dec.Decode(&m)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("overlay document %d: %v", doc, strings.TrimPrefix(err.Error(), "yaml: "))
		}
		if m == nil {
			continue
		}
		o := &Overlay{fields: m}
		o.Tool, _ = m["tool"].(string)
		o.Risk, _ = m["risk"].(string)
		delete(m, "tool")
		delete(m, "risk")
		switch {
		case !reMCPToolName(o.Tool):
			errs = append(errs, fmt.Errorf("overlay document %d: tool: required, the server's tool name", doc))
			continue
		case out[o.Tool] != nil:
			errs = append(errs, fmt.Errorf("overlay document %d: tool %q has two overlays", doc, o.Tool))
			continue
		case !contains(riskLabels, o.Risk):
			errs = append(errs, fmt.Errorf("overlay of %s: risk: required, one of %s (got %q)", o.Tool, strings.Join(riskLabels, ", "), o.Risk))
		}
		for _, k := range setByServer {
			if _, ok := m[k]; ok {
				errs = append(errs, fmt.Errorf("overlay of %s: %s comes from the server's reviewed snapshot and cannot be set here", o.Tool, k))
			}
		}
		if _, ok := m["name"]; !ok {
			m["name"] = strings.NewReplacer("-", "_", ".", "_").Replace(strings.ToLower(o.Tool))
		}
		out[o.Tool] = o
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return out, nil
}

// Manifests builds the tool manifests of a reviewed snapshot: each tool's
// overlay with the server's description and schemas, validated as any
// manifest is (package tool). Every listed tool needs an overlay and every
// overlay a listed tool; all problems are reported. The manifests are in
// the snapshot's order.
func Manifests(connector string, snap *Snapshot, overlays map[string]*Overlay) ([]*tool.Manifest, error) {
	var (
		errs []error
		out  []*tool.Manifest
	)
	for _, def := range snap.Tools {
		o := overlays[def.Name]
		if o == nil {
			errs = append(errs, fmt.Errorf("tool %q has no manifest overlay (tier, side_effects, auth, approval, rate limit, risk): write one before it can be reviewed", def.Name))
			continue
		}
		m, err := manifest(connector, def, o)
		if err != nil {
			errs = append(errs, fmt.Errorf("tool %q: %w", def.Name, err))
			continue
		}
		out = append(out, m)
	}
	for name := range overlays {
		if _, ok := snap.Get(name); !ok {
			errs = append(errs, fmt.Errorf("the overlay of tool %q names a tool the server does not list", name))
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	if _, err := tool.NewSet(out...); err != nil {
		return nil, err
	}
	return out, nil
}

func manifest(connector string, def ToolDef, o *Overlay) (*tool.Manifest, error) {
	w := make(map[string]any, len(o.fields)+4)
	for k, v := range o.fields {
		w[k] = v
	}
	w["connector"] = connector
	w["description"] = def.Description
	w["input_schema"] = def.InputSchema
	mcp := map[string]any{"tool": def.Name}
	if def.OutputSchema != nil {
		mcp["output_schema"] = def.OutputSchema
	}
	w["mcp"] = mcp
	data, err := json.Marshal(w)
	if err != nil {
		return nil, fmt.Errorf("overlay: %w", err)
	}
	return tool.ManifestFromJSON(data)
}
