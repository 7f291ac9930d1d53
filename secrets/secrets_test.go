package secrets_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentplane/agentplane/secrets"
)

func noEnv(string) string { return "" }

func TestFileStore(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	keyFile := filepath.Join(dir, "secrets.key")
	s, err := secrets.OpenFileStore(secrets.FileOptions{Dir: filepath.Join(dir, "secrets"), KeyFile: keyFile, CreateKey: true, Getenv: noEnv})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(keyFile); err == nil {
		t.Fatal("the key file exists before any secret is stored")
	}
	if _, err := s.Get(ctx, "bank", "core-banking"); !errors.Is(err, secrets.ErrNotFound) {
		t.Fatalf("Get from an empty store: %v", err)
	}
	// Another process, opened before any key existed, finds the key the
	// first Put creates.
	early, err := secrets.OpenFileStore(secrets.FileOptions{Dir: filepath.Join(dir, "secrets"), KeyFile: keyFile, CreateKey: true, Getenv: noEnv})
	if err != nil {
		t.Fatal(err)
	}
	value := []byte("core-banking-signing-key-0001")
	if err := s.Put(ctx, "bank", "core-banking", value); err != nil {
		t.Fatal(err)
	}
	if got, err := early.Get(ctx, "bank", "core-banking"); err != nil || !bytes.Equal(got, value) {
		t.Fatalf("a store opened before the key existed: %q, %v", got, err)
	}
	if fi, err := os.Stat(keyFile); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("key file: %v %v", fi, err)
	}
	if err := s.Put(ctx, "bank", "email", []byte("short")); err == nil {
		t.Error("a 5-byte secret was stored")
	}
	got, err := s.Get(ctx, "bank", "core-banking")
	if err != nil || !bytes.Equal(got, value) {
		t.Fatalf("Get = %q, %v", got, err)
	}
	if _, err := s.Get(ctx, "hospital", "core-banking"); !errors.Is(err, secrets.ErrNotFound) {
		t.Errorf("another tenant's secret: %v", err)
	}
	// Nothing on disk is the plain value.
	ents, _ := os.ReadDir(filepath.Join(dir, "secrets"))
	for _, e := range ents {
		data, _ := os.ReadFile(filepath.Join(dir, "secrets", e.Name()))
		if bytes.Contains(data, value) || bytes.Contains(data, []byte(base64.StdEncoding.EncodeToString(value))) {
			t.Fatalf("%s holds the secret in the clear", e.Name())
		}
	}
	if l, _ := s.List(ctx, "bank"); strings.Join(l, ",") != "core-banking" {
		t.Errorf("List = %v", l)
	}
	// A second process opens the same store with the same key file.
	s2, err := secrets.OpenFileStore(secrets.FileOptions{Dir: filepath.Join(dir, "secrets"), KeyFile: keyFile, Getenv: noEnv})
	if err != nil {
		t.Fatal(err)
	}
	if got, err := s2.Get(ctx, "bank", "core-banking"); err != nil || !bytes.Equal(got, value) {
		t.Fatalf("second open: %q, %v", got, err)
	}
	// A different key (from the environment) cannot open it.
	other := base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{7}, 32))
	s3, err := secrets.OpenFileStore(secrets.FileOptions{Dir: filepath.Join(dir, "secrets"), KeyFile: keyFile,
		Getenv: func(k string) string { return map[string]string{secrets.KeyEnv: other}[k] }})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s3.Get(ctx, "bank", "core-banking"); err == nil || errors.Is(err, secrets.ErrNotFound) {
		t.Errorf("wrong key: %v", err)
	}
	// A sealed file moved to another tenant's name does not open.
	if err := s.Put(ctx, "evil", "core-banking", []byte("attacker-controlled-value")); err != nil {
		t.Fatal(err)
	}
	copyFile(t, sealedPath(t, dir, "bank"), sealedPath(t, dir, "evil"))
	if _, err := s.Get(ctx, "evil", "core-banking"); err == nil {
		t.Error("a sealed file opened under another tenant's name")
	}
	if err := s.Delete(ctx, "bank", "core-banking"); err != nil {
		t.Fatal(err)
	}
	if err := s.Delete(ctx, "bank", "core-banking"); !errors.Is(err, secrets.ErrNotFound) {
		t.Errorf("second Delete: %v", err)
	}
	if _, err := secrets.OpenFileStore(secrets.FileOptions{Dir: dir, Getenv: noEnv}); err == nil {
		t.Error("opened without any key")
	}
}

// sealedPath finds the file holding tenant's core-banking secret.
func sealedPath(t *testing.T, dir, tenant string) string {
	t.Helper()
	ents, _ := os.ReadDir(filepath.Join(dir, "secrets"))
	for _, e := range ents {
		data, _ := os.ReadFile(filepath.Join(dir, "secrets", e.Name()))
		if bytes.Contains(data, []byte(`"tenant":"`+tenant+`"`)) {
			return filepath.Join(dir, "secrets", e.Name())
		}
	}
	t.Fatalf("no sealed file for %s", tenant)
	return ""
}

func copyFile(t *testing.T, from, to string) {
	data, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, data, 0o600); err != nil {
		t.Fatal(err)
	}
}

