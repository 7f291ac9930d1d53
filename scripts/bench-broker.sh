#!/usr/bin/env bash
# The tool broker's decision cost: grant, authorisation as the user, schema,
# the card-dispute agent's CEL policies, rate limits and the approval rule,
# for one proposed call, timed call by call (p50, p99) by BenchmarkDecide in
# package broker. Prints the section and writes it into docs/PERFORMANCE.md
# between the "broker" markers.
#
# Usage: scripts/bench-broker.sh            (COUNT=5 samples of each case)
set -euo pipefail
cd "$(dirname "$0")/.."
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
count="${COUNT:-5}"

echo "running BenchmarkDecide ($count samples)..." >&2
go test -count="$count" -run '^$' -bench '^BenchmarkDecide$' -benchtime 20000x ./broker/ >"$tmp/bench.txt"

# Median of each metric over the samples, one row per case.
rows="$(awk '
  /^BenchmarkDecide\// {
    name = $1; sub(/^BenchmarkDecide\//, "", name); sub(/-[0-9]+$/, "", name)
    if (!(name in seen)) { seen[name] = 1; order[++n] = name }
    for (i = 3; i + 1 <= NF; i += 2) { v[name, $(i + 1)] = v[name, $(i + 1)] " " $i }
  }
  function median(s,   a, k, i, j, t) {
    k = split(s, a, " ")
    for (i = 1; i <= k; i++) for (j = i + 1; j <= k; j++) if (a[j] + 0 < a[i] + 0) { t = a[i]; a[i] = a[j]; a[j] = t }
    return a[int((k + 1) / 2)]
  }
  END {
    for (r = 1; r <= n; r++) {
      name = order[r]; split(name, parts, "/")
      printf "| %s | %s | %.1f | %.1f | %.1f | %d |\n", parts[1], parts[2],
        median(v[name, "p50-ns"]) / 1000, median(v[name, "p99-ns"]) / 1000, median(v[name, "ns/op"]) / 1000, median(v[name, "allocs/op"])
    }
  }' "$tmp/bench.txt")"
cpu="$(grep -m1 '^cpu:' "$tmp/bench.txt" | sed 's/^cpu: *//; s/ *$//')"
load="$(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || echo unknown)"

section="$(printf '%s\n' \
  "<!-- broker:begin (written by scripts/bench-broker.sh; do not edit by hand) -->" \
  "## Tool broker: the cost of one decision (\`scripts/bench-broker.sh\`)" \
  "" \
  "Measured $(date -u +%Y-%m-%d) on: $cpu, $(nproc) cores (load average $load while measuring). \`BenchmarkDecide\` (package broker), $count samples of 20,000 decisions each; the table gives the median over samples of each figure. p50 and p99 are of single decisions, each timed on its own; mean is ns/op." \
  "" \
  "Every decision runs the whole pipeline of the card-dispute agent version 1: grant, authorisation as the user (a directory lookup and the manifest's scopes), the input schema, the agent's four CEL policies (first match wins; an allowed call evaluates all four), the manifest's rate limits (the run's own history of 13 calls) and its approval rule. \`memory\` looks the user up in an in-process directory; \`sqlite\` in the embedded store (one indexed read)." \
  "" \
  "| case | directory | p50 µs | p99 µs | mean µs | allocs |" \
  "|---|---|---:|---:|---:|---:|" \
  "$rows" \
  "" \
  "- refund-allowed: issue_refund of 500 INR after one earlier refund (run.totals is summed); allowed." \
  "- refund-approval: issue_refund of 12,499 INR; the manifest and the policy ask for card-ops-supervisors." \
  "- email-approval: send_email to the customer from a tainted run; the tainted-external-email policy asks for approval." \
  "- read-allowed: get_card_transactions; no policy matches." \
  "" \
  "Compare the p99 column with seed 004's allowance for the platform's own work, 50 ms at p99 per step (a step makes about 1.2 tool calls). On a shared 2-core machine the p99 is mostly the scheduler: read it next to the p50 and the load average above. The directory lookup is the largest single cost with the SQLite store; the rest is JSON decoding of the arguments (by the schema check, the approval rule and the policy input) and CEL evaluation." \
  "<!-- broker:end -->")"
printf '%s\n' "$section"

. scripts/lib/perfdoc.sh
write_perf_section broker "$section"
