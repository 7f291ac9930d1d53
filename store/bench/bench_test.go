package bench

import (
	"context"
	"testing"

	"github.com/agentplane/agentplane/store"
	"github.com/agentplane/agentplane/store/postgres"
	"github.com/agentplane/agentplane/store/postgres/pgtest"
	"github.com/agentplane/agentplane/store/sqlite"
	"github.com/agentplane/agentplane/store/storetest"
)

var backends = []struct {
	name string
	open func(b *testing.B) store.Store
}{
	{"sqlite", func(b *testing.B) store.Store {
		s, err := sqlite.Open(context.Background(), sqlite.Options{Dir: b.TempDir()})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { s.Close() })
		return s
	}},
	{"postgres", func(b *testing.B) store.Store {
		s, err := postgres.Open(context.Background(), postgres.Options{DSN: pgtest.DSN(b), MaxConns: 32, Blobs: pgtest.Blobs(b)})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { s.Close() })
		return s
	}},
}

// BenchmarkStep: one agent step's store work (a buffered and a durable
// append), from one run and from 16 runs at once, on each back end.
func BenchmarkStep(b *testing.B) {
	for _, be := range backends {
		b.Run("backend="+be.name, func(b *testing.B) {
			s := be.open(b)
			b.Run("serial", func(b *testing.B) { storetest.BenchSteps(b, s, 1) })
			b.Run("concurrent16", func(b *testing.B) { storetest.BenchSteps(b, s, 16) })
		})
	}
}
