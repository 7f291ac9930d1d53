#!/usr/bin/env bash
# Installs the official MCP reference servers the mcphost tests run
# (@modelcontextprotocol/server-everything and server-filesystem, pinned in
# scripts/npm-mcp/package-lock.json) into a cache folder outside the
# repository, once per lockfile, and exports AGENTPLANE_MCP_SERVERS (the
# npm prefix the tests mount read-only into their sandboxes). Idempotent;
# run it directly or source it (scripts/test.sh does).
set -euo pipefail
_mcp_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
_mcp_tools="${AGENTPLANE_TOOLS:-$HOME/.cache/agentplane-tools}"
_mcp_dir="$_mcp_tools/npm-mcp"
_mcp_sum="$(sha256sum "$_mcp_root/scripts/npm-mcp/package-lock.json" | cut -c1-64)"
if [ "$(cat "$_mcp_dir/lock.sha256" 2>/dev/null)" != "$_mcp_sum" ] || [ ! -d "$_mcp_dir/node_modules/@modelcontextprotocol/server-everything" ]; then
  printf '\n=== installing the MCP reference servers (npm ci) into %s\n' "$_mcp_dir"
  rm -rf "$_mcp_dir"
  mkdir -p "$_mcp_dir"
  cp "$_mcp_root/scripts/npm-mcp/package.json" "$_mcp_root/scripts/npm-mcp/package-lock.json" "$_mcp_dir/"
  (cd "$_mcp_dir" && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error)
  echo "$_mcp_sum" > "$_mcp_dir/lock.sha256"
fi
# Sandbox uids must be able to read the folder.
chmod -R a+rX "$_mcp_dir"
export AGENTPLANE_MCP_SERVERS="$_mcp_dir"
echo "MCP reference servers ready in $AGENTPLANE_MCP_SERVERS"
