#!/usr/bin/env bash
# Installs what agentplane's sandboxes need on this host (Debian):
# bubblewrap and setpriv for tier 2, python3 for run_python and the hostile
# test programs, runc for the runtime comparison benchmark, a static runsc
# (gVisor) for tier 3 and the static sandbox guest, the last two built into
# a cache folder outside the repository ($AGENTPLANE_TOOLS, default
# ~/.cache/agentplane-tools/bin) so that a second run skips runsc.
# `agentplane demo` finds runsc and the guest there. Run it directly, or
# source it (scripts/test.sh does) to get AGENTPLANE_RUNSC exported.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

TOOLS="${AGENTPLANE_TOOLS:-$HOME/.cache/agentplane-tools}"
mkdir -p "$TOOLS/bin"

missing=()
command -v bwrap >/dev/null 2>&1 || missing+=(bubblewrap)
command -v setpriv >/dev/null 2>&1 || missing+=(util-linux)
command -v runc >/dev/null 2>&1 || missing+=(runc)
[ -x /usr/bin/python3 ] || missing+=(python3)
if [ "${#missing[@]}" -gt 0 ]; then
  printf '\n=== installing %s (apt-get)\n' "${missing[*]}"
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO="sudo -n"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}"
fi
# A cgo build of runsc fails inside its own sandbox, hence CGO_ENABLED=0.
RUNSC_VERSION=v0.0.0-20260905035102-160fafc42237
if [ ! -x "$TOOLS/bin/runsc" ] || [ "$(cat "$TOOLS/bin/runsc.version" 2>/dev/null)" != "$RUNSC_VERSION" ]; then
  printf '\n=== building runsc %s (static) into %s (a few minutes, once)\n' "$RUNSC_VERSION" "$TOOLS/bin"
  CGO_ENABLED=0 GOBIN="$TOOLS/bin" go install "gvisor.dev/gvisor/runsc@$RUNSC_VERSION"
  echo "$RUNSC_VERSION" > "$TOOLS/bin/runsc.version"
fi
# The guest runs inside every sandbox; it is small, so it is rebuilt from
# this checkout each time.
CGO_ENABLED=0 go build -trimpath -o "$TOOLS/bin/agentplane-guest" ./sandbox/guest
export AGENTPLANE_RUNSC="$TOOLS/bin/runsc"
echo "sandbox tools ready: runsc and agentplane-guest in $TOOLS/bin (bubblewrap, setpriv and python3 from Debian); agentplane demo finds them there"
