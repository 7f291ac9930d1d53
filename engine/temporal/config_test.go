package temporal

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/agentplane/agentplane/engine/temporal/temporaltest"
)

func TestParseURL(t *testing.T) {
	ok := []struct {
		in   string
		want Config
	}{
		{"temporal://127.0.0.1:7233?namespace=prod&task_queue=agents", Config{HostPort: "127.0.0.1:7233", Namespace: "prod", TaskQueue: "agents"}},
		{"temporal://temporal.internal:7233", Config{HostPort: "temporal.internal:7233", Namespace: DefaultNamespace, TaskQueue: DefaultTaskQueue}},
		{"temporal://[::1]:7233/?task_queue=q-1.a_b", Config{HostPort: "[::1]:7233", Namespace: DefaultNamespace, TaskQueue: "q-1.a_b"}},
		{"temporal://h:1?namespace=n", Config{HostPort: "h:1", Namespace: "n", TaskQueue: DefaultTaskQueue}},
		{"temporal://h:65535", Config{HostPort: "h:65535", Namespace: DefaultNamespace, TaskQueue: DefaultTaskQueue}},
		{"temporal://ns.tmprl.cloud:7233?namespace=ns&tls=1&api_key_file=/run/secrets/temporal-key",
			Config{HostPort: "ns.tmprl.cloud:7233", Namespace: "ns", TaskQueue: DefaultTaskQueue, TLS: true, APIKeyFile: "/run/secrets/temporal-key"}},
		{"temporal://10.0.0.5:7233?tls=true&ca_file=/etc/ca.pem&server_name=temporal.internal&cert_file=/etc/c.pem&key_file=/etc/k.pem",
			Config{HostPort: "10.0.0.5:7233", Namespace: DefaultNamespace, TaskQueue: DefaultTaskQueue, TLS: true, CAFile: "/etc/ca.pem",
				ServerName: "temporal.internal", CertFile: "/etc/c.pem", KeyFile: "/etc/k.pem"}},
		{"temporal://h:1?tls=0", Config{HostPort: "h:1", Namespace: DefaultNamespace, TaskQueue: DefaultTaskQueue}},
	}
	for _, c := range ok {
		got, err := ParseURL(c.in)
		if err != nil {
			t.Errorf("ParseURL(%q): %v", c.in, err)
			continue
		}
		if got != c.want {
			t.Errorf("ParseURL(%q) = %+v, want %+v", c.in, got, c.want)
		}
		back, err := ParseURL(got.String())
		if err != nil || back != got {
			t.Errorf("ParseURL(%q).String() = %q parses to %+v, %v", c.in, got.String(), back, err)
		}
	}
	bad := []struct{ in, why string }{
		{"", "scheme"},
		{"http://h:7233", "scheme \"http\""},
		{"temporal:h:7233", "no // before the host"},
		{"temporal://h", "no port"},
		{"temporal://h:", "no port"},
		{"temporal://:7233", "no host"},
		{"temporal://h:0", "port \"0\""},
		{"temporal://h:65536", "port \"65536\""},
		{"temporal://h:07233", "port \"07233\""},
		{"temporal://h:72x3", "invalid port"},
		{"temporal://u:p@h:7233", "user info"},
		{"temporal://h:7233/ns", "unexpected path"},
		{"temporal://h:7233#x", "fragment"},
		{"temporal://h:7233?namespace=", "namespace: empty"},
		{"temporal://h:7233?task_queue=", "task_queue: empty"},
		{"temporal://h:7233?namespace=a&namespace=b", "given 2 times"},
		{"temporal://h:7233?tlsx=1", "unknown parameter \"tlsx\""},
		{"temporal://h:7233?tls=yes", "want 1 or 0"},
		{"temporal://h:7233?tls=1&api_key=secret", "API key in the URL"},
		{"temporal://h:7233?apikey=secret", "API key in the URL"},
		{"temporal://h:7233?ca_file=/etc/ca.pem", "ca_file needs TLS"},
		{"temporal://h:7233?api_key_file=/k", "api_key_file needs TLS"},
		{"temporal://h:7233?server_name=x", "server_name needs TLS"},
		{"temporal://h:7233?tls=1&cert_file=/c.pem", "go together"},
		{"temporal://h:7233?tls=1&key_file=/k.pem", "go together"},
		{"temporal://h:7233?tls=1&ca_file=ca.pem", "not an absolute path"},
		{"temporal://h:7233?tls=1&ca_file=", "ca_file: empty"},
		{"temporal://h:7233?tls=1&ca_file=/a%0Ab", "control character"},
		{"temporal://h:7233?tls=1&server_name=a/b", "server_name"},
		{"temporal://h:7233?tls=1&tls=1", "given 2 times"},
		{"temporal://h:7233?namespace=a%20b", "only letters"},
		{"temporal://h:7233?namespace=-a", "only letters"},
		{"temporal://h:7233?task_queue=" + strings.Repeat("q", 201), "more than 200"},
		{"temporal://h:7233?namespace=a;b", "query"},
		{"temporal://[fe80::1%25eth0]:7233", "zoned"},
		{"temporal://h:7233?" + strings.Repeat("x", 3000), "longer than"},
	}
	for _, c := range bad {
		_, err := ParseURL(c.in)
		if err == nil {
			t.Errorf("ParseURL(%q) accepted it", c.in)
			continue
		}
		if !strings.Contains(err.Error(), c.why) || !strings.Contains(err.Error(), "want temporal://HOST:PORT") {
			t.Errorf("ParseURL(%q) = %v; want an error saying %q and the expected form", c.in, err, c.why)
		}
	}
}

