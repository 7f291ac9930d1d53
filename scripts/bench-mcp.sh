#!/usr/bin/env bash
# One MCP tool call's added latency: BenchmarkCall in package mcphost times
# single calls through Broker.Execute (p50-ns, p99-ns) for a tier-1 echo, an
# MCP echo over Streamable HTTP on loopback and an MCP echo over stdio to a
# server in a warm tier-2 sandbox (needs root and bubblewrap:
# scripts/sandboxes.sh), and prints them as a benchstat table.
#
# Usage: scripts/bench-mcp.sh     (COUNT=6 samples, N=500 calls each)
set -euo pipefail
cd "$(dirname "$0")/.."
tools="${AGENTPLANE_TOOLS:-$HOME/.cache/agentplane-tools}"
benchstat="$tools/bin/benchstat"
if [ ! -x "$benchstat" ]; then
  GOBIN="$tools/bin" go install golang.org/x/perf/cmd/benchstat@v0.0.0-20260908200009-22c9c6c9d4da
fi
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
echo "running BenchmarkCall (${COUNT:-6} samples of ${N:-500} calls)..." >&2
go test -count="${COUNT:-6}" -run '^$' -bench '^BenchmarkCall$' -benchtime "${N:-500}x" ./mcphost/ >"$tmp/bench.txt"
"$benchstat" -col /.name "$tmp/bench.txt" 2>/dev/null || "$benchstat" "$tmp/bench.txt"
