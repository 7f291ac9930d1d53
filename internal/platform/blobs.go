package platform

import (
	"context"
	"errors"
	"path/filepath"
	"strings"

	"github.com/agentplane/agentplane/store"
	"github.com/agentplane/agentplane/store/blobdir"
	"github.com/agentplane/agentplane/store/s3blob"
)

// OpenBlobs opens the blob store named by spec: an s3:// URL (an
// S3-compatible bucket; credentials from AWS_ACCESS_KEY_ID and
// AWS_SECRET_ACCESS_KEY), an absolute folder path (a blob folder there), or
// "" for nil, which the run store takes as its data directory's own folder.
func OpenBlobs(ctx context.Context, spec string) (store.Blobs, error) {
	switch {
	case spec == "":
		return nil, nil
	case strings.HasPrefix(spec, "s3://"):
		o, err := s3blob.ParseURL(spec)
		if err != nil {
			return nil, err
		}
		return s3blob.Open(ctx, o)
	case filepath.IsAbs(spec):
		return blobdir.Open(spec)
	}
	// The value is not repeated: it may be a URL with a secret in it.
	return nil, errors.New("blobs: want s3://BUCKET?endpoint=URL&region=R&prefix=P&path_style=true, or an absolute folder path")
}
