#!/usr/bin/env bash
# Runs the run API's loopback benchmarks, prints a table, and writes it into
# docs/PERFORMANCE.md between the "api" markers:
#   - RunStart: request to 202 (async) and to the first streamed event
#     (stream), 200 runs one at a time while earlier runs execute;
#   - SSEFanout: events per second delivered to 200 concurrent SSE clients
#     (one live run, 200 live runs, one recorded run);
#   - Fairness: tenant B's interactive start delay and background share while
#     tenant A's 1,000 background runs fill the workers;
#   - WaitingRuns: goroutines and memory with 10,000 runs waiting for
#     approvals in one server process (AGENTPLANE_WAITING_RUNS to change).
#
# Usage: scripts/bench-api.sh            COUNT=3 scripts/bench-api.sh
set -euo pipefail
cd "$(dirname "$0")/.."
TOOLS="${AGENTPLANE_TOOLS:-$HOME/.cache/agentplane-tools}"
export PATH="$TOOLS/bin:$PATH"
if ! command -v benchstat >/dev/null; then
  GOBIN="$TOOLS/bin" go install golang.org/x/perf/cmd/benchstat@v0.0.0-20260908200009-22c9c6c9d4da
fi
COUNT="${COUNT:-3}"
raw="$(mktemp)"
trap 'rm -f "$raw"' EXIT

echo "running the API benchmarks ($COUNT samples; the 10,000 waiting runs take minutes)..." >&2
go test -run '^$' -bench 'RunStart|SSEFanout|Fairness' -benchtime 1x -count "$COUNT" -timeout 60m ./api/ >>"$raw"
go test -run '^$' -bench 'WaitingRuns' -benchtime 1x -count 1 -timeout 60m ./api/ >>"$raw"

table="$(benchstat -format csv "$raw" 2>/dev/null | awk -F, '
  /^pkg:/ { next }
  /^,[^,]*,CI$/ { metric = $2; next }
  /^,/ || /^geomean/ || /^goos|^goarch|^cpu/ || NF < 2 { next }
  { name = $1; sub(/-[0-9]+$/, "", name); ci = $3; if (ci == "∞" || ci == "") ci = "n/a"
    if (metric == "sec/op" || metric == "ns/op") next
    printf "| %s | %s | %.4g | %s |\n", name, metric, $2, ci }')"

cpu="$(grep -m1 '^cpu:' "$raw" | sed 's/^cpu: *//; s/ *$//')"
load="$(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || echo unknown)"
section="$(printf '%s\n' \
  "<!-- api:begin (written by scripts/bench-api.sh; do not edit by hand) -->" \
  "Measured $(date -u +%Y-%m-%d) on: $cpu, $(nproc) cores, load average $load at the end; go test -bench -benchtime 1x, $COUNT samples (WaitingRuns: 1), medians from benchstat." \
  "" \
  "| benchmark | unit | median | 95% CI |" \
  "|---|---|---|---|" \
  "$table" \
  "<!-- api:end -->")"
printf '%s\n' "$section"

. scripts/lib/perfdoc.sh
write_perf_section api "$section"
