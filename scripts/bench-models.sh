#!/usr/bin/env bash
# The model gateway's numbers: the input-token and cost curves of seed 004's
# 25-step run with and without prompt caching and compaction (measured
# through the gateway's own accounting against a simulated Messages API that
# charges by the cache breakpoints it receives, and asserted against the
# seed's figures by the same test), and the gateway's and provider's own
# overhead per call. Prints the section and writes it into
# docs/PERFORMANCE.md between the "models" markers.
#
# Usage: scripts/bench-models.sh
set -euo pipefail
cd "$(dirname "$0")/.."
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

echo "running the cost-curve test and the gateway benchmarks..." >&2
go test -count=1 -run '^TestCostCurves$' ./model/anthropic/ -args -curves.out="$tmp/curves.md" >&2
go test -count=1 -run '^$' -bench 'GatewayOverhead' -benchtime 5000x ./model/anthropic/ >"$tmp/bench.txt"
go test -count=1 -run '^$' -bench 'ProviderWire' -benchtime 100x ./model/anthropic/ >>"$tmp/bench.txt"
go test -count=1 -run '^$' -bench 'Run25' -benchtime 5x ./model/anthropic/ >>"$tmp/bench.txt"

overhead="$(awk '
  /^Benchmark/ {
    name = $1; sub(/^Benchmark/, "", name); sub(/-[0-9]+$/, "", name)
    line = "| " name " | " sprintf("%.1f", $3 / 1000) " µs"
    for (i = 5; i + 1 <= NF; i += 2) line = line ", " $i " " $(i + 1)
    print line " |"
  }' "$tmp/bench.txt")"
cpu="$(grep -m1 '^cpu:' "$tmp/bench.txt" | sed 's/^cpu: *//; s/ *$//')"

section="$(printf '%s\n' \
  "<!-- models:begin (written by scripts/bench-models.sh; do not edit by hand) -->" \
  "## Model gateway: prompt caching, compaction, overhead (\`scripts/bench-models.sh\`)" \
  "" \
  "Measured $(date -u +%Y-%m-%d) on: $cpu, $(nproc) cores. Token counts and costs are exact and asserted by \`TestCostCurves\` (model/anthropic); timings are single runs of \`go test -bench\` and are not asserted anywhere." \
  "" \
  "$(cat "$tmp/curves.md")" \
  "" \
  "Overhead (per operation):" \
  "" \
  "| benchmark | time per op, metrics |" \
  "|---|---|" \
  "$overhead" \
  "" \
  "- GatewayOverhead: the gateway's own work for one call of step 25's 42,000-token prompt (alias, budget pre-check with the prompt estimate, pricing, validation, log, meter) over a provider that answers at once." \
  "- ProviderWire: one Messages call of that prompt through the Anthropic provider: the SDK encodes the 168 KB body, HTTP on loopback, the simulator parses it and answers, the SDK decodes." \
  "- Run25: a whole simulated 25-step run per op, dominated by the simulator's parsing and cache hashing of every request; read its tokens and dollars, not its time." \
  "<!-- models:end -->")"
printf '%s\n' "$section"

. scripts/lib/perfdoc.sh
write_perf_section models "$section"
