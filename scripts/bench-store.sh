#!/usr/bin/env bash
# Runs the store benchmarks (store/bench: one agent step's store work, one
# run at a time and 16 at once) over the embedded SQLite store and over
# PostgreSQL in one run, COUNT samples each (default 6), and prints the
# benchstat table: the two back ends side by side. It starts the test
# PostgreSQL cluster itself (scripts/setup-postgres.sh) and stops it after.
#
# Usage: scripts/bench-store.sh            COUNT=10 scripts/bench-store.sh
set -euo pipefail
cd "$(dirname "$0")/.."
TOOLS="${AGENTPLANE_TOOLS:-$HOME/.cache/agentplane-tools}"
export PATH="$TOOLS/bin:$PATH"
if ! command -v benchstat >/dev/null; then
  GOBIN="$TOOLS/bin" go install golang.org/x/perf/cmd/benchstat@v0.0.0-20260908200009-22c9c6c9d4da
fi
. scripts/setup-postgres.sh
raw="$(mktemp)"
trap 'rm -f "$raw"; pg_stop_test_cluster' EXIT
COUNT="${COUNT:-6}"
echo "running store benchmarks ($COUNT samples each)..." >&2
AGENTPLANE_TEST_STRICT=1 go test -run '^$' -bench 'Step' -benchtime 2s -count "$COUNT" ./store/bench/ >>"$raw"
benchstat -col /backend "$raw" 2>/dev/null || benchstat "$raw"
