package platform_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	commonpb "go.temporal.io/api/common/v1"
	"go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/sdk/client"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/agentplane/agentplane/agent"
	"github.com/agentplane/agentplane/engine"
	"github.com/agentplane/agentplane/engine/temporal"
	"github.com/agentplane/agentplane/engine/temporal/temporaltest"
	"github.com/agentplane/agentplane/internal/platform"
	"github.com/agentplane/agentplane/model/scripted"
	"github.com/agentplane/agentplane/runs"
	"github.com/agentplane/agentplane/store"
	"github.com/agentplane/agentplane/tool"
	"github.com/agentplane/agentplane/trace"
)

// The workload that has ended other agent frameworks' Temporal workflows
// at the 50 MB history limit: 100 model calls over a conversation that
// grows by about 2,000 tokens a call to about 200,000.
const (
	histCalls     = 100
	histPageBytes = 8000 // about 2,000 tokens of varied text a tool result
)

const histModels = `
providers:
  scripted: {type: scripted}
aliases:
  - {name: m, provider: scripted, model_id: scripted-hist, price: {currency: USD, input_per_mtok: 1, output_per_mtok: 1}}
`

const histTools = `
name: read_page
description: Returns one page of a long document.
tier: 1
timeout_ms: 10000
input_schema:
  type: object
  additionalProperties: false
  required: [page]
  properties: {page: {type: integer}}
side_effects: none
untrusted_output: false
`

const histAgent = `
agent: reader
version: 1
model: {alias: m}
instructions: Read every page of the document, then answer.
tools:
  - tool: read_page
budgets: {max_steps: 200, max_input_tokens: 100000000, max_cost_usd: 1000, max_wall_clock: 2h}
`

// histScript calls read_page calls-1 times, then answers.
func histScript(calls int) string {
	var b strings.Builder
	b.WriteString("turns:\n")
	for i := 1; i < calls; i++ {
		fmt.Fprintf(&b, "  - tool_calls: [{name: read_page, args: {page: %d}}]\n", i)
	}
	b.WriteString("  - text: I have read the whole document.\n")
	return b.String()
}

// page returns about n bytes of words drawn at random (seeded by the page
// number, so both engines see the same text): nothing repeats enough to
// compress away.
func page(seed, n int) string {
	r := rand.New(rand.NewPCG(uint64(seed), 0x5eed))
	var b strings.Builder
	for b.Len() < n {
		w := 2 + r.IntN(9)
		for range w {
			b.WriteByte(byte('a' + r.IntN(26)))
		}
		b.WriteByte(' ')
	}
	return b.String()
}

// histPlatform opens a platform on engineURL ("" embedded) with the
// read_page tool, the reader agent and script, counting what the engine
// puts into each blob scope. Its blob master key comes from the
// environment it is given, as a deployment's would.
func histPlatform(t *testing.T, engineURL, script string, tools map[string]tool.Func, toolsYAML string) (*platform.Platform, *blobCounter) {
	t.Helper()
	ctx := context.Background()
	dir := t.TempDir()
	cfg, err := platform.ParseModelsConfig("models.yaml", []byte(histModels))
	if err != nil {
		t.Fatal(err)
	}
	s, err := scripted.Parse("turns.yaml", []byte(script))
	if err != nil {
		t.Fatal(err)
	}
	counter := &blobCounter{put: map[string]int64{}}
	p, err := platform.Open(ctx, platform.Options{DataDir: dir, Engine: engineURL, Models: cfg, Script: s,
		Directory: platform.StaticDirectory{"t1": {"alice": nil}},
		WrapStore: func(st store.Store) store.Store { counter.Store = st; return counter },
		Getenv: func(k string) string {
			if k == platform.BlobKeyEnv {
				return "7f3c1b2a9d8e4f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8"
			}
			return ""
		}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	for name, fn := range tools {
		if err := p.Catalog.Register(name, fn); err != nil {
			t.Fatal(err)
		}
	}
	ms, err := tool.ParseManifests("tools.yaml", []byte(toolsYAML))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.ApplyManifests(ctx, ms); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "agent.yaml")
	if err := os.WriteFile(path, []byte(histAgent), 0o600); err != nil {
		t.Fatal(err)
	}
	d, err := agent.LoadDefinitionFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Registry.Apply(ctx, d); err != nil {
		t.Fatal(err)
	}
	return p, counter
}

// blobCounter counts the bytes put into each blob scope through the
// engine's store (the Temporal payload codec writes there).
type blobCounter struct {
	store.Store
	mu  sync.Mutex
	put map[string]int64
}

func (c *blobCounter) Blobs(tenant string) store.BlobStore {
	return countedBlobs{BlobStore: c.Store.Blobs(tenant), c: c, tenant: tenant}
}

func (c *blobCounter) putBytes(tenant string) int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.put[tenant]
}