func TestIssueAndVerify(t *testing.T) {
	ctx := context.Background()
	m := secrets.NewMemory()
	secret := []byte("crm-connector-secret-0042")
	if err := m.Put(ctx, "bank", "crm", secret); err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 10, 5, 10, 0, 0, 0, time.UTC)
	b := &secrets.Broker{Store: m, Clock: func() time.Time { return now }}
	c, err := b.Issue(ctx, secrets.Request{Tenant: "bank", User: "priya", Connector: "crm", Tool: "crm_lookup",
		Scopes: []string{"crm:read"}, Agent: "card-dispute-assistant@1", RunID: "run_1", IdempotencyKey: "run_1:3:0", TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if !c.ExpiresAt.Equal(now.Add(time.Minute)) || len(c.Redact) != 2 || c.Redact[0] != c.Token || c.Redact[1] != string(secret) {
		t.Fatalf("credential = %+v", c)
	}
	if strings.Contains(c.Token, string(secret)) {
		t.Fatal("the token carries the secret")
	}
	cl, err := secrets.Verify(secret, c.Token, "crm", "crm_lookup", now.Add(30*time.Second))
	if err != nil || cl.Subject != "priya" || cl.Tenant != "bank" || cl.Actor != "card-dispute-assistant@1" || cl.ID != "run_1:3:0" || !cl.HasScope("crm:read") {
		t.Fatalf("Verify = %+v, %v", cl, err)
	}
	for name, check := range map[string]func() error{
		"expired": func() error {
			_, err := secrets.Verify(secret, c.Token, "crm", "crm_lookup", now.Add(time.Minute))
			return err
		},
		"other audience": func() error { _, err := secrets.Verify(secret, c.Token, "core-banking", "crm_lookup", now); return err },
		"other tool":     func() error { _, err := secrets.Verify(secret, c.Token, "crm", "crm_export", now); return err },
		"wrong secret": func() error {
			_, err := secrets.Verify([]byte("another-secret-value"), c.Token, "crm", "crm_lookup", now)
			return err
		},
		"tampered": func() error {
			_, err := secrets.Verify(secret, strings.Replace(c.Token, "apc1.e", "apc1.f", 1), "crm", "crm_lookup", now)
			return err
		},
	} {
		if check() == nil {
			t.Errorf("%s: verified", name)
		}
	}
	if _, err := b.Issue(ctx, secrets.Request{Tenant: "bank", Connector: "email", Tool: "send_email"}); !errors.Is(err, secrets.ErrNotFound) {
		t.Errorf("no secret: %v", err)
	}
	// TTL is capped.
	long, _ := b.Issue(ctx, secrets.Request{Tenant: "bank", Connector: "crm", Tool: "crm_lookup", TTL: 24 * time.Hour})
	if long.ExpiresAt.After(now.Add(secrets.MaxTTL)) {
		t.Errorf("TTL not capped: %v", long.ExpiresAt)
	}
}

func TestUserSecrets(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	key := base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{7}, 32))
	s, err := secrets.OpenFileStore(secrets.FileOptions{Dir: dir, Getenv: func(string) string { return key }})
	if err != nil {
		t.Fatal(err)
	}
	grant := []byte(`{"access_token":"at_alice_crm_0123456789"}`)
	if err := s.PutUser(ctx, "bank", "alice", "crm", grant); err != nil {
		t.Fatal(err)
	}
	if err := s.PutUser(ctx, "bank", "bob", "crm", []byte(`{"access_token":"at_bob"}`)); err != nil {
		t.Fatal(err)
	}
	if got, err := s.GetUser(ctx, "bank", "alice", "crm"); err != nil || !bytes.Equal(got, grant) {
		t.Fatalf("GetUser = %q, %v", got, err)
	}
	for _, k := range [][3]string{{"bank", "carol", "crm"}, {"bank", "alice", "mail"}, {"hospital", "alice", "crm"}} {
		if _, err := s.GetUser(ctx, k[0], k[1], k[2]); !errors.Is(err, secrets.ErrNotFound) {
			t.Errorf("GetUser%v: %v", k, err)
		}
	}
	// A user's secret is not a tenant's: List and Get do not see it.
	if names, err := s.List(ctx, "bank"); err != nil || len(names) != 0 {
		t.Errorf("List = %v, %v", names, err)
	}
	if _, err := s.Get(ctx, "bank", "crm"); !errors.Is(err, secrets.ErrNotFound) {
		t.Errorf("Get of a user's connector: %v", err)
	}
	// Sealed, and bound to its user: alice's file copied over bob's does not open as bob's.
	files, _ := filepath.Glob(filepath.Join(dir, "users", "*.sealed"))
	if len(files) != 2 {
		t.Fatalf("%d user files", len(files))
	}
	var alice, bob string
	for _, f := range files {
		b, _ := os.ReadFile(f)
		if bytes.Contains(b, []byte("at_alice")) || bytes.Contains(b, []byte("at_bob")) {
			t.Errorf("%s holds a token in plaintext", f)
		}
		if bytes.Contains(b, []byte(`"user":"alice"`)) {
			alice = f
		} else {
			bob = f
		}
	}
	b, _ := os.ReadFile(alice)
	forged := bytes.Replace(b, []byte(`"user":"alice"`), []byte(`"user":"bob"`), 1)
	if err := os.WriteFile(bob, forged, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := s.GetUser(ctx, "bank", "bob", "crm"); err == nil || !strings.Contains(err.Error(), "does not open") {
		t.Errorf("alice's sealed grant renamed to bob: %v", err)
	}
	if err := s.DeleteUser(ctx, "bank", "alice", "crm"); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteUser(ctx, "bank", "alice", "crm"); !errors.Is(err, secrets.ErrNotFound) {
		t.Errorf("second delete: %v", err)
	}
	if err := s.PutUser(ctx, "bank", "a/b", "crm", grant); err == nil {
		t.Error("a user name with a slash was accepted")
	}
}
