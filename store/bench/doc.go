// Package bench runs the store benchmarks of store/storetest over every
// back end in one run (the embedded SQLite store and PostgreSQL), so that
// their numbers sit side by side: go test -bench . ./store/bench/ (with
// AGENTPLANE_TEST_POSTGRES set; scripts/bench-store.sh does it all).
package bench
