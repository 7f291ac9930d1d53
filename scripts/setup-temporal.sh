#!/usr/bin/env bash
# Builds the Temporal CLI (which carries `temporal server start-dev`, the dev
# server the engine/temporal tests run against) from the Go module proxy into
# the tools cache outside the repository ($AGENTPLANE_TOOLS, default
# ~/.cache/agentplane-tools/bin). A cold build takes about 7 minutes on two
# idle cores (longer under load); a second run finds the pinned version there
# and skips it. v1.5.1 is pinned because later releases carry replace
# directives that `go install` refuses. Run it directly, or source it
# (scripts/test.sh does) to get AGENTPLANE_TEMPORAL_CLI exported.
set -euo pipefail

TOOLS="${AGENTPLANE_TOOLS:-$HOME/.cache/agentplane-tools}"
TEMPORAL_CLI_VERSION=1.5.1
mkdir -p "$TOOLS/bin"

# A CLI built by go install reports version 0.0.0-DEV, so the version built
# is kept beside it, as for runsc.
if [ ! -x "$TOOLS/bin/temporal" ] || [ "$(cat "$TOOLS/bin/temporal.version" 2>/dev/null)" != "$TEMPORAL_CLI_VERSION" ]; then
  printf '\n=== building the Temporal CLI v%s into %s (about 7 minutes on idle cores, once)\n' "$TEMPORAL_CLI_VERSION" "$TOOLS/bin"
  GOBIN="$TOOLS/bin" go install "github.com/temporalio/cli/cmd/temporal@v$TEMPORAL_CLI_VERSION"
  echo "$TEMPORAL_CLI_VERSION" >"$TOOLS/bin/temporal.version"
fi
export AGENTPLANE_TEMPORAL_CLI="$TOOLS/bin/temporal"
echo "temporal CLI v$TEMPORAL_CLI_VERSION ready: $AGENTPLANE_TEMPORAL_CLI"
