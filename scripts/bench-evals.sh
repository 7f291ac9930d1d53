#!/usr/bin/env bash
# The evals' numbers: one card-dispute eval task end to end (and the part
# spent building its fresh environment), one recorded run replayed on a
# version (what eval compare does per run and version), and the whole
# 31-task set two tasks at a time. Prints the section and writes it into
# docs/PERFORMANCE.md between the "evals" markers.
#
# Usage: scripts/bench-evals.sh
set -euo pipefail
cd "$(dirname "$0")/.."
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

echo "running the eval benchmarks..." >&2
load="$(cut -d' ' -f1 /proc/loadavg 2>/dev/null || echo '?')"
go test -count=1 -run '^$' -bench 'EvalTask|Replay' -benchtime 10x ./eval/ >"$tmp/bench.txt"
go test -count=1 -run '^$' -bench 'EvalSet' -benchtime 2x ./eval/ >>"$tmp/bench.txt"
# The whole eval test suite with the race detector, as CI runs it: CPU
# seconds are what matter on a shared machine.
go test -race -c -o "$tmp/eval.test" ./eval/
( cd eval && /usr/bin/time -f '%e %U %S' "$tmp/eval.test" >/dev/null 2>"$tmp/time.txt" ) || true
read -r wall user sys < <(tail -1 "$tmp/time.txt")

rows="$(awk '
  /^Benchmark/ {
    name = $1; sub(/^Benchmark/, "", name); sub(/-[0-9]+$/, "", name)
    line = "| " name
    for (i = 5; i + 1 <= NF; i += 2) line = line " | " $i " " $(i + 1)
    print line " |"
  }' "$tmp/bench.txt")"
cpu="$(grep -m1 '^cpu:' "$tmp/bench.txt" | sed 's/^cpu: *//; s/ *$//')"

section="$(printf '%s\n' \
  "<!-- evals:begin (written by scripts/bench-evals.sh; do not edit by hand) -->" \
  "## Evals (\`scripts/bench-evals.sh\`)" \
  "" \
  "Measured $(date -u +%Y-%m-%d) on: $cpu, $(nproc) cores, load average $load when it started (the machine is shared; read the CPU seconds, not the wall clock). Single runs of \`go test -bench\`; nothing here is asserted." \
  "" \
  "| benchmark | per op | |" \
  "|---|---|---|" \
  "$rows" \
  "" \
  "- EvalTask: one task alone (a duplicate above the approval limit: 7 steps, 2 approvals decided by the set's policy), in a fresh environment: a platform in its own directory (SQLite store, migrations), a simulated bank with the task's fixture, the tools and the agent version applied. setup-ms is that environment." \
  "- Replay: one recorded run replayed on two versions, each in a fresh environment into which the run is copied (setup-ms includes the copy)." \
  "- EvalSet: the 31 tasks of examples/carddispute/evals/card-dispute.yaml, two at a time." \
  "- The eval package's tests with the race detector (31 tasks recorded once, 3 comparisons, 6 further runs): ${wall} s wall, ${user} s user + ${sys} s system CPU." \
  "- Where the time goes (pprof, EvalSet): about a fifth was JSON Schema compilation, the tool set rebuilt from stored manifests on every resolve and workflow start, which \`tool.ManifestCache\` has removed since (2026-11-30); a third is the loop and its store writes; a quarter is building environments." \
  "<!-- evals:end -->")"
printf '%s\n' "$section"

. scripts/lib/perfdoc.sh
write_perf_section evals "$section"
