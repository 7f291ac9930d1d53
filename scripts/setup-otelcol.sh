#!/usr/bin/env bash
# Builds a real OpenTelemetry Collector for agentplane's telemetry tests with
# the collector's own builder (go.opentelemetry.io/collector/cmd/builder) from
# scripts/otelcol/manifest.yaml: the OTLP receiver (HTTP and gRPC), the batch
# processor, the debug exporter and the env and file config providers. The
# binary goes into the tools cache outside the repository
# (${AGENTPLANE_TOOLS:-$HOME/.cache/agentplane-tools}/bin/otelcol-agentplane)
# and is rebuilt only when the manifest changes (about 4.5 minutes cold, once).
# Run it directly, or source it (scripts/test.sh does) to get
# AGENTPLANE_OTELCOL exported; trace/otelexport's collector test reads it.
set -euo pipefail
_otelcol_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

TOOLS="${AGENTPLANE_TOOLS:-$HOME/.cache/agentplane-tools}"
mkdir -p "$TOOLS/bin"
OTELCOL_BUILDER_VERSION=v0.165.0
_otelcol_manifest="$_otelcol_root/scripts/otelcol/manifest.yaml"
_otelcol_sum="$OTELCOL_BUILDER_VERSION $(sha256sum "$_otelcol_manifest" | cut -d' ' -f1)"
if [ ! -x "$TOOLS/bin/otelcol-agentplane" ] || [ "$(cat "$TOOLS/bin/otelcol-agentplane.version" 2>/dev/null)" != "$_otelcol_sum" ]; then
  if [ ! -x "$TOOLS/bin/builder" ] || [ "$(cat "$TOOLS/bin/builder.version" 2>/dev/null)" != "$OTELCOL_BUILDER_VERSION" ]; then
    printf '\n=== installing the collector builder %s into %s\n' "$OTELCOL_BUILDER_VERSION" "$TOOLS/bin"
    GOBIN="$TOOLS/bin" go install "go.opentelemetry.io/collector/cmd/builder@$OTELCOL_BUILDER_VERSION"
    echo "$OTELCOL_BUILDER_VERSION" > "$TOOLS/bin/builder.version"
  fi
  printf '\n=== building the OpenTelemetry Collector (otlp in, debug out) into %s (about 4.5 minutes, once)\n' "$TOOLS/bin"
  _otelcol_work="$(mktemp -d)"
  sed "s|\${OUTPUT_PATH}|$_otelcol_work/dist|" "$_otelcol_manifest" > "$_otelcol_work/manifest.yaml"
  CGO_ENABLED=0 "$TOOLS/bin/builder" --config "$_otelcol_work/manifest.yaml"
  install -m 0755 "$_otelcol_work/dist/otelcol-agentplane" "$TOOLS/bin/otelcol-agentplane"
  echo "$_otelcol_sum" > "$TOOLS/bin/otelcol-agentplane.version"
  rm -rf "$_otelcol_work"
fi
export AGENTPLANE_OTELCOL="$TOOLS/bin/otelcol-agentplane"
echo "OpenTelemetry Collector ready: $AGENTPLANE_OTELCOL"
