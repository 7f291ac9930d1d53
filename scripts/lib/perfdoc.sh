# write_perf_section NAME SECTION: replaces the part of docs/PERFORMANCE.md
# between <!-- NAME:begin ... --> and <!-- NAME:end --> with SECTION (which
# carries the markers itself), or appends SECTION when the markers are not
# there yet. Sourced by the scripts/bench*.sh that write their own tables.
write_perf_section() {
  local name="$1" section="$2" doc=docs/PERFORMANCE.md
  [ -f "$doc" ] || printf '# Performance\n' >"$doc"
  if grep -q "<!-- $name:begin" "$doc"; then
    awk -v section="$section" -v b="<!-- $name:begin" -v e="<!-- $name:end -->" '
      index($0, b) == 1 { print section; skip = 1; next }
      index($0, e) == 1 { skip = 0; next }
      !skip { print }' "$doc" >"$doc.tmp" && mv "$doc.tmp" "$doc"
  else
    printf '\n%s\n' "$section" >>"$doc"
  fi
  echo "updated $doc" >&2
}
