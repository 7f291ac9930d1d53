#!/usr/bin/env bash
# Measures the sandbox executors (needs root, bubblewrap and runsc: run
# scripts/test.sh once first) and prints the table of docs/PERFORMANCE.md.
set -euo pipefail
cd "$(dirname "$0")/.."
TOOLS="${AGENTPLANE_TOOLS:-$HOME/.cache/agentplane-tools}"
export PATH="$TOOLS/bin:$PATH" AGENTPLANE_RUNSC="${AGENTPLANE_RUNSC:-$TOOLS/bin/runsc}"
N="${BENCH_N:-20}"
out="$(go test -run XXX -bench 'ColdStart|WarmAcquire|PythonPrint|RuntimeStart' -benchtime "${N}x" -timeout 30m ./sandbox/)"
echo "$out" >&2
echo
echo "| benchmark | executor | p50 ms | p90 ms | mean ms | first call p50 ms |"
echo "| --- | --- | ---: | ---: | ---: | ---: |"
echo "$out" | awk '/^Benchmark/ {
  split($1, parts, "/"); name = parts[1]; sub(/^Benchmark/, "", name); ex = parts[2]; sub(/-[0-9]+$/, "", ex)
  p50 = ""; p90 = ""; first = ""
  for (i = 3; i <= NF; i++) { if ($(i+1) == "p50-ms") p50 = $i; if ($(i+1) == "p90-ms") p90 = $i; if ($(i+1) == "first-call-p50-ms") first = $i; if ($(i+1) == "ns/op") mean = $i / 1e6 }
  printf "| %s | %s | %s | %s | %.1f | %s |\n", name, ex, p50, p90, mean, first }'

# The card-dispute analysis step end to end (30,011 transactions by handle
# into run_python on gVisor; the warm pool serves the sandbox).
an="$(go test -run XXX -bench AnalysisStep -benchtime "$(( N < 10 ? N : 10 ))x" -timeout 30m ./internal/platform/)"
echo "$an" >&2
echo
echo "| analysis step | run p50 ms | sandbox provision p50 ms | sandbox wall p50 ms | bytes into the sandbox |"
echo "| --- | ---: | ---: | ---: | ---: |"
echo "$an" | awk '/^BenchmarkAnalysisStep/ {
  for (i = 3; i <= NF; i++) { if ($(i+1) == "run-p50-ms") r = $i; if ($(i+1) == "provision-p50-ms") p = $i; if ($(i+1) == "sandbox-wall-p50-ms") w = $i; if ($(i+1) == "bytes-in") by = $i }
  printf "| 30,011 transactions, gVisor | %s | %s | %s | %s |\n", r, p, w, by }'
