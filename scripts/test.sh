#!/usr/bin/env bash
# The whole test suite of agentplane, as CI runs it. It installs what the tests
# need first (scripts/setup.sh: Debian packages, npm packages at pinned
# versions and tools built from the Go module proxy, cached outside the
# repository so a second run skips them), then runs formatting, vet,
# staticcheck, the OpenAPI lint and the race-enabled unit and integration
# tests (the SIGKILL crash tests among them).
set -euo pipefail
cd "$(dirname "$0")/.."

. scripts/setup.sh
trap pg_stop_test_cluster EXIT

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
sandboxed="./sandbox/... ./mcphost/... ./internal/platform/..."
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
# internal/cli, alone too: its sandbox tests run one after another first,
# then its parallel tests (the txtar scripts and the commands that wait on
# subprocesses, servers and polls) eight at a time instead of GOMAXPROCS.
go test -race "$norace_sqlite" -count=1 -parallel 8 -timeout 25m ./internal/cli/...
# The SIGKILL crash test (scripts/crashtest.sh, 50 runs) runs inside go test
# as cmd/agentplane TestCrashSIGKILL, which also checks the data in depth.
