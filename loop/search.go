package loop

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/agentplane/agentplane/broker"
	"github.com/agentplane/agentplane/engine"
	"github.com/agentplane/agentplane/model"
	"github.com/agentplane/agentplane/tool"
	"github.com/agentplane/agentplane/toolsearch"
	"github.com/agentplane/agentplane/trace"
)

// Tool search: an agent granted a connector with search: true starts with
// its always-on tools plus the built-in search_tools (the last tool of
// run_started's definitions, so part of the cached prefix). A search is
// three events: its tool_attempt (decided by the loop, not the broker: it
// reads only the run's pinned catalogue and changes nothing), a
// tools_loaded event made by ActToolSearch (the ranking, and the tools it
// adds after the prefix), and its tool_result (the names, for the model).
// A re-run of the loop reads tools_loaded back; a replay loads the
// original's hits instead of searching again.

// ActToolSearch is the activity that ranks the run's searchable tools.
const ActToolSearch = "loop.tool_search"

// SearchInput is the input of ActToolSearch.
type SearchInput struct {
	Run    engine.RunInfo `json:"run"`
	CallID string         `json:"call_id"`
	Index  int            `json:"index"`
	Query  string         `json:"query"`
	Limit  int            `json:"limit"`
	// Searchable is the run's pinned catalogue (run_started); Offered the
	// names of the tools the model already has.
	Searchable []trace.ToolRef `json:"searchable"`
	Offered    []string        `json:"offered,omitempty"`
	// Recorded, in a replay, is the original's search: its hits are
	// loaded (those still searchable), not searched for again.
	Recorded *trace.ToolsLoaded `json:"recorded,omitempty"`
}

// Search ranks the searchable tools the run's user may use (reviewed now,
// every scope held) and returns the tools_loaded record.
func (a *Activities) Search(ctx context.Context, in SearchInput) (trace.ToolsLoaded, error) {
	out := trace.ToolsLoaded{CallID: in.CallID, Index: in.Index, Query: in.Query, Limit: in.Limit, Hits: []trace.SearchHit{}, Loaded: []trace.ToolRef{}}
	byName := make(map[string]trace.ToolRef, len(in.Searchable))
	ms := make([]*tool.Manifest, len(in.Searchable))
	for i, ref := range in.Searchable {
		m, err := a.manifest(ctx, ref.Hash)
		if err != nil {
			return out, err
		}
		ms[i], byName[ref.Name] = m, ref
	}
	permits, err := a.o.Broker.Permits(ctx, in.Run.Tenant, in.Run.User, ms)
	if err != nil {
		return out, engine.Retryable(err)
	}
	usable := map[string]bool{}
	for i, ref := range in.Searchable {
		// An unreviewed description is never offered, nor returned.
		usable[ref.Name] = ref.Reviewed && a.o.Broker.Reviewed(ms[i]) && permits[i]
	}
	if r := in.Recorded; r != nil {
		out.Replayed = trace.ReplayedRecorded
		for _, h := range r.Hits {
			if usable[h.Name] && byName[h.Name].Hash == refHash(r, h.Name, byName[h.Name].Hash) {
				out.Hits = append(out.Hits, h)
			} else {
				out.Dropped = append(out.Dropped, h.Name)
			}
		}
	} else {
		ix := a.indexes.get(in.Searchable, ms)
		for _, h := range ix.Search(in.Query, in.Limit, func(name string) bool { return usable[name] }) {
			out.Hits = append(out.Hits, trace.SearchHit{Name: h.Name, Score: h.Score})
		}
	}
	var defs []model.ToolDef
	for _, h := range out.Hits {
		if slices.Contains(in.Offered, h.Name) {
			continue
		}
		ref := byName[h.Name]
		m, err := a.manifest(ctx, ref.Hash)
		if err != nil {
			return out, err
		}
		name, desc, schema := m.Def()
		defs = append(defs, model.ToolDef{Name: name, Description: desc, InputSchema: schema})
		out.Loaded = append(out.Loaded, ref)
	}
	if len(defs) > 0 {
		data, err := json.Marshal(defs)
		if err != nil {
			return out, err
		}
		if out.Defs, err = a.content(ctx, in.Run.Tenant, data, displayPreview); err != nil {
			return out, err
		}
	}
	return out, nil
}

