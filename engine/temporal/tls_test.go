package temporal

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"io"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// testPKI is a CA, a server certificate it signed for 127.0.0.1 and
// temporal.test, and a client certificate it signed, written as PEM files.
type testPKI struct {
	caFile, certFile, keyFile string // the CA; the client's pair
	pool                      *x509.CertPool
	server                    tls.Certificate
}

func newTestPKI(t *testing.T) testPKI {
	t.Helper()
	dir := t.TempDir()
	caKey := newKey(t)
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "agentplane test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		t.Fatal(err)
	}
	issue := func(serial int64, tmpl *x509.Certificate) (certPEM, keyPEM []byte) {
		k := newKey(t)
		tmpl.SerialNumber, tmpl.NotBefore, tmpl.NotAfter = big.NewInt(serial), time.Now().Add(-time.Hour), time.Now().Add(time.Hour)
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &k.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		kder, err := x509.MarshalECPrivateKey(k)
		if err != nil {
			t.Fatal(err)
		}
		return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder})
	}
	srvCert, srvKey := issue(2, &x509.Certificate{Subject: pkix.Name{CommonName: "temporal.test"}, DNSNames: []string{"temporal.test"},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}})
	cliCert, cliKey := issue(3, &x509.Certificate{Subject: pkix.Name{CommonName: "agentplane worker"},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
	p := testPKI{caFile: filepath.Join(dir, "ca.pem"), certFile: filepath.Join(dir, "client.pem"), keyFile: filepath.Join(dir, "client.key"),
		pool: x509.NewCertPool()}
	p.pool.AddCert(ca)
	for name, data := range map[string][]byte{p.caFile: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}), p.certFile: cliCert, p.keyFile: cliKey} {
		if err := os.WriteFile(name, data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if p.server, err = tls.X509KeyPair(srvCert, srvKey); err != nil {
		t.Fatal(err)
	}
	return p
}

func newKey(t *testing.T) *ecdsa.PrivateKey {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// tlsListener accepts TLS connections on loopback with cfg and completes
// each handshake; it returns the address and the handshakes' errors.
func tlsListener(t *testing.T, cfg *tls.Config) (string, <-chan error) {
	t.Helper()
	ln, err := tls.Listen("tcp", "127.0.0.1:0", cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	errs := make(chan error, 16)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				c.SetDeadline(time.Now().Add(10 * time.Second))
				err := c.(*tls.Conn).Handshake()
				errs <- err
				if err == nil {
					io.Copy(io.Discard, c) // held open until the client closes
				}
			}()
		}
	}()
	return ln.Addr().String(), errs
}

// handshake dials addr with c's TLS configuration and completes the
// handshake, bounded in time.
func handshake(t *testing.T, c Config) error {
	t.Helper()
	tc, err := c.tlsConfig()
	if err != nil {
		t.Fatalf("tlsConfig(%+v): %v", c, err)
	}
	d := &tls.Dialer{NetDialer: &net.Dialer{Timeout: 10 * time.Second}, Config: tc}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := d.DialContext(ctx, "tcp", c.HostPort)
	if err != nil {
		return err
	}
	defer conn.Close()
	// TLS 1.3 reports a refused client certificate on the first read.
	conn.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
	var b [1]byte
	if _, err := conn.Read(b[:]); err != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
		return err
	}
	return nil
}

