package eval

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"

	"github.com/agentplane/agentplane/tool"
)

// tinyWorld is a minimal world for the package's internal tests: one tool,
// put {key, value}, with external side effects, idempotent by the call's
// key, and one kind of record, "puts". Its fixture is {owner: NAME}, which
// gives $owner.
type tinyWorld struct{}

type tinyFixture struct{ owner string }

func (f tinyFixture) Vars() map[string]string { return map[string]string{"owner": f.owner} }

func (tinyWorld) Name() string                 { return "tiny" }
func (tinyWorld) Tools() []string              { return []string{"put"} }
func (tinyWorld) Variables() []string          { return []string{"owner"} }
func (tinyWorld) Records() map[string][]string { return map[string][]string{"puts": {"key", "value"}} }

func (tinyWorld) Fixture(raw json.RawMessage, _ string) (Fixture, error) {
	if raw == nil {
		return tinyFixture{}, nil
	}
	var f struct {
		Owner string `json:"owner"`
	}
	if err := json.Unmarshal(raw, &f); err != nil {
		return nil, err
	}
	if f.Owner == "" {
		return nil, FieldErrorf("owner", "required")
	}
	return tinyFixture{f.Owner}, nil
}

func (tinyWorld) Open(context.Context, string, Fixture) (Env, error) {
	return &tinyEnv{byKey: map[string]map[string]any{}}, nil
}

type tinyEnv struct {
	mu    sync.Mutex
	byKey map[string]map[string]any
	runOf map[string]string
}

func (e *tinyEnv) Register(c *tool.Catalog) error {
	return c.Register("put", func(_ context.Context, call tool.Call) (tool.Result, error) {
		var a struct {
			Key   string      `json:"key"`
			Value json.Number `json:"value"`
		}
		if err := json.Unmarshal(call.Args, &a); err != nil || a.Key == "" {
			return tool.Result{IsError: true, Output: json.RawMessage(`{"error":"want key and value"}`)}, nil
		}
		v, err := a.Value.Int64()
		if err != nil || v < 0 {
			return tool.Result{IsError: true, Output: json.RawMessage(`{"error":"value must be a whole number"}`)}, nil
		}
		e.mu.Lock()
		defer e.mu.Unlock()
		if e.runOf == nil {
			e.runOf = map[string]string{}
		}
		if _, seen := e.byKey[call.IdempotencyKey]; !seen {
			e.byKey[call.IdempotencyKey] = map[string]any{"key": a.Key, "value": a.Value}
			e.runOf[call.IdempotencyKey] = call.RunID
		}
		return tool.Result{Output: json.RawMessage(fmt.Sprintf(`{"stored":%q}`, a.Key))}, nil
	})
}

func (e *tinyEnv) Records(_ context.Context, runID string) (map[string][]map[string]any, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := map[string][]map[string]any{"puts": {}}
	for k, r := range e.byKey {
		if e.runOf[k] == runID {
			out["puts"] = append(out["puts"], r)
		}
	}
	return out, nil
}

func (e *tinyEnv) Close() error { return nil }

const tinyTools = `name: put
description: Store a value under a key.
connector: tiny
tier: 1
timeout_ms: 1000
input_schema:
  type: object
  properties: {key: {type: string}, value: {type: integer}}
  required: [key, value]
auth: {mode: on_behalf_of_user, scopes: ["tiny:write"]}
side_effects: external
`
