#!/usr/bin/env bash
# The embedded engine beside an earlier commit, in the same run: builds the
# loop package's benchmark binary at BASE (default c0d6440, the commit before
# issue 11's seam) and at the working tree, then runs them interleaved,
# COUNT times each (default 6), so that both see the same machine load:
#   BenchmarkStepOverhead/side_effects=none   p50 and p99 per step of one
#       200-step run (zero-latency model, no-op tier-1 tool, durable log);
#   BenchmarkAggregateSteps/tool=echo/runs=N  steps/s with 1, 16 and 64
#       concurrent runs on one store.
# Each sample runs every benchmark ITERS times (default 3) on one fixture
# and reports the whole: the first iteration of a fresh store is a cold
# start (its reading connections opened and their statements prepared, the
# caches of pinned manifests and tenant keys filled), the others the steady
# state a long-lived process runs in. ITERS=1 measures the cold start.
# Prints benchstat's comparison (medians, 95% intervals, the change) and
# writes it into docs/PERFORMANCE.md between the "engine-ab" markers, with
# the load average seen during the run.
#
# Usage: scripts/bench-engine-ab.sh          BASE=<commit> COUNT=10 scripts/bench-engine-ab.sh
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib/perfdoc.sh

TOOLS="${AGENTPLANE_TOOLS:-$HOME/.cache/agentplane-tools}"
BENCHSTAT_VERSION=v0.0.0-20260908200009-22c9c6c9d4da
if [ ! -x "$TOOLS/bin/benchstat" ] || [ "$(cat "$TOOLS/bin/benchstat.version" 2>/dev/null)" != "$BENCHSTAT_VERSION" ]; then
  printf '\n=== building benchstat into %s (once)\n' "$TOOLS/bin" >&2
  GOBIN="$TOOLS/bin" go install "golang.org/x/perf/cmd/benchstat@$BENCHSTAT_VERSION"
  echo "$BENCHSTAT_VERSION" >"$TOOLS/bin/benchstat.version"
fi

base="${BASE:-c0d6440}"
count="${COUNT:-6}"
iters="${ITERS:-3}"
bench='StepOverhead/side_effects=none|AggregateSteps/tool=echo'
# The working tree's benchmarks have a store level (sqlite, postgres): its
# sqlite cases are run and named as the base's for the comparison.
head_bench="$bench"
if grep -q '"store="' loop/bench_test.go; then
  head_bench='StepOverhead/store=sqlite/side_effects=none|AggregateSteps/store=sqlite/tool=echo'
fi
tmp="$(mktemp -d)"
wt="$tmp/base-tree"
cleanup() { git worktree remove --force "$wt" >/dev/null 2>&1 || true; rm -rf "$tmp"; }
trap cleanup EXIT

printf '=== building the benchmark binaries (base %s, and the working tree)\n' "$base" >&2
git worktree add --detach "$wt" "$base" >/dev/null 2>&1
(cd "$wt" && go test -c -o "$tmp/base.test" ./loop/)
go test -c -o "$tmp/head.test" ./loop/

load_before="$(cut -d' ' -f1-3 /proc/loadavg)"
for i in $(seq 1 "$count"); do
  printf '=== sample %d of %d\n' "$i" "$count" >&2
  for which in base head; do
    # Each binary runs in its package directory (its fixtures are relative).
    pattern="$bench"; [ "$which" = head ] && pattern="$head_bench"
    (cd "$([ "$which" = base ] && echo "$wt" || pwd)/loop" &&
      "$tmp/$which.test" -test.run '^$' -test.bench "$pattern" -test.benchtime "${iters}x" -test.count 1) |
      sed 's#/store=sqlite/#/#' >>"$tmp/$which.txt"
  done
done
load_after="$(cut -d' ' -f1-3 /proc/loadavg)"

table="$(cd "$tmp" && "$TOOLS/bin/benchstat" base.txt head.txt)"
cpu="$(grep -m1 '^cpu:' "$tmp/head.txt" | sed 's/^cpu: *//; s/ *$//')"
section="$(printf '%s\n' \
  "<!-- engine-ab:begin (written by scripts/bench-engine-ab.sh; do not edit by hand) -->" \
  "Measured $(date -u +%Y-%m-%d) on: $cpu, $(nproc) cores; load average $load_before before and $load_after after." \
  "Base $base (left) against $(git rev-parse --short HEAD)$(git diff --quiet || echo ' plus uncommitted changes') (right), $count interleaved samples each, $iters iterations a sample." \
  "" \
  '```' \
  "$table" \
  '```' \
  "<!-- engine-ab:end -->")"
printf '%s\n' "$section"
write_perf_section engine-ab "$section"
