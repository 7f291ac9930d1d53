#!/usr/bin/env bash
# Installs the MCP Inspector CLI (@modelcontextprotocol/inspector, pinned in
# scripts/npm-inspector/package.json and package-lock.json) into its own cache
# folder outside the repository, once per lockfile, and exports
# AGENTPLANE_MCP_INSPECTOR (its mcp-inspector program), which the mcpserver
# tests run in --cli mode against `agentplane mcp serve`. It uses
# `npm install`, not `npm ci`: the inspector's lockfile names an optional
# package the registry does not have, which `npm ci` refuses. Idempotent; run
# it directly or source it (scripts/test.sh does).
set -euo pipefail
_insp_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
_insp_tools="${AGENTPLANE_TOOLS:-$HOME/.cache/agentplane-tools}"
_insp_dir="$_insp_tools/npm-inspector"
_insp_sum="$(cat "$_insp_root/scripts/npm-inspector/package.json" "$_insp_root/scripts/npm-inspector/package-lock.json" | sha256sum | cut -c1-64)"
if [ "$(cat "$_insp_dir/lock.sha256" 2>/dev/null)" != "$_insp_sum" ] || [ ! -x "$_insp_dir/node_modules/.bin/mcp-inspector" ]; then
  printf '\n=== installing the MCP Inspector CLI (npm install) into %s\n' "$_insp_dir"
  rm -rf "$_insp_dir"
  mkdir -p "$_insp_dir"
  cp "$_insp_root/scripts/npm-inspector/package.json" "$_insp_root/scripts/npm-inspector/package-lock.json" "$_insp_dir/"
  (cd "$_insp_dir" && npm install --ignore-scripts --no-audit --no-fund --loglevel=error)
  echo "$_insp_sum" > "$_insp_dir/lock.sha256"
fi
export AGENTPLANE_MCP_INSPECTOR="$_insp_dir/node_modules/.bin/mcp-inspector"
echo "MCP Inspector CLI ready: $AGENTPLANE_MCP_INSPECTOR"
