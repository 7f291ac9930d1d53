#!/usr/bin/env bash
# Installs Debian's chromium for the run viewer's browser tests (web/,
# driven from Go with chromedp), only when it is missing, and exports
# AGENTPLANE_CHROMIUM. Run it directly, or source it (scripts/test.sh does).
# The tests start it headless on loopback pages with a fresh profile.
set -euo pipefail

if [ ! -x /usr/bin/chromium ]; then
  printf '\n=== installing chromium (apt-get; about 2 minutes, once)\n'
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO="sudo -n"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends chromium
fi
export AGENTPLANE_CHROMIUM=/usr/bin/chromium
echo "chromium ready: $AGENTPLANE_CHROMIUM"
