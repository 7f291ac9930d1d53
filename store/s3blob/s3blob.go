// Package s3blob keeps agentplane's blobs in an S3-compatible bucket
// (AWS S3, or any server speaking its API with SigV4: versitygw in the
// tests). It implements store.Blobs.
//
// Each tenant's blobs live under their own key prefix,
// PREFIX/<tenant>/<sha256 hex>, and a tenant's store only ever builds keys
// under its own: a hash another tenant stored is a key it never asks for,
// so absent and foreign answer the same store.ErrNotFound. Tenant names are
// checked (store.CheckTenant) before any key is built.
//
// Reads are bounded (store.MaxBlobSize), hashed and refused on a mismatch
// (store.ErrCorrupt); a put always rewrites the object, so the next put of
// the right content repairs a damaged copy. Every request has a timeout.
// Credentials come from Options or the AWS_ACCESS_KEY_ID,
// AWS_SECRET_ACCESS_KEY (and AWS_SESSION_TOKEN) environment variables; they
// are never part of the URL and never printed.
package s3blob

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/smithy-go"

	"github.com/agentplane/agentplane/store"
)

// Options configure Open.
type Options struct {
	Bucket string
	// Endpoint is the server's base URL (http://127.0.0.1:7070); empty
	// means AWS S3 in Region.
	Endpoint string
	// Region is the SigV4 signing region (default us-east-1).
	Region string
	// Prefix is put before every key (no leading or trailing slash).
	Prefix string
	// PathStyle addresses the bucket in the path (http://host/bucket/key)
	// rather than in the host name; most S3-compatible servers want it.
	PathStyle bool
	// Credentials; empty AccessKeyID means the AWS_ACCESS_KEY_ID,
	// AWS_SECRET_ACCESS_KEY and AWS_SESSION_TOKEN environment variables.
	AccessKeyID     string
	SecretAccessKey string
	SessionToken    string
	// Timeout bounds each request, retries included (default 30s).
	Timeout time.Duration
}

// String describes the options without the credentials.
func (o Options) String() string {
	return fmt.Sprintf("s3://%s (endpoint %q, region %q, prefix %q, path style %t)", o.Bucket, o.Endpoint, o.Region, o.Prefix, o.PathStyle)
}

// GoString is String: %#v must not print the secret either.
func (o Options) GoString() string { return o.String() }

var (
	reBucket = regexp.MustCompile(`^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$`)
	rePrefix = regexp.MustCompile(`^[A-Za-z0-9._-]+(/[A-Za-z0-9._-]+)*$`)
)

// ParseURL reads s3://BUCKET?endpoint=URL&region=R&prefix=P&path_style=true.
// Every parameter is optional; credentials are not accepted in the URL.
func ParseURL(raw string) (Options, error) {
	const form = "want s3://BUCKET?endpoint=http://HOST:PORT&region=R&prefix=P&path_style=true"
	u, err := url.Parse(raw)
	if err != nil {
		// url.Parse's error repeats the URL, which may hold a secret.
		return Options{}, fmt.Errorf("blobs URL: not a URL; %s", form)
	}
	if u.Scheme != "s3" {
		return Options{}, fmt.Errorf("blobs URL: scheme %q; %s", u.Scheme, form)
	}
	if u.User != nil {
		return Options{}, errors.New("blobs URL: credentials do not belong in the URL (it is logged and shown in process lists); set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY")
	}
	if u.Path != "" && u.Path != "/" {
		return Options{}, fmt.Errorf("blobs URL: path %q; put a key prefix in ?prefix=, %s", u.Path, form)
	}
	if u.Fragment != "" || u.Opaque != "" {
		return Options{}, fmt.Errorf("blobs URL: unexpected %q; %s", raw, form)
	}
	o := Options{Bucket: u.Host}
	q, err := url.ParseQuery(u.RawQuery)
	if err != nil {
		return Options{}, fmt.Errorf("blobs URL: query: %v; %s", err, form)
	}
	for k, vs := range q {
		if len(vs) != 1 {
			return Options{}, fmt.Errorf("blobs URL: %s given %d times", k, len(vs))
		}
		v := vs[0]
		switch k {
		case "endpoint":
			o.Endpoint = v
		case "region":
			o.Region = v
		case "prefix":
			o.Prefix = v
		case "path_style":
			b, err := strconv.ParseBool(v)
			if err != nil {
				return Options{}, fmt.Errorf("blobs URL: path_style=%q: want true or false", v)
			}
			o.PathStyle = b
		default:
			return Options{}, fmt.Errorf("blobs URL: unknown parameter %q; %s", k, form)
		}
	}
	if err := o.check(); err != nil {
		return Options{}, err
	}
	return o, nil
}

