// Package temporal is the Temporal engine (go.temporal.io/sdk): Engine
// implements engine.Engine, so the API, the CLI, evals and replay run the
// agent loop on a Temporal cluster unchanged.
//
// A run is one workflow execution whose id is the run id. The workflow runs
// the engine's engine.Workflow over an engine.Env on the workflow.Context:
// each Execute is a Temporal activity registered under the engine
// activity's name, which runs the effect and appends its result to
// agentplane's event log; durable records are appended by an activity
// before the workflow goes on; signals (approvals, messages, cancel) are
// stored, then signalled, and recorded in the append that consumes them;
// waits block on a selector over the signals, a timer and wake-ups on the
// engine's clock. agentplane's log stays the record trace, streams and
// replay read. A long run continues as new at a step boundary, carrying
// only the log's head, and the new run re-runs the loop over the log.
//
// Also here: Config and ParseURL (URLForm: temporal://HOST:PORT?namespace=N&task_queue=Q, TLS and API key parameters)
// and Dial; BlobCodec, a payload codec that keeps large payloads in
// agentplane's blob store; ActivityPolicy and the error classes
// (RetryableError, NonRetryableError, HTTPError); Heartbeat;
// ContinueAsNewPolicy. docs/design/temporal.md describes the mapping and
// what is tested against a real dev server (package temporaltest).
package temporal

import "log/slog"

// discardLogger is the SDK's logger when the caller gives none.
var discardLogger = slog.New(slog.DiscardHandler)
