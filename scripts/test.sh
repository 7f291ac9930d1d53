#!/usr/bin/env bash
# The whole test suite of agentplane, as CI runs it. It installs what the tests
# need first (tools built from the Go module proxy go into a cache folder
# outside the repository, so a second run skips them), then runs formatting,
# vet, staticcheck, and the race-enabled unit and integration tests (the
# SIGKILL crash test among them).
set -euo pipefail
cd "$(dirname "$0")/.."

TOOLS="${AGENTPLANE_TOOLS:-$HOME/.cache/agentplane-tools}"
export PATH="$TOOLS/bin:$PATH"
mkdir -p "$TOOLS/bin"
# A test whose dependency is missing fails instead of skipping (the setup
# scripts below read it too).
export AGENTPLANE_TEST_STRICT=1

step() { printf '\n=== %s\n' "$*"; }

install_go_tool() { # name module@version
  if [ ! -x "$TOOLS/bin/$1" ]; then
    step "installing $1 ($2) into $TOOLS/bin"
    GOBIN="$TOOLS/bin" go install "$2"
  fi
}
install_go_tool staticcheck honnef.co/go/tools/cmd/staticcheck@v0.8.2

# npm tools at the versions pinned in scripts/npm/package-lock.json (the
# OpenAPI linter), installed with npm ci into $TOOLS/npm; a changed lockfile
# reinstalls them.
lock_sum="$(sha256sum scripts/npm/package-lock.json | cut -d' ' -f1)"
if [ "$(cat "$TOOLS/npm/.lock-sha256" 2>/dev/null)" != "$lock_sum" ]; then
  step "installing npm test tools (scripts/npm) into $TOOLS/npm"
  mkdir -p "$TOOLS/npm"
  cp scripts/npm/package.json scripts/npm/package-lock.json "$TOOLS/npm/"
  (cd "$TOOLS/npm" && npm ci --no-audit --no-fund --silent)
  echo "$lock_sum" > "$TOOLS/npm/.lock-sha256"
fi
export PATH="$TOOLS/npm/node_modules/.bin:$PATH"

# Sandboxes: bubblewrap, setpriv, python3, runc, a static runsc and the
# sandbox guest (scripts/sandboxes.sh; exports AGENTPLANE_RUNSC).
. scripts/sandboxes.sh
. scripts/setup-mcp.sh
. scripts/setup-mcp-inspector.sh # the MCP Inspector CLI that checks agentplane mcp serve (exports AGENTPLANE_MCP_INSPECTOR)
. scripts/setup-chromium.sh # the run viewer's browser tests (web/); exports AGENTPLANE_CHROMIUM
. scripts/setup-otelcol.sh # a real OpenTelemetry Collector (exports AGENTPLANE_OTELCOL)
. scripts/setup-s3.sh # versitygw, the S3-compatible server of the blob tests (exports AGENTPLANE_S3_SERVER)
. scripts/setup-postgres.sh; trap pg_stop_test_cluster EXIT # PostgreSQL on loopback: AGENTPLANE_TEST_POSTGRES
. scripts/setup-temporal.sh # the Temporal CLI for engine/temporal's dev server (exports AGENTPLANE_TEMPORAL_CLI)
# A test whose external dependency is missing fails instead of skipping.
export AGENTPLANE_TEST_STRICT=1

step "gofmt"
unformatted="$(gofmt -l $(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))"
if [ -n "$unformatted" ]; then
  echo "these files need gofmt:"; echo "$unformatted"; exit 1
fi

step "go vet"
go vet ./...

step "staticcheck"
staticcheck ./...

step "OpenAPI lint (redocly, recommended rules: zero errors)"
REDOCLY_TELEMETRY=off REDOCLY_SUPPRESS_UPDATE_NOTICE=true redocly lint --format=summary api/openapi.json

# The packages whose tests start real gVisor or bubblewrap sandboxes run one
# at a time, alone (-p 1): runsc's control connection is unreliable when the
# 2-core machine is saturated by other packages' race-enabled tests. The rest
# (mostly waiting on PostgreSQL, S3, Temporal and serve processes) run two
# packages at a time.
sandboxed="./sandbox/... ./mcphost/... ./internal/cli/... ./internal/platform/..."
# The race detector instruments agentplane and every dependency except
# SQLite's engine, modernc.org/sqlite/lib (its C source transpiled to Go,
# reached only through the driver and under SQLite's own locking; the
# Go-level happens-before edges all stay recorded). Instrumented, that one
# package made every store operation several times slower (30,000 inserts:
# 47 s against 7.5 s) in tests that are almost all SQLite-backed.
# database/sql, the driver's Go code and all of agentplane stay instrumented.
norace_sqlite="-gcflags=modernc.org/sqlite/lib=-race=false"
step "go test -race (two packages at a time: everything that starts no sandbox)"
# shellcheck disable=SC2086
go test -race "$norace_sqlite" -count=1 -p 2 -timeout 25m $(go list ./... | grep -v -e '/sandbox' -e '/mcphost' -e '/internal/cli' -e '/internal/platform')
step "go test -race (one package at a time: the packages that start sandboxes)"
# shellcheck disable=SC2086
go test -race "$norace_sqlite" -count=1 -p 1 -timeout 25m $sandboxed
# The SIGKILL crash test (scripts/crashtest.sh, 50 runs) runs inside go test
# as cmd/agentplane TestCrashSIGKILL, which also checks the data in depth.
