#!/usr/bin/env bash
# Temporal's own cost on this machine, measured against a real dev server
# (package engine/temporal, scripts/setup-temporal.sh builds the CLI):
#   BenchmarkTemporalActivityRoundTrip/sequential  one no-op activity of a
#       sequential chain run by a workflow (the raw round trip a step of the
#       agent loop will pay per activity); p50-ms and p99-ms per activity;
#   BenchmarkTemporalWorkflow/activities=N  a whole workflow of N sequential
#       no-op activities, start to result; p50-ms and p99-ms per workflow,
#       act-ms the mean per activity;
#   BenchmarkTemporalEngineStep  in one run, the raw round trip (mean of a
#       chain of N no-op activities) beside a step of the Temporal engine (N
#       steps of a loop on the seam, each a step boundary and one activity
#       whose result is appended to agentplane's log): raw-ms/activity,
#       engine-ms/step and their ratio step/raw;
#   BenchmarkTemporalLoopStep (package loop)  a step of the REAL agent loop
#       on the Temporal engine (zero-latency scripted model, the no-op tier-1
#       tool echo, the durable SQLite log) interleaved with a raw chain of
#       no-op activities on the same dev server: step-ms, raw-ms per
#       activity, acts/step (the loop's activities a step executes, from the
#       run's history) and ratio = step / (acts/step x raw) (the issue's
#       target: at most 1.5), with where a step's time goes on the server's
#       clock (wft-ms/step, exec-ms/step, sched-ms/step beside raw-*-ms/act).
# Prints a benchstat table (benchstat is built from the Go module proxy into
# the tools cache, like the other tools).
#
# Usage: scripts/bench-temporal.sh   (COUNT=6 samples, the fewest benchstat
#        gives intervals for; ACTIVITIES=300 per round-trip sample;
#        WORKFLOWS=20 per workflow sample; LOOPRUNS=3 runs of 40 steps per
#        loop-step sample; ONLY=loop runs only BenchmarkTemporalLoopStep)
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/setup-temporal.sh >&2

TOOLS="${AGENTPLANE_TOOLS:-$HOME/.cache/agentplane-tools}"
BENCHSTAT_VERSION=v0.0.0-20260908200009-22c9c6c9d4da
if [ ! -x "$TOOLS/bin/benchstat" ] || [ "$(cat "$TOOLS/bin/benchstat.version" 2>/dev/null)" != "$BENCHSTAT_VERSION" ]; then
  printf '\n=== building benchstat into %s (once)\n' "$TOOLS/bin" >&2
  GOBIN="$TOOLS/bin" go install "golang.org/x/perf/cmd/benchstat@$BENCHSTAT_VERSION"
  echo "$BENCHSTAT_VERSION" >"$TOOLS/bin/benchstat.version"
fi

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
count="${COUNT:-6}"
echo "running the Temporal benchmarks ($count samples; load average $(cut -d' ' -f1-3 /proc/loadavg))..." >&2
: >"$tmp/roundtrip.txt"; : >"$tmp/workflow.txt"; : >"$tmp/engine.txt"
if [ "${ONLY:-}" != loop ]; then
  go test -count="$count" -run '^$' -timeout 60m \
    -bench '^BenchmarkTemporalActivityRoundTrip$' -benchtime "${ACTIVITIES:-300}x" ./engine/temporal/ >"$tmp/roundtrip.txt"
  go test -count="$count" -run '^$' -timeout 60m \
    -bench '^BenchmarkTemporalWorkflow$' -benchtime "${WORKFLOWS:-20}x" ./engine/temporal/ >"$tmp/workflow.txt"
  go test -count="$count" -run '^$' -timeout 60m \
    -bench '^BenchmarkTemporalEngineStep$' -benchtime "${STEPS:-200}x" ./engine/temporal/ >"$tmp/engine.txt"
fi
go test -count="$count" -run '^$' -timeout 60m \
  -bench '^BenchmarkTemporalLoopStep$' -benchtime "${LOOPRUNS:-3}x" ./loop/ >"$tmp/loop.txt"
cat "$tmp/roundtrip.txt" "$tmp/workflow.txt" "$tmp/engine.txt" "$tmp/loop.txt" >"$tmp/temporal.txt"
"$TOOLS/bin/benchstat" "$tmp/temporal.txt"
echo
echo "BenchmarkTemporalLoopStep, per sample (load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)):"
grep '^BenchmarkTemporalLoopStep' "$tmp/loop.txt" | tr -s ' \t' ' ' | sed 's/^/  /'
echo
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg); $(nproc) cores"
