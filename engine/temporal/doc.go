// Package temporal is the Temporal engine under construction: the parts of a
// durable-execution engine on Temporal (go.temporal.io/sdk) that do not
// depend on the final shape of agentplane's engine seam, each tested against
// a real `temporal server start-dev` (package temporaltest).
//
// Built so far:
//   - Config and ParseURL: the engine URL
//     temporal://HOST:PORT?namespace=N&task_queue=Q; Dial connects within a
//     bound and checks the namespace;
//   - BlobCodec: a payload codec that keeps payloads over a threshold in
//     agentplane's blob store and leaves a small authenticated reference in
//     the history (Temporal refuses a payload over 2 MB);
//   - ActivityPolicy, ModelCallPolicy, ToolCallPolicy: timeouts and retry
//     policies; RetryableError, NonRetryableError and HTTPError classify
//     activity errors (429 and 5xx are retried with backoff, a 400 is not);
//   - Heartbeat: keeps a long activity alive and lets it see cancellation;
//   - ContinueAsNewPolicy: when a long workflow starts a fresh run with a
//     compact state, well below Temporal's history warning.
//
// The agent loop is not wired in yet: docs/design/temporal.md describes how
// it will map onto Temporal and what remains.
package temporal

import "log/slog"

// discardLogger is the SDK's logger when the caller gives none.
var discardLogger = slog.New(slog.DiscardHandler)
