#!/usr/bin/env bash
# Everything the test suite needs, installed and started: sourced by
# scripts/test.sh (which then runs the tests), or run on its own to install
# the cold caches and time them (`time bash scripts/setup.sh`). Tools built
# from the Go module proxy and npm packages go into a cache folder outside the
# repository (${AGENTPLANE_TOOLS:-$HOME/.cache/agentplane-tools}), so a second
# run skips them; Debian packages come from apt-get when missing. It exports
# the variables the tests read (AGENTPLANE_RUNSC, AGENTPLANE_TEST_POSTGRES,
# AGENTPLANE_TEMPORAL_CLI, ...) and AGENTPLANE_TEST_STRICT=1, so a missing
# dependency fails a test instead of skipping it. Sourced, it leaves the test
# PostgreSQL cluster running (the caller stops it: pg_stop_test_cluster); run
# on its own, it stops the cluster when it ends.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

step() { printf '\n=== %s\n' "$*"; }

TOOLS="${AGENTPLANE_TOOLS:-$HOME/.cache/agentplane-tools}"
export PATH="$TOOLS/bin:$PATH"
mkdir -p "$TOOLS/bin"
# A test whose dependency is missing fails instead of skipping (the setup
# scripts below read it too).
export AGENTPLANE_TEST_STRICT=1

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
. scripts/setup-postgres.sh # PostgreSQL on loopback: AGENTPLANE_TEST_POSTGRES
. scripts/setup-temporal.sh # the Temporal CLI for engine/temporal's dev server (exports AGENTPLANE_TEMPORAL_CLI)

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
  pg_stop_test_cluster
  step "setup done: tools in $TOOLS"
fi
