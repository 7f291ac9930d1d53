package sqlite

import (
	"errors"
	"testing"

	"github.com/agentplane/agentplane/store/storetest"
)

func TestAPIConformance(t *testing.T) {
	storetest.ExerciseAPI(t, func(t *testing.T) storetest.APIStore { return openTemp(t) })
}

// TestProcesses opens the data directory twice, as two agentplane
// processes on one host would: SQLite's locks (WAL, BEGIN IMMEDIATE) decide
// between them.
func TestProcesses(t *testing.T) {
	storetest.ExerciseProcesses(t, func(t *testing.T) (storetest.APIStore, storetest.APIStore) {
		dir := t.TempDir()
		a, b := open(t, dir), open(t, dir)
		t.Cleanup(func() {
			if err := errors.Join(a.Close(), b.Close()); err != nil {
				t.Errorf("Close: %v", err)
			}
		})
		return a, b
	})
}
