package platform

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"

	"github.com/agentplane/agentplane/store"
	"github.com/agentplane/agentplane/store/blobdir"
	"github.com/agentplane/agentplane/store/s3blob"
	"github.com/agentplane/agentplane/trace"
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
		s, err := s3blob.Open(ctx, o)
		if err != nil {
			return nil, err
		}
		return s, nil
	case filepath.IsAbs(spec):
		d, err := blobdir.Open(spec)
		if err != nil {
			return nil, err
		}
		return d, nil
	}
	// The value is not repeated: it may be a URL with a secret in it.
	return nil, errors.New("blobs: want s3://BUCKET?endpoint=URL&region=R&prefix=P&path_style=true, or an absolute folder path")
}

// adoptLegacyBlobs moves the blobs of a data directory written before
// blobs were kept per tenant into the tenant of every run whose log names
// them (trace.RunBlobs), so those runs still verify and resume. A legacy
// blob no run names belongs to no tenant and is left where it is.
func adoptLegacyBlobs(ctx context.Context, st store.Store, d *blobdir.Dir) error {
	legacy, err := d.Legacy()
	if err != nil || len(legacy) == 0 {
		return err
	}
	runs, err := st.ListRuns(ctx, store.RunFilter{})
	if err != nil {
		return err
	}
	owners := map[[32]byte][]string{}
	for _, r := range runs {
		evs, err := st.Events(ctx, r.ID, 0, 0)
		if err != nil {
			return err
		}
		sums, err := trace.RunBlobs(evs)
		if err != nil {
			continue // a damaged log: trace verify reports it
		}
		for _, s := range sums {
			if !slices.Contains(owners[s], r.Tenant) {
				owners[s] = append(owners[s], r.Tenant)
			}
		}
	}
	for _, sum := range legacy {
		if len(owners[sum]) == 0 {
			continue
		}
		if err := d.AdoptLegacy(ctx, sum, owners[sum]); err != nil {
			return fmt.Errorf("blobs from before tenant scoping: %w", err)
		}
	}
	return nil
}