// refHash is the manifest hash the recorded search loaded for name (the
// current one when it was already offered then and so not loaded).
func refHash(r *trace.ToolsLoaded, name, current string) string {
	for _, ref := range r.Loaded {
		if ref.Name == name {
			return ref.Hash
		}
	}
	return current
}

// searchCall handles one call of search_tools.
func (l *Loop) searchCall(ctx context.Context, st *state, step, index int, call model.Part, args []byte, argsHash string) (string, error) {
	run := st.run
	key := engine.IdempotencyKey(run.ID, step, index)
	q, perr := toolsearch.ParseArgs(args)
	in := DecideInput{Run: run, Step: step, Index: index, CallID: call.ToolUseID, Tool: toolsearch.Name, Args: args, ArgsHash: argsHash, Key: key,
		Decided: &trace.Decision{Allowed: true, Control: ControlBuiltin, Reason: "the platform's tool search"}}
	if perr != nil {
		in.Decided = &trace.Decision{Control: broker.ControlSchema, Reason: perr.Error()}
	}
	aev, err := st.env.Execute(ctx, engine.Call{Activity: ActToolDecide, Event: trace.EvToolAttempt, Step: step, Durability: engine.Buffered, Input: in})
	if err != nil {
		return "", err
	}
	var attempt trace.ToolAttempt
	if err := json.Unmarshal(aev.Payload, &attempt); err != nil {
		return "", fmt.Errorf("tool_attempt payload: %w", err)
	}
	if !attempt.Decision.Allowed {
		rev, err := st.env.Execute(ctx, engine.Call{Activity: ActToolExecute, Event: trace.EvToolResult, Step: step, Durability: engine.Buffered,
			Input: ExecuteInput{Run: run, Step: step, Index: index, CallID: call.ToolUseID, Tool: toolsearch.Name, Args: args, Key: key, Decision: attempt.Decision}})
		if err != nil {
			return "", err
		}
		return l.afterSearch(ctx, st, step, rev, attempt.ArgsHash)
	}
	sin := SearchInput{Run: run, CallID: call.ToolUseID, Index: index, Query: q.Query, Limit: q.Limit, Searchable: st.started.Searchable, Offered: st.offeredNames()}
	if rs := st.replay; rs != nil && (step < rs.info.FromStep || rs.info.Mode == trace.ReplayRecorded) {
		if orig := rs.searches[[2]int{step, index}]; orig != nil && rs.calls[[2]int{step, index}] != nil && rs.calls[[2]int{step, index}].attempt.ArgsHash == attempt.ArgsHash {
			sin.Recorded = orig
		}
	}
	lev, err := st.env.Execute(ctx, engine.Call{Activity: ActToolSearch, Event: trace.EvToolsLoaded, Step: step, Durability: engine.Buffered, Input: sin})
	if err != nil {
		return "", err
	}
	var loaded trace.ToolsLoaded
	if err := json.Unmarshal(lev.Payload, &loaded); err != nil {
		return "", fmt.Errorf("tools_loaded payload: %w", err)
	}
	if err := st.add(lev); err != nil {
		return "", err
	}
	for _, ref := range loaded.Loaded {
		m, err := l.loadManifest(ctx, st.env, ref)
		if err != nil {
			return "", err
		}
		st.tools[m.Name], st.reviewed[m.Name], st.toolHash[m.Name] = m, ref.Reviewed, ref.Hash
		if !ref.Reviewed {
			// Never the case for a search of this loop; a log that says so
			// is honoured.
			if err := l.taint(ctx, st, step, trace.Taint{Source: trace.TaintToolDescription, Tool: m.Name, Seq: lev.Seq,
				Detail: "the description of " + m.Name + ", loaded by a search"}); err != nil {
				return "", err
			}
		}
	}
	res := searchResult(call.ToolUseID, index, &loaded)
	rev, err := st.env.Record(ctx, trace.EvToolResult, step, engine.Buffered, res)
	if err != nil {
		return "", err
	}
	return l.afterSearch(ctx, st, step, rev, attempt.ArgsHash)
}

// afterSearch adds a search's result to the transcript and applies the
// loop-detection rules to it, as for any call.
func (l *Loop) afterSearch(ctx context.Context, st *state, step int, rev engine.Event, argsHash string) (string, error) {
	if err := st.add(rev); err != nil {
		return "", err
	}
	var res trace.ToolResult
	if err := json.Unmarshal(rev.Payload, &res); err != nil {
		return "", fmt.Errorf("tool_result payload: %w", err)
	}
	st.calls[toolsearch.Name]++
	return l.detectLoop(ctx, st, step, toolsearch.Name, argsHash, &res)
}

