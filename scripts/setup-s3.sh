#!/usr/bin/env bash
# Builds the S3-compatible server the blob tests run against: versitygw
# (Apache-2.0; its posix back end keeps objects as files, SigV4 auth), from
# the Go module proxy into a cache folder outside the repository
# ($AGENTPLANE_TOOLS, default ~/.cache/agentplane-tools/bin), skipped when
# that version is already there. Source it (scripts/test.sh does) to get
# AGENTPLANE_S3_SERVER exported; the tests (store/s3blob/s3test) start the
# server themselves on 127.0.0.1 with a free port and a temporary folder.
# Why this server: docs/design/blobs.md.
set -euo pipefail

TOOLS="${AGENTPLANE_TOOLS:-$HOME/.cache/agentplane-tools}"
mkdir -p "$TOOLS/bin"

VERSITYGW_VERSION=v1.8.0
if [ ! -x "$TOOLS/bin/versitygw" ] || [ "$(cat "$TOOLS/bin/versitygw.version" 2>/dev/null)" != "$VERSITYGW_VERSION" ]; then
  printf '\n=== building versitygw %s into %s (a few minutes, once)\n' "$VERSITYGW_VERSION" "$TOOLS/bin"
  CGO_ENABLED=0 GOBIN="$TOOLS/bin" go install "github.com/versity/versitygw/cmd/versitygw@$VERSITYGW_VERSION"
  echo "$VERSITYGW_VERSION" > "$TOOLS/bin/versitygw.version"
fi
export AGENTPLANE_S3_SERVER="$TOOLS/bin/versitygw"
echo "S3 server ready: $AGENTPLANE_S3_SERVER (versitygw $VERSITYGW_VERSION)"
