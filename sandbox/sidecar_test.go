package sandbox

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

func goodSidecar() Sidecar {
	t0 := time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)
	return Sidecar{Version: 1, StartedAt: t0, EndedAt: t0.Add(time.Second), ExecMS: 1000, ExitCode: 0, PeakMemoryBytes: 1 << 20,
		Files:    []SidecarFile{{Path: "out/result.csv", Size: 12, Change: "created"}},
		Network:  []SidecarNet{{Host: "api.example.com", Port: 443, Allowed: false, Status: 403}},
		Packages: []SidecarPackage{{Manager: "pip", Name: "pandas", Version: "2.2.0"}}}
}

func TestParseSidecar(t *testing.T) {
	good, _ := json.Marshal(goodSidecar())
	if _, err := ParseSidecar(good); err != nil {
		t.Fatalf("good sidecar: %v", err)
	}
	mutate := func(f func(m map[string]any)) []byte {
		var m map[string]any
		json.Unmarshal(good, &m)
		f(m)
		b, _ := json.Marshal(m)
		return b
	}
	for name, data := range map[string][]byte{
		"forged trace id": mutate(func(m map[string]any) { m["trace_id"] = "4bf92f3577b34da6a3ce929d0e0e4736" }),
		"parent span":     mutate(func(m map[string]any) { m["spans"] = []any{map[string]any{"parent": "x"}} }),
		"version":         mutate(func(m map[string]any) { m["version"] = 2 }),
		"negative exec":   mutate(func(m map[string]any) { m["exec_ms"] = -5 }),
		"exit 999":        mutate(func(m map[string]any) { m["exit_code"] = 999 }),
		"absolute path": mutate(func(m map[string]any) {
			m["files"] = []any{map[string]any{"path": "/etc/shadow", "size": 1, "change": "created"}}
		}),
		"dotdot path": mutate(func(m map[string]any) {
			m["files"] = []any{map[string]any{"path": "../x", "size": 1, "change": "created"}}
		}),
		"newline in path": mutate(func(m map[string]any) {
			m["files"] = []any{map[string]any{"path": "a\nINFO forged", "size": 1, "change": "created"}}
		}),
		"escape in host": mutate(func(m map[string]any) {
			m["network"] = []any{map[string]any{"host": "\x1b[2Jx", "port": 1, "allowed": true}}
		}),
		"bad change": mutate(func(m map[string]any) {
			m["files"] = []any{map[string]any{"path": "a", "size": 1, "change": "exfiltrated"}}
		}),
		"time backwards":   mutate(func(m map[string]any) { m["ended_at"] = "2000-01-01T00:00:00Z" }),
		"trailing data":    append(append([]byte{}, good...), []byte(`{"version":1}`)...),
		"not an object":    []byte(`[1,2,3]`),
		"invalid utf8":     []byte("{\"version\":1,\xff}"),
		"too many entries": mutate(func(m map[string]any) { m["packages"] = make([]any, 501) }),
		"oversized":        []byte(`{"version":1,"pad":"` + strings.Repeat("a", MaxSidecarBytes) + `"}`),
	} {
		if _, err := ParseSidecar(data); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func FuzzParseSidecar(f *testing.F) {
	good, _ := json.Marshal(goodSidecar())
	f.Add(good)
	f.Add([]byte(`{"version":1}`))
	f.Add([]byte(`{"version":1,"started_at":"2026-01-01T00:00:00Z","ended_at":"2026-01-01T00:00:00Z","files":[{"path":"a/../b","size":1,"change":"created"}]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := ParseSidecar(data)
		if err != nil {
			return
		}
		// Whatever is accepted is within bounds and printable.
		if s.ExitCode < 0 || s.ExitCode > 255 || len(s.Files) > maxSidecarFiles {
			t.Fatalf("out of range: %+v", s)
		}
		for _, fl := range s.Files {
			if !cleanRelPath(fl.Path) {
				t.Fatalf("path %q", fl.Path)
			}
		}
		if _, err := json.Marshal(s); err != nil {
			t.Fatal(err)
		}
	})
}

func TestGuestEnv(t *testing.T) {
	env := GuestEnv(Exec{Env: []string{"A=1", "PATH=/evil", "bad", "=x", "A=2"}, Traceparent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", Egress: true})
	got := strings.Join(env, " ")
	for _, want := range []string{"A=2", "PATH=/evil", "HOME=/workspace", "TRACEPARENT=00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "HTTPS_PROXY=http://127.0.0.1:3128"} {
		if !strings.Contains(got, want) {
			t.Errorf("env %q lacks %s", got, want)
		}
	}
	if strings.Contains(got, "bad") || strings.Count(got, "A=") != 1 {
		t.Errorf("env %q", got)
	}
	for _, tp := range []string{"", "00-00000000000000000000000000000000-00f067aa0ba902b7-01", "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01"} {
		if ValidTraceparent(tp) {
			t.Errorf("ValidTraceparent(%q)", tp)
		}
	}
}