type countedBlobs struct {
	store.BlobStore
	c      *blobCounter
	tenant string
}

func (b countedBlobs) PutBlob(ctx context.Context, data []byte) ([32]byte, error) {
	b.c.mu.Lock()
	b.c.put[b.tenant] += int64(len(data))
	b.c.mu.Unlock()
	return b.BlobStore.PutBlob(ctx, data)
}

// workReader starts the reader on p, works it until idle (bounded) and
// returns the run and its log.
func workReader(t *testing.T, p *platform.Platform) (*store.Run, []store.Event) {
	t.Helper()
	ctx := context.Background()
	r, err := p.Runs.Start(ctx, runs.StartRequest{Agent: "reader@1", Task: "Read the document.", Tenant: "t1", User: "alice", Mode: "async"})
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	if err := p.Engine.Work(wctx, engine.WorkOptions{Concurrency: 1, UntilIdle: true}); err != nil || wctx.Err() != nil {
		t.Fatalf("work: %v %v", err, wctx.Err())
	}
	run, err := p.Store.GetRun(ctx, r.ID)
	if err != nil {
		t.Fatal(err)
	}
	evs, err := p.Store.Events(ctx, r.ID, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	return run, evs
}

// logFigures are what agentplane keeps of a run.
type logFigures struct {
	events                 int
	logBytes               int64 // the events' rows: payloads, hashes, keys
	blobs                  int
	blobBytes              int64 // the blobs the log names
	modelCalls             int
	promptBytes, maxPrompt int64 // what the model calls sent, in all and at most
	promptHashes           []string
}

func figuresOf(t *testing.T, p *platform.Platform, run *store.Run, evs []store.Event) logFigures {
	t.Helper()
	var f logFigures
	f.events = len(evs)
	for i := range evs {
		ev := &evs[i]
		f.logBytes += int64(len(ev.RunID)+len(ev.Type)+len(ev.Payload)) + 8 + 8 + 8 + 32 + 32 // seq, step, time, hashes
		if ev.Type != trace.EvModelCall {
			continue
		}
		var mc trace.ModelCall
		if err := json.Unmarshal(ev.Payload, &mc); err != nil {
			t.Fatal(err)
		}
		f.modelCalls++
		f.promptBytes += mc.PromptBytes
		f.maxPrompt = max(f.maxPrompt, mc.PromptBytes)
		f.promptHashes = append(f.promptHashes, mc.PromptHash)
	}
	sums, err := trace.RunBlobs(evs)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range sums {
		n, err := p.Store.Blobs(run.Tenant).BlobSize(context.Background(), s)
		if err != nil {
			t.Fatalf("blob %x of the log: %v", s, err)
		}
		f.blobs++
		f.blobBytes += n
	}
	return f
}

// temporalFigures are what the Temporal server keeps of a run: every
// Temporal run of its workflow id's continue-as-new chain.
type temporalFigures struct {
	runs                int
	events, maxEvents   int
	bytes, maxBytes     int
	largestPayloadBytes int
}

func historyFigures(t *testing.T, c client.Client, workflowID string) temporalFigures {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	d, err := c.DescribeWorkflow(ctx, workflowID, "")
	if err != nil {
		t.Fatal(err)
	}
	var f temporalFigures
	for runID := d.RawResponse.GetWorkflowExecutionInfo().GetFirstRunId(); runID != ""; {
		it := c.GetWorkflowHistory(ctx, workflowID, runID, false, enums.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
		h := &historypb.History{}
		next := ""
		for it.HasNext() {
			ev, err := it.Next()
			if err != nil {
				t.Fatalf("history of %s/%s: %v", workflowID, runID, err)
			}
			h.Events = append(h.Events, ev)
			if a := ev.GetWorkflowExecutionContinuedAsNewEventAttributes(); a != nil {
				next = a.GetNewExecutionRunId()
			}
			f.largestPayloadBytes = max(f.largestPayloadBytes, largestPayload(ev.ProtoReflect()))
		}
		n := proto.Size(h)
		f.runs++
		f.events += len(h.Events)
		f.maxEvents = max(f.maxEvents, len(h.Events))
		f.bytes += n
		f.maxBytes = max(f.maxBytes, n)
		runID = next
	}
	return f
}

// largestPayload is the encoded size of the largest payload anywhere in m
// (activity inputs and results, signals, the workflow's input and result,
// memos and headers).
func largestPayload(m protoreflect.Message) int {
	n := 0
	walkPayloads(m, func(p *commonpb.Payload) { n = max(n, proto.Size(p)) })
	return n
}

// walkPayloads calls fn on every payload in m.
func walkPayloads(m protoreflect.Message, fn func(*commonpb.Payload)) {
	if p, ok := m.Interface().(*commonpb.Payload); ok {
		fn(p)
		return
	}
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		switch {
		case fd.IsList() && fd.Message() != nil:
			for i := range v.List().Len() {
				walkPayloads(v.List().Get(i).Message(), fn)
			}
		case fd.IsMap() && fd.MapValue().Message() != nil:
			v.Map().Range(func(_ protoreflect.MapKey, mv protoreflect.Value) bool {
				walkPayloads(mv.Message(), fn)
				return true
			})
		case !fd.IsList() && !fd.IsMap() && fd.Message() != nil:
			walkPayloads(v.Message(), fn)
		}
		return true
	})
}

