package golden_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/agentplane/agentplane/internal/golden"
)

// TestWriteReadRoundTrip: a fixture read and written again gives the same
// files byte for byte, and Export of the imported runs gives the same
// fixture: the format loses nothing a hash covers.
func TestWriteReadRoundTrip(t *testing.T) {
	for _, dir := range fixtureDirs(t) {
		t.Run(dir, func(t *testing.T) {
			fx := readFixture(t, dir)
			out := filepath.Join(t.TempDir(), "copy")
			if err := golden.Write(out, fx); err != nil {
				t.Fatal(err)
			}
			sameTree(t, dir, out)

			data := importFixture(t, fx)
			st := openStore(t, data)
			var ids []string
			for _, r := range fx.Runs {
				ids = append(ids, r.Row.ID)
			}
			again, err := golden.Export(context.Background(), st, fx.Name, fx.Description, fx.RecordedWith, ids[len(ids)-1])
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(again, fx) {
				t.Fatalf("export of the imported fixture differs from the fixture")
			}
		})
	}
}

func sameTree(t *testing.T, a, b string) {
	t.Helper()
	files := func(root string) map[string][]byte {
		m := map[string][]byte{}
		err := filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return err
			}
			rel, _ := filepath.Rel(root, p)
			m[rel], err = os.ReadFile(p)
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	fa, fb := files(a), files(b)
	if len(fa) != len(fb) {
		t.Fatalf("%s has %d files, its rewrite %d", a, len(fa), len(fb))
	}
	for name, data := range fa {
		if !bytes.Equal(data, fb[name]) {
			t.Fatalf("%s: the rewrite differs", name)
		}
	}
}

func TestWriteNeverRewrites(t *testing.T) {
	fx := readFixture(t, fixtureDirs(t)[0])
	dir := t.TempDir() // exists
	if err := golden.Write(dir, fx); err == nil || !strings.Contains(err.Error(), "never rewritten") {
		t.Fatalf("Write into an existing directory: %v", err)
	}
}

// TestReadRefusesDamagedFixtures: each damage to a copy of a fixture's files
// is refused by Read (what trace verify cannot see: the specs, manifests and
// the layout).
func TestReadRefusesDamagedFixtures(t *testing.T) {
	src := filepath.Join("testdata", "v1", "loopdetect")
	cases := []struct {
		name   string
		damage func(t *testing.T, dir string)
		want   string
	}{
		{"unknown format", func(t *testing.T, dir string) {
			edit(t, filepath.Join(dir, "fixture.json"), `"agentplane-golden-log/1"`, `"agentplane-golden-log/9"`)
		}, "format"},
		{"unknown field", func(t *testing.T, dir string) {
			edit(t, filepath.Join(dir, "fixture.json"), `"format"`, `"extra": 1, "format"`)
		}, "unknown field"},
		{"agent spec edited", func(t *testing.T, dir string) {
			edit(t, filepath.Join(dir, "agents", "card-dispute-assistant@1.json"), "max_steps", "max_stepz")
		}, "does not match its recorded hash"},
		{"manifest edited", func(t *testing.T, dir string) {
			m, _ := filepath.Glob(filepath.Join(dir, "tools", "*.json"))
			edit(t, m[0], `"name"`, `"Name"`)
		}, "does not match its name"},
		{"blob removed", func(t *testing.T, dir string) {
			b, _ := filepath.Glob(filepath.Join(dir, "blobs", "*"))
			if err := os.Remove(b[0]); err != nil {
				t.Fatal(err)
			}
		}, "holds 0 blobs"},
		{"bad blob name", func(t *testing.T, dir string) {
			b, _ := filepath.Glob(filepath.Join(dir, "blobs", "*"))
			if err := os.Rename(b[0], filepath.Join(dir, "blobs", "not-a-hash")); err != nil {
				t.Fatal(err)
			}
		}, "bad blob reference"},
		{"event line with an unknown field", func(t *testing.T, dir string) {
			edit(t, filepath.Join(dir, "runs", "run_golden_loop.events.jsonl"), `{"seq":1,`, `{"seq":1,"x":2,`)
		}, "unknown field"},
		{"bad event hash", func(t *testing.T, dir string) {
			edit(t, filepath.Join(dir, "runs", "run_golden_loop.events.jsonl"), `"prev_hash":"0000`, `"prev_hash":"00`)
		}, "bad hash"},
		{"run file naming another run", func(t *testing.T, dir string) {
			edit(t, filepath.Join(dir, "runs", "run_golden_loop.json"), `"id": "run_golden_loop"`, `"id": "run_other"`)
		}, "holds run"},
		{"unsafe run id", func(t *testing.T, dir string) {
			edit(t, filepath.Join(dir, "fixture.json"), `"run_golden_loop"`, `"../run_golden_loop"`)
		}, "not a safe file name"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "fx")
			if err := os.CopyFS(dir, os.DirFS(src)); err != nil {
				t.Fatal(err)
			}
			if _, err := golden.Read(dir); err != nil {
				t.Fatalf("the undamaged copy: %v", err)
			}
			tc.damage(t, dir)
			if _, err := golden.Read(dir); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Read of a damaged fixture: %v, want an error naming %q", err, tc.want)
			}
		})
	}
}

func edit(t *testing.T, path, old, new string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(b, []byte(old)) {
		t.Fatalf("%s does not contain %q", path, old)
	}
	if err := os.WriteFile(path, bytes.Replace(b, []byte(old), []byte(new), 1), 0o600); err != nil {
		t.Fatal(err)
	}
}
