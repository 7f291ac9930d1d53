package platform

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/agentplane/agentplane/engine"
	"github.com/agentplane/agentplane/engine/temporal"
	"github.com/agentplane/agentplane/loop"
	"github.com/agentplane/agentplane/store"
)

// EngineHelp says what an engine spec may be (flags and errors).
const EngineHelp = temporal.URLForm + " for a Temporal server (API key from " + temporal.APIKeyEnv + " or api_key_file, never in the URL), or empty for the embedded engine on the run store"

// openEngine builds the engine o.Engine names over the loop and the
// platform's store es: the embedded engine by default, or the Temporal
// engine on the server a temporal:// URL names. On Temporal every payload
// over temporal.DefaultBlobThreshold travels by reference into es's blobs
// (temporalCodec), authenticated under a key derived from blobKey.
func (p *Platform) openEngine(ctx context.Context, o Options, es store.Store, blobKey []byte) error {
	if o.Engine == "" {
		emb, err := engine.NewEmbedded(engine.Options{Store: es, Workflow: p.Loop.Workflow, Activities: p.Loop.Activities(),
			LeaseTTL: o.LeaseTTL, Clock: o.Clock, Logger: o.Logger})
		if err != nil {
			return err
		}
		p.Embedded, p.Engine = emb, emb
		return nil
	}
	if !strings.HasPrefix(o.Engine, "temporal://") {
		return fmt.Errorf("engine %q: want %s", o.Engine, EngineHelp)
	}
	cfg, err := temporal.ParseURL(o.Engine)
	if err != nil {
		return err
	}
	codec, err := temporalCodec(es, blobKey)
	if err != nil {
		return err
	}
	cl, err := temporal.Dial(ctx, cfg, temporal.DialOptions{DataConverter: codec.NewDataConverter(), Getenv: o.Getenv})
	if err != nil {
		return err
	}
	e, err := temporal.New(temporal.Options{Client: cl, TaskQueue: cfg.TaskQueue, Store: es, Workflow: p.Loop.Workflow,
		Activities: p.Loop.Activities(), Clock: o.Clock, Logger: o.Logger, Policy: loopPolicy})
	if err != nil {
		cl.Close()
		return err
	}
	p.Engine, p.engineClose = e, cl.Close
	return nil
}

// temporalCodec is the codec that keeps the Temporal engine's large
// payloads in the platform's blob store (scope temporal.PayloadTenant, sealed
// like every blob) under a key derived from the blob master key: every
// process of a deployment holds that key already (AGENTPLANE_BLOB_KEY or
// DATA/blob.key), so they all accept each other's references, and a
// reference planted in the Temporal history by anyone without it is
// refused.
func temporalCodec(es store.Store, blobKey []byte) (*temporal.BlobCodec, error) {
	if blobKey == nil {
		return nil, fmt.Errorf("the Temporal engine authenticates payload references with a key derived from the blob master key, and this process has none (a PostgreSQL store keeping its key in the database): set %s to the same 32 bytes (base64 or hex) in every process of the deployment", BlobKeyEnv)
	}
	key, err := temporal.CodecKey(blobKey)
	if err != nil {
		return nil, err
	}
	return temporal.NewBlobCodec(temporal.BlobCodecOptions{Blobs: es.Blobs(temporal.PayloadTenant), Key: key})
}

// loopPolicy is how long each of the loop's activities may take on
// Temporal and how it is retried: a model call as ModelCallPolicy, a tool
// execution as ToolCallPolicy under the longest timeout a manifest may set
// (with heartbeats), the rest (decisions, records, teardown) the default.
func loopPolicy(name string) temporal.ActivityPolicy {
	switch name {
	case loop.ActModelCall, loop.ActCompact:
		return temporal.ModelCallPolicy()
	case loop.ActToolExecute:
		return temporal.ToolCallPolicy(10 * time.Minute)
	}
	return temporal.ActivityPolicy{}
}