// TestHistorySize100Calls runs the real agent loop on the Temporal engine
// (the platform as `serve --engine temporal://...` builds it, payload codec
// included) over the workload above: 99 tool results of about 8 KB of
// varied text and 100 model calls, the last prompt about 800 KB (200,000
// tokens), about 40 MB of prompts in all. The Temporal history stays tiny,
// because activities carry the transcript's hashes and deltas, not the
// transcript: were the prompts inside activity inputs, the history would
// hold over 40 MB. agentplane's own storage is linear in the conversation
// (each tool result stored once), not quadratic. The same run on the
// embedded engine writes the same log: the same events and prompt hashes.
func TestHistorySize100Calls(t *testing.T) {
	t.Parallel() // each on its own dev server; mostly waiting on it
	if testing.Short() {
		t.Skip("100 model calls over a 200,000-token conversation on a dev server: minutes under -race")
	}
	srv := temporaltest.Start(t, temporaltest.Options{})
	script := histScript(histCalls)
	tools := map[string]tool.Func{"read_page": func(_ context.Context, c tool.Call) (tool.Result, error) {
		var a struct{ Page int }
		if err := json.Unmarshal(c.Args, &a); err != nil {
			return tool.ErrorResult("bad arguments: %v", err), nil
		}
		return tool.JSONResult(map[string]any{"page": a.Page, "text": page(a.Page, histPageBytes)})
	}}

	begun := time.Now()
	p, counter := histPlatform(t, "temporal://"+srv.HostPort+"?namespace="+temporaltest.Namespace+"&task_queue=hist", script, tools, histTools)
	run, evs := workReader(t, p)
	elapsed := time.Since(begun)
	if run.Status != store.StatusCompleted {
		t.Fatalf("run on Temporal: %s (%s) after %d events, %d bytes of codec payloads", run.Status, run.Result, len(evs), counter.putBytes(temporal.PayloadTenant))
	}
	got := figuresOf(t, p, run, evs)
	hist := historyFigures(t, srv.Client(t, client.Options{}), run.ID)
	codecBytes := counter.putBytes(temporal.PayloadTenant)

	if got.modelCalls != histCalls {
		t.Fatalf("%d model calls, want %d", got.modelCalls, histCalls)
	}
	// The workload is what it claims: about 200,000 tokens at the end,
	// over 40 MB of prompts sent in all.
	if got.maxPrompt < 4*190_000 || got.promptBytes < 40_000_000 {
		t.Fatalf("the workload is smaller than claimed: last prompt %d bytes, %d in all", got.maxPrompt, got.promptBytes)
	}
	// Temporal: far below the warning (10,240 events, 10 MB) and the
	// 50 MB limit; a transcript inside activity inputs would be > 40 MB.
	if hist.maxEvents >= temporal.HistoryWarnEvents/4 || hist.bytes >= 2<<20 || hist.largestPayloadBytes > temporal.DefaultBlobThreshold+1024 {
		t.Errorf("Temporal history: %+v; want under %d events a run, 2 MB in all, no payload over the codec's threshold",
			hist, temporal.HistoryWarnEvents/4)
	}
	// agentplane: linear in the conversation (each tool result kept
	// once), far from the prompts' quadratic total.
	if total := got.logBytes + got.blobBytes + codecBytes; total >= 3*got.maxPrompt {
		t.Errorf("agentplane keeps %d bytes (log %d, blobs %d, codec %d) for a final conversation of %d: not linear",
			total, got.logBytes, got.blobBytes, codecBytes, got.maxPrompt)
	}
	if err := trace.CheckLog(context.Background(), p.Store.Blobs(run.Tenant), evs); err != nil {
		t.Fatalf("the log does not verify: %v", err)
	}
	t.Logf("Temporal, %d model calls in %v: last prompt %d bytes (~%d tokens), prompts %d bytes in all",
		got.modelCalls, elapsed.Round(time.Second), got.maxPrompt, got.maxPrompt/4, got.promptBytes)
	t.Logf("agentplane: %d events, log %d bytes, %d blobs of %d bytes, codec payloads %d bytes",
		got.events, got.logBytes, got.blobs, got.blobBytes, codecBytes)
	t.Logf("Temporal history: %d runs, %d events (largest run %d), %d bytes (largest run %d), largest payload %d bytes",
		hist.runs, hist.events, hist.maxEvents, hist.bytes, hist.maxBytes, hist.largestPayloadBytes)

	// The same run on the embedded engine: the same log.
	ep, _ := histPlatform(t, "", script, tools, histTools)
	erun, eevs := workReader(t, ep)
	if erun.Status != store.StatusCompleted {
		t.Fatalf("run on the embedded engine: %s (%s)", erun.Status, erun.Result)
	}
	emb := figuresOf(t, ep, erun, eevs)
	if emb.events != got.events || strings.Join(emb.promptHashes, ",") != strings.Join(got.promptHashes, ",") || emb.blobBytes != got.blobBytes {
		t.Errorf("embedded engine: %d events, blobs %d bytes; Temporal: %d events, blobs %d bytes; prompt hashes equal: %v",
			emb.events, emb.blobBytes, got.events, got.blobBytes, strings.Join(emb.promptHashes, ",") == strings.Join(got.promptHashes, ","))
	}
	t.Logf("embedded: %d events, log %d bytes, blobs %d bytes; prompt hashes equal", emb.events, emb.logBytes, emb.blobBytes)
}

