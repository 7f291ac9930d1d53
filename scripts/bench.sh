#!/usr/bin/env bash
# Runs the core benchmarks COUNT times (default 6), summarises them with
# benchstat (medians and 95% confidence intervals), prints the table, and
# writes it into docs/PERFORMANCE.md between the "core" markers.
#
# Usage: scripts/bench.sh            COUNT=10 scripts/bench.sh
set -euo pipefail
cd "$(dirname "$0")/.."
TOOLS="${AGENTPLANE_TOOLS:-$HOME/.cache/agentplane-tools}"
export PATH="$TOOLS/bin:$PATH"
if ! command -v benchstat >/dev/null; then
  GOBIN="$TOOLS/bin" go install golang.org/x/perf/cmd/benchstat@v0.0.0-20260908200009-22c9c6c9d4da
fi
COUNT="${COUNT:-6}"
raw="$(mktemp)"
trap 'rm -f "$raw"' EXIT

echo "running benchmarks ($COUNT samples each; a few minutes)..." >&2
go test -run '^$' -bench 'Fsync' -benchtime 300x -count "$COUNT" ./store/sqlite/ >>"$raw"
go test -run '^$' -bench 'Append' -count "$COUNT" ./store/sqlite/ >>"$raw"
go test -run '^$' -bench 'StepOverhead|AggregateSteps|TraceSize/store=sqlite' -benchtime 1x -count "$COUNT" ./loop/ >>"$raw"

table="$(benchstat -format csv "$raw" 2>/dev/null | awk -F, '
  /^pkg:/ { pkg = $0; sub(/^pkg: github.com\/agentplane\/agentplane\//, "", pkg); next }
  /^,[^,]*,CI$/ { metric = $2; next }
  /^,/ || /^geomean/ || /^goos|^goarch|^cpu/ || NF < 2 { next }
  { name = $1; sub(/-[0-9]+$/, "", name); ci = $3; if (ci == "∞" || ci == "") ci = "n/a"
    if (metric == "sec/op") { v = $2 * 1e6; unit = "µs/op" } else { v = $2; unit = metric }
    printf "| %s | %s | %s | %.4g | %s |\n", pkg, name, unit, v, ci }')"

cpu="$(grep -m1 '^cpu:' "$raw" | sed 's/^cpu: *//; s/ *$//')"
section="$(printf '%s\n' \
  "<!-- core:begin (written by scripts/bench.sh; do not edit by hand) -->" \
  "Measured $(date -u +%Y-%m-%d) on: $cpu, $(nproc) cores; go test -bench, $COUNT samples, medians from benchstat." \
  "" \
  "| package | benchmark | unit | median | 95% CI |" \
  "|---|---|---|---|---|" \
  "$table" \
  "<!-- core:end -->")"
printf '%s\n' "$section"

. scripts/lib/perfdoc.sh
write_perf_section core "$section"
