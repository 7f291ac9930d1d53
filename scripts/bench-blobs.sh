#!/usr/bin/env bash
# Blob put/get latency, p50 and p99, on the blob folder and on S3 (versitygw
# on loopback, built by scripts/setup-s3.sh) in one run of one benchmark
# function (storetest.BenchmarkBlobs), at 4 KiB and 256 KiB; prints a
# benchstat table.
#
# Usage: scripts/bench-blobs.sh        COUNT=5 N=500 scripts/bench-blobs.sh
set -euo pipefail
cd "$(dirname "$0")/.."
TOOLS="${AGENTPLANE_TOOLS:-$HOME/.cache/agentplane-tools}"
export PATH="$TOOLS/bin:$PATH"
if ! command -v benchstat >/dev/null; then
  GOBIN="$TOOLS/bin" go install golang.org/x/perf/cmd/benchstat@v0.0.0-20260908200009-22c9c6c9d4da
fi
. scripts/setup-s3.sh >&2
COUNT="${COUNT:-5}"
N="${N:-300}"
raw="$(mktemp)"
trap 'rm -f "$raw"' EXIT
echo "running the blob benchmarks ($COUNT samples of $N puts and $N gets per back end and size)..." >&2
AGENTPLANE_TEST_STRICT=1 go test -run '^$' -bench 'BenchmarkBlobs' -benchtime "${N}x" -count "$COUNT" ./store/s3blob/ >"$raw"
benchstat -col /backend "$raw"
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
