package sqlite

import (
	"testing"

	"github.com/agentplane/agentplane/store/storetest"
)

func TestAPIConformance(t *testing.T) {
	storetest.ExerciseAPI(t, func(t *testing.T) storetest.APIStore { return openTemp(t) })
}

func TestSessionConformance(t *testing.T) {
	storetest.ExerciseSessions(t, openTemp(t))
}
