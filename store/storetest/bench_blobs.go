package storetest

import (
	"crypto/rand"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/agentplane/agentplane/store"
)

// BenchmarkBlobs measures one tenant's blob puts and gets on blobs, the
// same way for every back end (the blob folder, S3), at a small and a
// large payload size: b.N puts of distinct content, then b.N gets of it,
// one at a time, reported as the p50 and p99 latency of each (put-p50-us,
// put-p99-us, get-p50-us, get-p99-us).
func BenchmarkBlobs(b *testing.B, blobs store.Blobs) {
	for _, size := range []int{4 << 10, 256 << 10} {
		b.Run(fmt.Sprintf("%dKiB", size>>10), func(b *testing.B) {
			s := blobs.Blobs("bench-tenant")
			data := make([][]byte, b.N)
			for i := range data {
				data[i] = make([]byte, size)
				rand.Read(data[i])
			}
			sums := make([][32]byte, b.N)
			puts := make([]time.Duration, b.N)
			gets := make([]time.Duration, b.N)
			b.SetBytes(int64(size))
			b.ResetTimer()
			for i := range b.N {
				t0 := time.Now()
				sum, err := s.PutBlob(b.Context(), data[i])
				puts[i] = time.Since(t0)
				if err != nil {
					b.Fatal(err)
				}
				sums[i] = sum
			}
			for i := range b.N {
				t0 := time.Now()
				got, err := s.GetBlob(b.Context(), sums[i])
				gets[i] = time.Since(t0)
				if err != nil || len(got) != size {
					b.Fatalf("GetBlob: %d bytes, %v", len(got), err)
				}
			}
			b.StopTimer()
			b.ReportMetric(percentile(puts, 50), "put-p50-us")
			b.ReportMetric(percentile(puts, 99), "put-p99-us")
			b.ReportMetric(percentile(gets, 50), "get-p50-us")
			b.ReportMetric(percentile(gets, 99), "get-p99-us")
		})
	}
}

// percentile returns the p-th percentile of ds in microseconds.
func percentile(ds []time.Duration, p int) float64 {
	s := slices.Clone(ds)
	slices.Sort(s)
	i := (len(s)*p + 99) / 100
	i = min(max(i-1, 0), len(s)-1)
	return float64(s[i].Nanoseconds()) / 1e3
}
