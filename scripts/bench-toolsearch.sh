#!/usr/bin/env bash
# Tool search over the synthetic 400-tool catalogue (toolsearch/toolsearchtest):
# the prompt tokens of one step with search against sending every
# definition (model.EstimateTokens), the top-1 and top-5 hit rates of the
# fixed queries, and the cost of a search and of building the index.
#
# Usage: scripts/bench-toolsearch.sh     (N=2000 searches)
set -euo pipefail
cd "$(dirname "$0")/.."
go test -count=1 -run '^TestCatalogueMeasure$' -v ./toolsearch/ | grep -E 'catalogue:|prompt tokens|hit rate|miss:'
go test -count=1 -run '^$' -bench . -benchtime "${N:-2000}x" ./toolsearch/ | grep -E '^Benchmark'
