package blobdir_test

import (
	"os"
	"testing"

	"github.com/agentplane/agentplane/store/blobdir"
	"github.com/agentplane/agentplane/store/storetest"
)

func TestConformance(t *testing.T) {
	storetest.ExerciseBlobs(t, func(t *testing.T) storetest.BlobBackend {
		d, err := blobdir.Open(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		return storetest.BlobBackend{Blobs: d, Overwrite: func(t *testing.T, tenant string, sum [32]byte, data []byte) {
			if err := os.WriteFile(d.Path(tenant, sum), data, 0o600); err != nil {
				t.Fatal(err)
			}
		}}
	})
}
