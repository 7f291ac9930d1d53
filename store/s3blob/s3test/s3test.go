// Package s3test starts a real S3-compatible server for tests: versitygw
// (its posix back end, SigV4 with a random key) on 127.0.0.1, a free port
// and a temporary directory, with one bucket created. The binary is named
// by AGENTPLANE_S3_SERVER (scripts/setup-s3.sh builds it and exports the
// variable). Without it a test skips, or fails when AGENTPLANE_TEST_STRICT=1.
package s3test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/agentplane/agentplane/store/s3blob"
)

// EnvServer names the variable holding the server binary's path.
const EnvServer = "AGENTPLANE_S3_SERVER"

// Bucket is the bucket Start creates.
const Bucket = "agentplane-test"

// Server is a running S3-compatible server.
type Server struct {
	Endpoint        string // http://127.0.0.1:PORT
	AccessKeyID     string
	SecretAccessKey string
	client          *s3.Client
}

// Start starts the server and stops it (by its PID) when t ends.
func Start(t testing.TB) *Server {
	t.Helper()
	bin := os.Getenv(EnvServer)
	if bin == "" {
		missing(t, EnvServer+" is not set")
	}
	if _, err := os.Stat(bin); err != nil {
		missing(t, fmt.Sprintf("%s=%s: %v", EnvServer, bin, err))
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	s := &Server{Endpoint: "http://" + addr, AccessKeyID: "ap" + randomHex(8), SecretAccessKey: randomHex(20)}
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	if err := os.Mkdir(data, 0o700); err != nil {
		t.Fatal(err)
	}
	logf, err := os.Create(filepath.Join(dir, "server.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "--port", addr, "--quiet", "posix", data)
	// The key goes in the environment, not the command line, so that no
	// process list shows it.
	cmd.Env = []string{"PATH=/usr/bin:/bin", "HOME=" + dir,
		"ROOT_ACCESS_KEY_ID=" + s.AccessKeyID, "ROOT_SECRET_ACCESS_KEY=" + s.SecretAccessKey}
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		logf.Close()
		t.Fatalf("start %s: %v", bin, err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		cmd.Process.Kill()
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			t.Errorf("s3 server (pid %d) did not exit", cmd.Process.Pid)
		}
		logf.Close()
	})
	deadline := time.Now().Add(30 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
			break
		}
		select {
		case <-exited:
			log, _ := os.ReadFile(logf.Name())
			t.Fatalf("s3 server exited at start:\n%s", log)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("s3 server not listening on %s after 30s", addr)
		}
		time.Sleep(50 * time.Millisecond)
	}
	s.client = s3.New(s3.Options{
		Region: "us-east-1", BaseEndpoint: aws.String(s.Endpoint), UsePathStyle: true,
		Credentials: aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) {
			return aws.Credentials{AccessKeyID: s.AccessKeyID, SecretAccessKey: s.SecretAccessKey}, nil
		}),
		RequestChecksumCalculation: aws.RequestChecksumCalculationWhenRequired,
		ResponseChecksumValidation: aws.ResponseChecksumValidationWhenRequired,
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := s.client.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String(Bucket)}); err != nil {
		t.Fatalf("create bucket %s: %v", Bucket, err)
	}
	return s
}

func missing(t testing.TB, why string) {
	t.Helper()
	msg := fmt.Sprintf("no S3 server (%s): run `. scripts/setup-s3.sh` to build versitygw and export %s", why, EnvServer)
	if os.Getenv("AGENTPLANE_TEST_STRICT") == "1" {
		t.Fatal(msg)
	}
	t.Skip(msg)
}

// Options are s3blob options for the bucket under prefix, with the
// server's key.
func (s *Server) Options(prefix string) s3blob.Options {
	return s3blob.Options{Bucket: Bucket, Endpoint: s.Endpoint, Prefix: prefix, PathStyle: true,
		AccessKeyID: s.AccessKeyID, SecretAccessKey: s.SecretAccessKey}
}

// URL is the --blobs URL of the bucket under prefix (credentials go in
// the environment: Env).
func (s *Server) URL(prefix string) string {
	q := url.Values{"endpoint": {s.Endpoint}, "path_style": {"true"}}
	if prefix != "" {
		q.Set("prefix", prefix)
	}
	return "s3://" + Bucket + "?" + q.Encode()
}

// Env is the environment that gives a process the server's key.
func (s *Server) Env() []string {
	return []string{"AWS_ACCESS_KEY_ID=" + s.AccessKeyID, "AWS_SECRET_ACCESS_KEY=" + s.SecretAccessKey}
}

// Open opens an s3blob store on the bucket under prefix.
func (s *Server) Open(t testing.TB, prefix string) *s3blob.Store {
	t.Helper()
	st, err := s3blob.Open(context.Background(), s.Options(prefix))
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// PutRaw writes an object behind the blob store's back (tamper tests).
func (s *Server) PutRaw(t testing.TB, key string, data []byte) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if _, err := s.client.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(Bucket), Key: aws.String(key),
		Body: bytes.NewReader(data), ContentLength: aws.Int64(int64(len(data)))}); err != nil {
		t.Fatalf("put %s: %v", key, err)
	}
}

// Keys lists the bucket's keys under prefix.
func (s *Server) Keys(ctx context.Context, prefix string) ([]string, error) {
	var keys []string
	p := s3.NewListObjectsV2Paginator(s.client, &s3.ListObjectsV2Input{Bucket: aws.String(Bucket), Prefix: aws.String(prefix)})
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return nil, err
		}
		for _, o := range page.Contents {
			keys = append(keys, aws.ToString(o.Key))
		}
	}
	return keys, nil
}

func randomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}