// searchResult is what the model reads after a search: tool names only
// (validated identifiers); the descriptions are in its tools.
func searchResult(callID string, index int, tl *trace.ToolsLoaded) trace.ToolResult {
	added := []string{}
	for _, ref := range tl.Loaded {
		added = append(added, ref.Name)
	}
	had := []string{}
	for _, h := range tl.Hits {
		if !slices.Contains(added, h.Name) {
			had = append(had, h.Name)
		}
	}
	note := "These tools are now in your tools; call them directly."
	if len(tl.Hits) == 0 {
		note = "No tool you may use matches. Try other words, or go on with the tools you have."
	}
	out, _ := json.Marshal(map[string]any{"added": added, "already_available": had, "note": note})
	sum := sha256.Sum256(out)
	r := trace.ToolResult{CallID: callID, Index: index, Tool: toolsearch.Name, Status: trace.StatusOK, Replayed: tl.Replayed,
		Output: trace.Content{Text: string(out), Size: int64(len(out))}, Bytes: int64(len(out)), ResultHash: hex.EncodeToString(sum[:])}
	return r
}

// ControlBuiltin is the control of a call the loop itself answers
// (search_tools).
const ControlBuiltin = "builtin"

// offeredNames lists the tools the model has now, sorted.
func (st *state) offeredNames() []string {
	out := make([]string, 0, len(st.tools))
	for n := range st.tools {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

// searchable reports whether name is a tool a search could load but none
// has yet.
func (st *state) searchable(name string) bool {
	if _, offered := st.tools[name]; offered {
		return false
	}
	return slices.ContainsFunc(st.started.Searchable, func(r trace.ToolRef) bool { return r.Name == name })
}

// searchDefs checks an agent's search settings at the start of a run and
// returns the refs of its searchable tools: reviewed, not already offered,
// sorted by name.
func (a *Activities) searchDefs(ag *Agent) ([]trace.ToolRef, error) {
	offered := map[string]bool{}
	for _, m := range ag.Tools {
		if m.Name == toolsearch.Name {
			return nil, engine.NonRetryable(fmt.Errorf("agent %s@%d has a tool named %s, the built-in tool search's name", ag.Name, ag.Version, toolsearch.Name))
		}
		offered[m.Name] = true
	}
	var refs []trace.ToolRef
	for _, m := range ag.Searchable {
		if offered[m.Name] || m.Name == toolsearch.Name || !a.o.Broker.Reviewed(m) {
			continue
		}
		offered[m.Name] = true
		h := m.Hash()
		refs = append(refs, trace.ToolRef{Name: m.Name, Hash: hex.EncodeToString(h[:]), Reviewed: true})
	}
	slices.SortFunc(refs, func(x, y trace.ToolRef) int { return strings.Compare(x.Name, y.Name) })
	return refs, nil
}

// searchIndexes keeps the indexes of recent catalogues, by the hash of
// their pinned refs: every run of an agent version searches the same one,
// and building it costs more than a search.
type searchIndexes struct {
	mu sync.Mutex
	m  map[[32]byte]*toolsearch.Index
}

const maxIndexes = 32

func (c *searchIndexes) get(refs []trace.ToolRef, ms []*tool.Manifest) *toolsearch.Index {
	h := sha256.New()
	for _, r := range refs {
		h.Write([]byte(r.Name + "\x00" + r.Hash + "\x00"))
	}
	key := [32]byte(h.Sum(nil))
	c.mu.Lock()
	ix := c.m[key]
	c.mu.Unlock()
	if ix != nil {
		return ix
	}
	docs := make([]toolsearch.Doc, len(ms))
	for i, m := range ms {
		name, desc, schema := m.Def()
		docs[i] = toolsearch.DocOf(name, desc, schema)
	}
	ix = toolsearch.New(docs)
	c.mu.Lock()
	if c.m == nil || len(c.m) >= maxIndexes {
		c.m = map[[32]byte]*toolsearch.Index{}
	}
	c.m[key] = ix
	c.mu.Unlock()
	return ix
}