func (o *Options) check() error {
	if !reBucket.MatchString(o.Bucket) || strings.Contains(o.Bucket, "..") {
		return fmt.Errorf("blobs: bucket %q: want 3 to 63 lower-case letters, digits, dots and hyphens", o.Bucket)
	}
	if o.Endpoint != "" {
		e, err := url.Parse(o.Endpoint)
		if err != nil || (e.Scheme != "http" && e.Scheme != "https") || e.Host == "" || e.User != nil ||
			(e.Path != "" && e.Path != "/") || e.RawQuery != "" || e.Fragment != "" {
			return fmt.Errorf("blobs: endpoint %q: want http(s)://HOST[:PORT] with nothing after it", o.Endpoint)
		}
	}
	if o.Region == "" {
		o.Region = "us-east-1"
	}
	if len(o.Region) > 64 || strings.ContainsAny(o.Region, "/ \t\r\n") {
		return fmt.Errorf("blobs: region %q is not a region name", o.Region)
	}
	if o.Prefix != "" && (len(o.Prefix) > 256 || !rePrefix.MatchString(o.Prefix) || hasDotSegment(o.Prefix)) {
		return fmt.Errorf("blobs: prefix %q: want segments of letters, digits, . _ - joined by /, no . or .. segment, no leading or trailing /", o.Prefix)
	}
	if o.Timeout <= 0 {
		o.Timeout = 30 * time.Second
	}
	return nil
}

func hasDotSegment(p string) bool {
	for _, s := range strings.Split(p, "/") {
		if s == "." || s == ".." {
			return true
		}
	}
	return false
}

// Store is a bucket holding every tenant's blobs. It implements
// store.Blobs and is safe for concurrent use.
type Store struct {
	client  *s3.Client
	bucket  string
	prefix  string
	timeout time.Duration
}

var _ store.Blobs = (*Store)(nil)

// Open connects to the bucket and checks that it answers to the
// credentials (HeadBucket), so a wrong endpoint, bucket or key is reported
// at start rather than at a run's first blob.
func Open(ctx context.Context, o Options) (*Store, error) {
	if err := o.check(); err != nil {
		return nil, err
	}
	if o.AccessKeyID == "" {
		o.AccessKeyID, o.SecretAccessKey, o.SessionToken = os.Getenv("AWS_ACCESS_KEY_ID"), os.Getenv("AWS_SECRET_ACCESS_KEY"), os.Getenv("AWS_SESSION_TOKEN")
	}
	if o.AccessKeyID == "" || o.SecretAccessKey == "" {
		return nil, fmt.Errorf("blobs %s: no credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY", o)
	}
	creds := aws.Credentials{AccessKeyID: o.AccessKeyID, SecretAccessKey: o.SecretAccessKey, SessionToken: o.SessionToken, Source: "agentplane"}
	dialer := &net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}
	transport := &http.Transport{
		DialContext: dialer.DialContext, TLSHandshakeTimeout: 10 * time.Second, ResponseHeaderTimeout: o.Timeout,
		MaxIdleConns: 256, MaxIdleConnsPerHost: 64, IdleConnTimeout: 90 * time.Second, ForceAttemptHTTP2: true,
	}
	cfg := aws.Config{
		Region:      o.Region,
		Credentials: aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) { return creds, nil }),
		HTTPClient:  &http.Client{Transport: transport},
		// The blob's own sha256 is sent and checked (ChecksumSHA256); no
		// second, SDK-chosen checksum is asked of servers that may not
		// know it.
		RequestChecksumCalculation: aws.RequestChecksumCalculationWhenRequired,
		ResponseChecksumValidation: aws.ResponseChecksumValidationWhenRequired,
		RetryMaxAttempts:           3,
	}
	client := s3.NewFromConfig(cfg, func(so *s3.Options) {
		if o.Endpoint != "" {
			so.BaseEndpoint = aws.String(strings.TrimSuffix(o.Endpoint, "/"))
		}
		so.UsePathStyle = o.PathStyle
	})
	s := &Store{client: client, bucket: o.Bucket, prefix: o.Prefix, timeout: o.Timeout}
	hctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	if _, err := client.HeadBucket(hctx, &s3.HeadBucketInput{Bucket: aws.String(o.Bucket)}); err != nil {
		return nil, fmt.Errorf("blobs %s: the bucket does not answer: %s; check the endpoint, the bucket name and the credentials", o, describe(err))
	}
	return s, nil
}

// Blobs implements store.Blobs.
func (s *Store) Blobs(tenant string) store.BlobStore {
	if err := store.CheckTenant(tenant); err != nil {
		return store.RefuseBlobs(fmt.Errorf("s3 blobs: %w", err))
	}
	return &tenantBlobs{s: s, tenant: tenant}
}

