package s3blob_test

import (
	"testing"

	"github.com/agentplane/agentplane/store/blobdir"
	"github.com/agentplane/agentplane/store/s3blob/s3test"
	"github.com/agentplane/agentplane/store/storetest"
)

// BenchmarkBlobs runs one benchmark over the blob folder and over S3
// (versitygw on loopback, its objects on the same disk), in one run:
// scripts/bench-blobs.sh prints the table.
func BenchmarkBlobs(b *testing.B) {
	b.Run("backend=folder", func(b *testing.B) {
		d, err := blobdir.Open(b.TempDir())
		if err != nil {
			b.Fatal(err)
		}
		storetest.BenchmarkBlobs(b, d)
	})
	b.Run("backend=s3", func(b *testing.B) {
		storetest.BenchmarkBlobs(b, s3test.Start(b).Open(b, "bench"))
	})
}