// bigTools is read_page returning a whole archive at once.
const bigTools = `
name: read_page
description: Returns a whole archive.
tier: 1
timeout_ms: 60000
input_schema: {type: object}
side_effects: none
untrusted_output: false
`

// TestLargePayloadsOnTemporal: on the platform's Temporal engine a tool
// result of about 3 MB (over Temporal's 2 MB payload cap) and a model reply
// of about 900 KB (a model's text is capped at 1 MiB) complete the run and
// the history stays small: the tool result goes to the blob store inside
// its activity and reaches the log by hash, the reply reaches the workflow
// by reference through the payload codec, under the key the platform
// derives from the blob master key. A codec under another deployment's key
// refuses the history's references.
func TestLargePayloadsOnTemporal(t *testing.T) {
	t.Parallel() // each on its own dev server; mostly waiting on it
	if testing.Short() {
		t.Skip("megabyte payloads through a dev server: minutes under -race on a loaded machine")
	}
	const big, replyBytes = 3 << 20, 900_000
	srv := temporaltest.Start(t, temporaltest.Options{})
	reply := strings.TrimSpace(page(7, replyBytes))
	script := "turns:\n  - tool_calls: [{name: read_page, args: {}}]\n  - text: \"" + reply + "\"\n"
	tools := map[string]tool.Func{"read_page": func(context.Context, tool.Call) (tool.Result, error) {
		return tool.JSONResult(map[string]string{"archive": page(8, big)})
	}}
	p, counter := histPlatform(t, "temporal://"+srv.HostPort+"?namespace="+temporaltest.Namespace+"&task_queue=big", script, tools, bigTools)
	run, evs := workReader(t, p)
	if run.Status != store.StatusCompleted || run.Result != reply {
		t.Fatalf("run: %s, result of %d bytes (%.2000s); want completed with the %d-byte reply", run.Status, len(run.Result), run.Result, len(reply))
	}
	if err := trace.CheckLog(context.Background(), p.Store.Blobs(run.Tenant), evs); err != nil {
		t.Fatalf("the log does not verify: %v", err)
	}
	c := srv.Client(t, client.Options{})
	hist := historyFigures(t, c, run.ID)
	codecBytes := counter.putBytes(temporal.PayloadTenant)
	if hist.bytes >= 256<<10 || hist.largestPayloadBytes > temporal.DefaultBlobThreshold+1024 || codecBytes < replyBytes {
		t.Fatalf("history %+v with %d bytes moved by the codec; want under 256 KiB, no payload over the threshold, the reply by reference", hist, codecBytes)
	}
	t.Logf("3 MB tool result and 900 KB reply: history %d events, %d bytes, largest payload %d bytes; codec stored %d bytes",
		hist.events, hist.bytes, hist.largestPayloadBytes, codecBytes)

	// The history's references name nothing to a codec under another key.
	ref := firstReference(t, c, run.ID)
	if ref == nil {
		t.Fatal("no payload of the history went by reference")
	}
	other, err := temporal.CodecKey([]byte(strings.Repeat("k", 32)))
	if err != nil {
		t.Fatal(err)
	}
	forged, err := temporal.NewBlobCodec(temporal.BlobCodecOptions{Blobs: p.Store.Blobs(temporal.PayloadTenant), Key: other})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := forged.Decode([]*commonpb.Payload{ref}); err == nil || !strings.Contains(err.Error(), "bad MAC") {
		t.Fatalf("a codec under another key decoded the reference: %v", err)
	}
}

// firstReference returns the first payload of the workflow's history that
// the blob codec replaced by a reference.
func firstReference(t *testing.T, c client.Client, workflowID string) *commonpb.Payload {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	it := c.GetWorkflowHistory(ctx, workflowID, "", false, enums.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	var found *commonpb.Payload
	for it.HasNext() && found == nil {
		ev, err := it.Next()
		if err != nil {
			t.Fatal(err)
		}
		walkPayloads(ev.ProtoReflect(), func(p *commonpb.Payload) {
			if found == nil && strings.HasPrefix(string(p.GetMetadata()["encoding"]), "agentplane/blob-ref") {
				found = p
			}
		})
	}
	return found
}
