package sqlite

import (
	"fmt"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentplane/agentplane/store"
)

// BenchmarkAppend measures durable one-event appends, from one run at a time
// and from 64 runs at once. Besides time per append it reports commits/op,
// the number of SQLite transactions committed per append: about 1 when
// appends arrive one by one, well below 1 when group commit shares each
// commit (and its fsync) among concurrent runs.
func BenchmarkAppend(b *testing.B) {
	b.Run("durable", func(b *testing.B) { benchAppend(b, 1) })
	b.Run("concurrent64", func(b *testing.B) { benchAppend(b, 64) })
}

func benchAppend(b *testing.B, writers int) {
	s := openTemp(b)
	ctx := b.Context()
	epochs := make([]int64, writers)
	for i := range writers {
		id := fmt.Sprintf("r%d", i)
		if err := s.CreateRun(ctx, &store.Run{ID: id, Tenant: "t", User: "u", Agent: "a", AgentVersion: 1, Task: "x", Mode: "async"}); err != nil {
			b.Fatal(err)
		}
		r, err := s.ClaimRunByID(ctx, id, "bench", 1<<40, base)
		if err != nil {
			b.Fatal(err)
		}
		epochs[i] = r.LeaseEpoch
	}
	before := s.stats.commits.Load()
	var next atomic.Int64
	var wg sync.WaitGroup
	b.ResetTimer()
	for i := range writers {
		wg.Go(func() {
			id := fmt.Sprintf("r%d", i)
			var head [32]byte
			for seq := int64(0); next.Add(1) <= int64(b.N); seq++ {
				evs := events(id, seq, head, 1, "ev")
				if err := s.Append(ctx, store.AppendRequest{RunID: id, Epoch: epochs[i], Events: evs, Durable: true}); err != nil {
					b.Error(err)
					return
				}
				head = evs[0].Hash
			}
		})
	}
	wg.Wait()
	b.StopTimer()
	b.ReportMetric(float64(s.stats.commits.Load()-before)/float64(b.N), "commits/op")
}

// BenchmarkFsync measures the disk's own floor: write 4 KiB and fsync, the
// cost one durable commit cannot go below. Reported beside the platform's
// numbers so that they can be read against the hardware.
func BenchmarkFsync(b *testing.B) {
	f, err := os.CreateTemp(b.TempDir(), "fsync")
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 4096)
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		start := time.Now()
		if _, err := f.WriteAt(buf, int64(i%256)*4096); err != nil {
			b.Fatal(err)
		}
		if err := f.Sync(); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(start))
	}
	b.StopTimer()
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
}