func FuzzParseURL(f *testing.F) {
	f.Add("temporal://127.0.0.1:7233?namespace=prod&task_queue=agents")
	f.Add("temporal://[::1]:1/?task_queue=q")
	f.Add("temporal://h:7233?namespace=a&namespace=b")
	f.Fuzz(func(t *testing.T, s string) {
		c, err := ParseURL(s)
		if err != nil {
			return
		}
		if validName(c.Namespace) != nil || validName(c.TaskQueue) != nil {
			t.Fatalf("ParseURL(%q) accepted invalid names: %+v", s, c)
		}
		if _, _, err := net.SplitHostPort(c.HostPort); err != nil {
			t.Fatalf("ParseURL(%q) accepted host:port %q: %v", s, c.HostPort, err)
		}
		back, err := ParseURL(c.String())
		if err != nil || back != c {
			t.Fatalf("ParseURL(%q) = %+v; String() %q parses to %+v, %v", s, c, c.String(), back, err)
		}
	})
}

// TestDialBounded: a port where nothing listens and a listener that accepts
// connections but never speaks both fail within the dial timeout, with an
// error saying what to check.
func TestDialBounded(t *testing.T) {
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closedAddr := closed.Addr().String()
	closed.Close()

	mute, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer mute.Close()
	go func() {
		for {
			c, err := mute.Accept()
			if err != nil {
				return
			}
			defer c.Close() // held open, never answered
		}
	}()

	for _, addr := range []string{closedAddr, mute.Addr().String()} {
		done := make(chan error, 1)
		go func() {
			cl, err := Dial(context.Background(), Config{HostPort: addr, Namespace: "default", TaskQueue: "q"}, DialOptions{Timeout: time.Second})
			if cl != nil {
				cl.Close()
			}
			done <- err
		}()
		select {
		case err := <-done:
			if err == nil {
				t.Fatalf("Dial(%s) succeeded", addr)
			}
			if !strings.Contains(err.Error(), "cannot reach "+addr) || !strings.Contains(err.Error(), "temporal server start-dev") {
				t.Errorf("Dial(%s) = %v; want it to name the address and what to check", addr, err)
			}
		case <-time.After(2 * time.Minute):
			t.Fatalf("Dial(%s) with a 1 s timeout has not returned after 2 minutes", addr)
		}
	}
}

// TestDialDevServer: Dial reaches a real server, and refuses a namespace
// that does not exist there, saying how to create it.
func TestDialDevServer(t *testing.T) {
	srv := temporaltest.Start(t, temporaltest.Options{Namespaces: []string{"agents"}})
	cfg, err := ParseURL("temporal://" + srv.HostPort + "?namespace=agents&task_queue=q")
	if err != nil {
		t.Fatal(err)
	}
	cl, err := Dial(context.Background(), cfg, DialOptions{Timeout: 30 * time.Second})
	if err != nil {
		t.Fatalf("Dial(%v): %v", cfg, err)
	}
	cl.Close()

	cfg.Namespace = "nosuch"
	_, err = Dial(context.Background(), cfg, DialOptions{Timeout: 30 * time.Second})
	if err == nil || !strings.Contains(err.Error(), `namespace "nosuch" does not exist`) || !strings.Contains(err.Error(), "operator namespace create") {
		t.Fatalf("Dial to a missing namespace = %v; want it refused with how to create it", err)
	}
}
