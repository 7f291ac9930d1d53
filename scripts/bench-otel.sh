#!/usr/bin/env bash
# Measures what the live OpenTelemetry export costs a run, per step, in one
# benchmark run: export off, and on against a collector that is up (the
# real Collector of scripts/setup-otelcol.sh when it is built, else an OTLP
# endpoint answering 200), down (nothing listening) and slow (answering
# after 2 s, past the batch timeout). Prints a benchstat table: ms/step,
# and the spans lost per run (dropped or failed, re-exportable from the log).
#
# Usage: scripts/bench-otel.sh            COUNT=10 BENCHTIME=50x scripts/bench-otel.sh
set -euo pipefail
cd "$(dirname "$0")/.."
TOOLS="${AGENTPLANE_TOOLS:-$HOME/.cache/agentplane-tools}"
export PATH="$TOOLS/bin:$PATH"
if ! command -v benchstat >/dev/null; then
  GOBIN="$TOOLS/bin" go install golang.org/x/perf/cmd/benchstat@v0.0.0-20260908200009-22c9c6c9d4da
fi
if [ -x "$TOOLS/bin/otelcol-agentplane" ]; then
  export AGENTPLANE_OTELCOL="$TOOLS/bin/otelcol-agentplane"
fi
COUNT="${COUNT:-6}"
BENCHTIME="${BENCHTIME:-20x}"
raw="$(mktemp)"
trap 'rm -f "$raw"' EXIT
echo "running BenchmarkStepOverhead ($COUNT samples of $BENCHTIME runs of 10 steps each)..." >&2
go test -run '^$' -bench 'StepOverhead' -benchtime "$BENCHTIME" -count "$COUNT" -timeout 30m ./trace/otelexport/ | tee "$raw" >&2
benchstat -col /.name "$raw" 2>/dev/null || benchstat "$raw"