// Key returns the object key of tenant's blob sum (for tamper tests and
// tooling), or "" for an invalid tenant name.
func (s *Store) Key(tenant string, sum [32]byte) string {
	if store.CheckTenant(tenant) != nil {
		return ""
	}
	k := tenant + "/" + hex.EncodeToString(sum[:])
	if s.prefix != "" {
		k = s.prefix + "/" + k
	}
	return k
}

type tenantBlobs struct {
	s      *Store
	tenant string
}

// PutBlob implements store.BlobStore. The object is always written, with
// the blob's sha256 for the server to check on arrival.
func (b *tenantBlobs) PutBlob(ctx context.Context, data []byte) ([32]byte, error) {
	sum := sha256.Sum256(data)
	if len(data) > store.MaxBlobSize {
		return sum, fmt.Errorf("blob of %d bytes: larger than the %d a blob may hold", len(data), store.MaxBlobSize)
	}
	ctx, cancel := context.WithTimeout(ctx, b.s.timeout)
	defer cancel()
	_, err := b.s.client.PutObject(ctx, &s3.PutObjectInput{
		Bucket: aws.String(b.s.bucket), Key: aws.String(b.s.Key(b.tenant, sum)),
		Body: bytes.NewReader(data), ContentLength: aws.Int64(int64(len(data))),
		ContentType:    aws.String("application/octet-stream"),
		ChecksumSHA256: aws.String(base64.StdEncoding.EncodeToString(sum[:])),
	})
	if err != nil {
		return sum, fmt.Errorf("s3 blobs: put %x: %w", sum[:8], err)
	}
	return sum, nil
}

// GetBlob implements store.BlobStore: at most store.MaxBlobSize bytes are
// read, hashed, and refused with store.ErrCorrupt unless they match sum.
func (b *tenantBlobs) GetBlob(ctx context.Context, sum [32]byte) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, b.s.timeout)
	defer cancel()
	out, err := b.s.client.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(b.s.bucket), Key: aws.String(b.s.Key(b.tenant, sum))})
	if err != nil {
		return nil, b.fail("get", sum, err)
	}
	defer out.Body.Close()
	if out.ContentLength != nil && *out.ContentLength > store.MaxBlobSize {
		return nil, fmt.Errorf("blob %x: %w", sum, store.ErrCorrupt)
	}
	data, err := io.ReadAll(io.LimitReader(out.Body, store.MaxBlobSize+1))
	if err != nil {
		return nil, fmt.Errorf("s3 blobs: read %x: %w", sum[:8], err)
	}
	if len(data) > store.MaxBlobSize || sha256.Sum256(data) != sum {
		return nil, fmt.Errorf("blob %x: %w", sum, store.ErrCorrupt)
	}
	return data, nil
}

// BlobSize implements store.BlobStore.
func (b *tenantBlobs) BlobSize(ctx context.Context, sum [32]byte) (int64, error) {
	ctx, cancel := context.WithTimeout(ctx, b.s.timeout)
	defer cancel()
	out, err := b.s.client.HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String(b.s.bucket), Key: aws.String(b.s.Key(b.tenant, sum))})
	if err != nil {
		return 0, b.fail("size", sum, err)
	}
	if out.ContentLength == nil {
		return 0, fmt.Errorf("s3 blobs: size %x: the server sent no length", sum[:8])
	}
	return *out.ContentLength, nil
}

// DeleteBlob removes the tenant's object sum (retention and erasure); S3
// answers a delete of a missing key with success, and so does this.
func (b *tenantBlobs) DeleteBlob(ctx context.Context, sum [32]byte) error {
	ctx, cancel := context.WithTimeout(ctx, b.s.timeout)
	defer cancel()
	_, err := b.s.client.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String(b.s.bucket), Key: aws.String(b.s.Key(b.tenant, sum))})
	if err != nil {
		if e := b.fail("delete", sum, err); errors.Is(e, store.ErrNotFound) {
			return nil
		}
		return b.fail("delete", sum, err)
	}
	return nil
}

// fail turns a missing key into the same ErrNotFound the blob folder
// gives, and anything else into an error naming the operation.
func (b *tenantBlobs) fail(op string, sum [32]byte, err error) error {
	var ae smithy.APIError
	if errors.As(err, &ae) && (ae.ErrorCode() == "NoSuchKey" || ae.ErrorCode() == "NotFound") {
		return fmt.Errorf("blob %x: %w", sum, store.ErrNotFound)
	}
	return fmt.Errorf("s3 blobs: %s %x: %w", op, sum[:8], err)
}

// describe is an error's text for messages: the server's code and message
// when it answered, else the transport's error.
func describe(err error) string {
	var ae smithy.APIError
	if errors.As(err, &ae) {
		return fmt.Sprintf("%s: %s", ae.ErrorCode(), ae.ErrorMessage())
	}
	return err.Error()
}
