package s3blob_test

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/agentplane/agentplane/store/s3blob"
	"github.com/agentplane/agentplane/store/s3blob/s3test"
	"github.com/agentplane/agentplane/store/storetest"
)

// TestConformance runs the blob suite on a real S3-compatible server;
// each subtest gets a fresh key prefix, so sees an empty store.
func TestConformance(t *testing.T) {
	srv := s3test.Start(t)
	var n atomic.Int64
	storetest.ExerciseBlobs(t, func(t *testing.T) storetest.BlobBackend {
		st := srv.Open(t, fmt.Sprintf("suite/%d", n.Add(1)))
		return storetest.BlobBackend{Blobs: st, Overwrite: func(t *testing.T, tenant string, sum [32]byte, data []byte) {
			srv.PutRaw(t, st.Key(tenant, sum), data)
		}}
	})
}

// TestPrefixesApart: two stores on one bucket under different prefixes
// (two deployments sharing a bucket) see nothing of each other.
func TestPrefixesApart(t *testing.T) {
	srv := s3test.Start(t)
	a, b := srv.Open(t, "prod"), srv.Open(t, "prod-2")
	sum, err := a.Blobs("acme").PutBlob(t.Context(), []byte("prod's blob"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Blobs("acme").GetBlob(t.Context(), sum); err == nil {
		t.Fatal("a store under another prefix read the blob")
	}
	if got := a.Key("acme", sum); got != "prod/acme/"+fmt.Sprintf("%x", sum) {
		t.Fatalf("Key = %q", got)
	}
}

// TestOpenRefuses: a wrong key, a missing bucket and absent credentials
// are reported at Open, clearly, and the secret is never in the message.
func TestOpenRefuses(t *testing.T) {
	srv := s3test.Start(t)
	ctx := context.Background()
	bad := srv.Options("")
	bad.SecretAccessKey = "not-the-secret-0123456789"
	if _, err := s3blob.Open(ctx, bad); err == nil || !strings.Contains(err.Error(), "does not answer") || strings.Contains(err.Error(), bad.SecretAccessKey) {
		t.Fatalf("Open with a wrong secret: %v", err)
	}
	noBucket := srv.Options("")
	noBucket.Bucket = "no-such-bucket"
	if _, err := s3blob.Open(ctx, noBucket); err == nil || !strings.Contains(err.Error(), "no-such-bucket") {
		t.Fatalf("Open of a missing bucket: %v", err)
	}
	anon := srv.Options("")
	anon.AccessKeyID, anon.SecretAccessKey = "", ""
	t.Setenv("AWS_ACCESS_KEY_ID", "")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "")
	if _, err := s3blob.Open(ctx, anon); err == nil || !strings.Contains(err.Error(), "AWS_ACCESS_KEY_ID") {
		t.Fatalf("Open without credentials: %v", err)
	}
	// From the environment.
	t.Setenv("AWS_ACCESS_KEY_ID", srv.AccessKeyID)
	t.Setenv("AWS_SECRET_ACCESS_KEY", srv.SecretAccessKey)
	if _, err := s3blob.Open(ctx, anon); err != nil {
		t.Fatalf("Open with credentials from the environment: %v", err)
	}
	withKey := srv.Options("")
	for _, s := range []string{fmt.Sprint(withKey), fmt.Sprintf("%v", withKey), fmt.Sprintf("%+v", withKey), fmt.Sprintf("%#v", withKey), withKey.String()} {
		if strings.Contains(s, withKey.SecretAccessKey) {
			t.Fatalf("printed options show the secret: %s", s)
		}
	}
}

func TestParseURL(t *testing.T) {
	o, err := s3blob.ParseURL("s3://agentplane-blobs?endpoint=http://127.0.0.1:7070&region=eu-west-1&prefix=prod/blobs&path_style=true")
	if err != nil {
		t.Fatal(err)
	}
	if o.Bucket != "agentplane-blobs" || o.Endpoint != "http://127.0.0.1:7070" || o.Region != "eu-west-1" || o.Prefix != "prod/blobs" || !o.PathStyle {
		t.Fatalf("ParseURL = %v", o)
	}
	if o, err := s3blob.ParseURL("s3://agentplane-blobs"); err != nil || o.Region != "us-east-1" || o.Endpoint != "" || o.PathStyle {
		t.Fatalf("ParseURL(bare) = %v, %v", o, err)
	}
	for _, tc := range []struct{ url, want string }{
		{"s3://key:secret@bucket", "credentials do not belong in the URL"},
		{"http://bucket", "scheme"},
		{"s3://Bucket_Upper", "bucket"},
		{"s3://ab", "bucket"},
		{"s3://bucket/prefix", "?prefix="},
		{"s3://bucket?endpoint=ftp://host", "endpoint"},
		{"s3://bucket?endpoint=http://host/path", "endpoint"},
		{"s3://bucket?endpoint=http://u:p@host", "endpoint"},
		{"s3://bucket?prefix=../other", "prefix"},
		{"s3://bucket?prefix=/abs", "prefix"},
		{"s3://bucket?prefix=a//b", "prefix"},
		{"s3://bucket?path_style=maybe", "path_style"},
		{"s3://bucket?region=a/b", "region"},
		{"s3://bucket?acl=public-read", "unknown parameter"},
		{"s3://bucket?region=a&region=b", "2 times"},
	} {
		_, err := s3blob.ParseURL(tc.url)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ParseURL(%q) = %v, want an error about %s", tc.url, err, tc.want)
		}
		if err != nil && strings.Contains(err.Error(), "secret") && !strings.Contains(tc.want, "credentials") {
			t.Errorf("ParseURL(%q) error mentions a secret: %v", tc.url, err)
		}
	}
}

func FuzzParseURL(f *testing.F) {
	f.Add("s3://agentplane-blobs?endpoint=http://127.0.0.1:7070&prefix=p&path_style=true")
	f.Add("s3://b?prefix=../x")
	f.Fuzz(func(t *testing.T, raw string) {
		o, err := s3blob.ParseURL(raw)
		if err != nil {
			return
		}
		for _, seg := range strings.Split(o.Prefix, "/") {
			if o.Prefix != "" && (seg == "" || seg == "." || seg == "..") {
				t.Fatalf("ParseURL(%q) accepted prefix %q", raw, o.Prefix)
			}
		}
	})
}
