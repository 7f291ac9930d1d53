#!/usr/bin/env bash
# Many processes on PostgreSQL, beside the embedded SQLite store, in one run:
#   - loop StepOverhead: the platform's own time per step of one run (p50,
#     p99), and loop AggregateSteps: steps/s with 1, 16 and 64 runs at once,
#     each on the SQLite store and on PostgreSQL;
#   - cmd/agentplane BenchmarkProcesses: card-dispute runs/s through 1 and
#     through 3 `agentplane serve` processes on one PostgreSQL database
#     (AGENTPLANE_BENCH_RUNS runs each, default 150), and their ratio.
# COUNT samples each (default 3); prints the benchstat medians as a table
# and writes it into docs/PERFORMANCE.md between the "processes" markers,
# with the machine's load average (other work on the machine moves every
# figure).
#
# PostgreSQL: AGENTPLANE_TEST_POSTGRES when it is set (a running test
# cluster); otherwise scripts/setup-postgres.sh starts one and it is stopped
# afterwards.
#
# Usage: scripts/bench-processes.sh      COUNT=6 AGENTPLANE_BENCH_RUNS=300 scripts/bench-processes.sh
set -euo pipefail
cd "$(dirname "$0")/.."
TOOLS="${AGENTPLANE_TOOLS:-$HOME/.cache/agentplane-tools}"
export PATH="$TOOLS/bin:$PATH"
if ! command -v benchstat >/dev/null; then
  GOBIN="$TOOLS/bin" go install golang.org/x/perf/cmd/benchstat@v0.0.0-20260908200009-22c9c6c9d4da
fi
raw="$(mktemp)"
stop_pg=
if [ -z "${AGENTPLANE_TEST_POSTGRES:-}" ]; then
  . scripts/setup-postgres.sh
  stop_pg=1
fi
trap 'rm -f "$raw"; if [ -n "$stop_pg" ]; then pg_stop_test_cluster; fi' EXIT
COUNT="${COUNT:-3}"
export AGENTPLANE_TEST_STRICT=1
load_before="$(cut -d' ' -f1-3 /proc/loadavg)"
echo "running the many-process benchmarks ($COUNT samples each; several minutes)..." >&2
go test -run '^$' -bench 'StepOverhead|AggregateSteps' -benchtime 1x -count "$COUNT" ./loop/ >>"$raw"
go test -run '^$' -bench 'Processes' -benchtime 1x -count "$COUNT" -timeout 60m ./cmd/agentplane/ >>"$raw"
load_after="$(cut -d' ' -f1-3 /proc/loadavg)"

rows="$(benchstat -format csv "$raw" 2>/dev/null | awk -F, '
  /^pkg:/ { pkg = $0; sub(/^pkg: github.com\/agentplane\/agentplane\//, "", pkg); next }
  /^,[^,]*,CI$/ { metric = $2; next }
  /^,/ || /^geomean/ || /^goos|^goarch|^cpu/ || NF < 2 { next }
  metric == "sec/op" { next }
  { name = $1; sub(/-[0-9]+$/, "", name); ci = $3; if (ci == "∞" || ci == "") ci = "n/a"
    printf "| %s | %s | %s | %.4g | %s |\n", pkg, name, metric, $2, ci }')"
ratio="$(printf '%s\n' "$rows" | awk -F'|' '
  $3 ~ /Processes\/procs=1 / { one = $5 } $3 ~ /Processes\/procs=3 / { three = $5 }
  END { if (one > 0) printf "%.2f", three / one; else printf "n/a" }')"

cpu="$(grep -m1 '^cpu:' "$raw" | sed 's/^cpu: *//; s/ *$//')"
section="$(printf '%s\n' \
  "<!-- processes:begin (written by scripts/bench-processes.sh; do not edit by hand) -->" \
  "Measured $(date -u +%Y-%m-%d) on: $cpu, $(nproc) cores, load average $load_before before and $load_after after; PostgreSQL $(psql --version 2>/dev/null | awk '{print $3}') on loopback; go test -bench -benchtime 1x, $COUNT samples, medians from benchstat; ${AGENTPLANE_BENCH_RUNS:-150} card-dispute runs per Processes sample." \
  "" \
  "| package | benchmark | unit | median | 95% CI |" \
  "|---|---|---|---|---|" \
  "$rows" \
  "" \
  "Scaling ratio, runs/s with 3 serve processes over 1 on one PostgreSQL: **$ratio**." \
  "<!-- processes:end -->")"
printf '%s\n' "$section"

. scripts/lib/perfdoc.sh
write_perf_section processes "$section"
