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

step() { printf '\n=== %s\n' "$*"; }

install_go_tool() { # name module@version
  if [ ! -x "$TOOLS/bin/$1" ]; then
    step "installing $1 ($2) into $TOOLS/bin"
    GOBIN="$TOOLS/bin" go install "$2"
  fi
}
install_go_tool staticcheck honnef.co/go/tools/cmd/staticcheck@v0.8.2

# Sandboxes (package sandbox): bubblewrap and setpriv for tier 2, python3 for
# the hostile programs, runc only for the runtime comparison benchmark, and a
# static runsc (gVisor) for tier 3, built once into the tools cache. A cgo
# build of runsc fails inside its own sandbox, hence CGO_ENABLED=0.
missing=()
command -v bwrap >/dev/null 2>&1 || missing+=(bubblewrap)
command -v setpriv >/dev/null 2>&1 || missing+=(util-linux)
command -v runc >/dev/null 2>&1 || missing+=(runc)
[ -x /usr/bin/python3 ] || missing+=(python3)
if [ "${#missing[@]}" -gt 0 ]; then
  step "installing ${missing[*]} (apt-get)"
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO="sudo -n"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}"
fi
RUNSC_VERSION=v0.0.0-20260905035102-160fafc42237
if [ ! -x "$TOOLS/bin/runsc" ] || [ "$(cat "$TOOLS/bin/runsc.version" 2>/dev/null)" != "$RUNSC_VERSION" ]; then
  step "building runsc $RUNSC_VERSION (static) into $TOOLS/bin (a few minutes, once)"
  CGO_ENABLED=0 GOBIN="$TOOLS/bin" go install "gvisor.dev/gvisor/runsc@$RUNSC_VERSION"
  echo "$RUNSC_VERSION" > "$TOOLS/bin/runsc.version"
fi
export AGENTPLANE_RUNSC="$TOOLS/bin/runsc"

step "gofmt"
unformatted="$(gofmt -l $(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))"
if [ -n "$unformatted" ]; then
  echo "these files need gofmt:"; echo "$unformatted"; exit 1
fi

step "go vet"
go vet ./...

step "staticcheck"
staticcheck ./...

step "go test -race"
# One package at a time (-p 1): the sandbox suites start real gVisor and
# bubblewrap sandboxes, and runsc's control connection is unreliable when the
# 2-core machine is saturated by other packages' race-enabled tests.
go test -race -count=1 -p 1 -timeout 25m ./...
# The SIGKILL crash test (scripts/crashtest.sh, 50 runs) runs inside go test
# as cmd/agentplane TestCrashSIGKILL, which also checks the data in depth.