// TestTLSConfigHandshake: the dialer's TLS configuration verifies a server
// against ca_file (and server_name), refuses it without (the system roots
// do not know the test CA) or under another name, and presents the client
// certificate of cert_file/key_file to a server that requires one.
func TestTLSConfigHandshake(t *testing.T) {
	t.Parallel()
	pki := newTestPKI(t)
	addr, _ := tlsListener(t, &tls.Config{Certificates: []tls.Certificate{pki.server}, MinVersion: tls.VersionTLS12})
	mtlsAddr, mtlsErrs := tlsListener(t, &tls.Config{Certificates: []tls.Certificate{pki.server}, MinVersion: tls.VersionTLS12,
		ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: pki.pool})
	base := Config{Namespace: "default", TaskQueue: "q", TLS: true}

	c := base
	c.HostPort, c.CAFile = addr, pki.caFile
	if err := handshake(t, c); err != nil {
		t.Fatalf("handshake verified with ca_file: %v", err)
	}
	c.ServerName = "temporal.test"
	if err := handshake(t, c); err != nil {
		t.Fatalf("handshake with ca_file and server_name: %v", err)
	}
	c.ServerName = "other.test"
	var host x509.HostnameError
	if err := handshake(t, c); !errors.As(err, &host) {
		t.Fatalf("handshake under a name the certificate lacks = %v, want a hostname error", err)
	}
	c = base
	c.HostPort = addr
	var unknown x509.UnknownAuthorityError
	if err := handshake(t, c); !errors.As(err, &unknown) {
		t.Fatalf("handshake without ca_file = %v, want the server refused (unknown authority)", err)
	}

	c = base
	c.HostPort, c.CAFile = mtlsAddr, pki.caFile
	if err := handshake(t, c); err == nil {
		t.Fatal("a server requiring a client certificate accepted none")
	}
	if err := <-mtlsErrs; err == nil {
		t.Fatal("the server's side of a handshake without a client certificate succeeded")
	}
	c.CertFile, c.KeyFile = pki.certFile, pki.keyFile
	if err := handshake(t, c); err != nil {
		t.Fatalf("mutual TLS with cert_file and key_file: %v", err)
	}
	if err := <-mtlsErrs; err != nil {
		t.Fatalf("the server refused the client certificate: %v", err)
	}

	// Files that are not what they should be fail with what to give.
	bad := filepath.Join(t.TempDir(), "bad.pem")
	if err := os.WriteFile(bad, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []Config{
		{HostPort: addr, TLS: true, CAFile: bad},
		{HostPort: addr, TLS: true, CAFile: bad + ".missing"},
		{HostPort: addr, TLS: true, CertFile: bad, KeyFile: pki.keyFile},
	} {
		if _, err := c.tlsConfig(); err == nil {
			t.Errorf("tlsConfig(%+v) accepted it", c)
		}
	}
	if tc, err := (Config{HostPort: addr}).tlsConfig(); tc != nil || err != nil {
		t.Errorf("tlsConfig without tls=1 = %v, %v; want no TLS", tc, err)
	}
}

// TestAPIKey: the key comes from api_key_file or AGENTPLANE_TEMPORAL_API_KEY,
// never both, only over TLS, and only as printable ASCII.
func TestAPIKey(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	file := func(body string) string {
		p := filepath.Join(dir, strings.ReplaceAll(t.Name(), "/", "_")+body[:min(4, len(body))])
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	env := func(v string) func(string) string {
		return func(k string) string {
			if k == APIKeyEnv {
				return v
			}
			return ""
		}
	}
	tlsOn := Config{HostPort: "h:1", TLS: true}
	withFile := tlsOn
	withFile.APIKeyFile = file("key-from-file\n")
	cases := []struct {
		c      Config
		env    string
		want   string
		errHas string
	}{
		{c: tlsOn, want: ""},
		{c: tlsOn, env: " key-from-env ", want: "key-from-env"},
		{c: withFile, want: "key-from-file"},
		{c: withFile, env: "k", errHas: "keep one"},
		{c: Config{HostPort: "h:1"}, env: "k", errHas: "add tls=1"},
		{c: tlsOn, env: "k\x01ey", errHas: "printable ASCII"},
		{c: Config{HostPort: "h:1", TLS: true, APIKeyFile: file("\n\n")}, errHas: "is empty"},
		{c: Config{HostPort: "h:1", TLS: true, APIKeyFile: file(strings.Repeat("k", maxAPIKeyBytes+1))}, errHas: "over"},
		{c: Config{HostPort: "h:1", TLS: true, APIKeyFile: filepath.Join(dir, "missing")}, errHas: "api_key_file"},
	}
	for i, tc := range cases {
		got, err := tc.c.apiKey(env(tc.env))
		switch {
		case tc.errHas != "" && (err == nil || !strings.Contains(err.Error(), tc.errHas)):
			t.Errorf("case %d: apiKey = %q, %v; want an error saying %q", i, got, err, tc.errHas)
		case tc.errHas == "" && (err != nil || got != tc.want):
			t.Errorf("case %d: apiKey = %q, %v; want %q", i, got, err, tc.want)
		}
		if err != nil && tc.env != "" && strings.Contains(err.Error(), strings.TrimSpace(tc.env)) && len(strings.TrimSpace(tc.env)) > 1 {
			t.Errorf("case %d: the error repeats the key: %v", i, err)
		}
	}
}

// TestDialTLSWithAPIKey: Dial over TLS verified with ca_file reaches a gRPC
// server on loopback and sends the API key as a bearer token there; the
// server answers every call with an error, so Dial fails after the
// handshake, having shown what it sent.
func TestDialTLSWithAPIKey(t *testing.T) {
	t.Parallel()
	pki := newTestPKI(t)
	var mu sync.Mutex
	var auth []string
	srv := grpc.NewServer(grpc.Creds(credentials.NewServerTLSFromCert(&pki.server)),
		grpc.UnknownServiceHandler(func(_ any, stream grpc.ServerStream) error {
			md, _ := metadata.FromIncomingContext(stream.Context())
			mu.Lock()
			auth = append(auth, md.Get("authorization")...)
			mu.Unlock()
			return status.Error(codes.PermissionDenied, "test server")
		}))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	t.Cleanup(srv.Stop)
	cfg, err := ParseURL("temporal://" + ln.Addr().String() + "?tls=1&server_name=temporal.test&ca_file=" + pki.caFile)
	if err != nil {
		t.Fatal(err)
	}
	getenv := func(k string) string {
		if k == APIKeyEnv {
			return "test-api-key"
		}
		return ""
	}
	cl, err := Dial(context.Background(), cfg, DialOptions{Timeout: 20 * time.Second, Getenv: getenv})
	if err == nil {
		cl.Close()
		t.Fatal("Dial succeeded against a server that refuses every call")
	}
	mu.Lock()
	defer mu.Unlock()
	if len(auth) == 0 || auth[0] != "Bearer test-api-key" {
		t.Fatalf("the server saw authorization %q; want the API key as a bearer token over the verified TLS connection (Dial: %v)", auth, err)
	}
}
