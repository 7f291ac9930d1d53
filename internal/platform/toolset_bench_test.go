package platform_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/agentplane/agentplane/examples/carddispute"
	"github.com/agentplane/agentplane/internal/platform"
)

// BenchmarkToolSet is what every run start pays to load the current tool
// manifests (the card-dispute example's seven plus run_python).
func BenchmarkToolSet(b *testing.B) {
	ctx := context.Background()
	dir := b.TempDir()
	p, err := platform.Open(ctx, platform.Options{DataDir: filepath.Join(dir, "data")})
	if err != nil {
		b.Fatal(err)
	}
	defer p.Close()
	for _, f := range []string{"tools.yaml", "analysis/run_python.yaml"} {
		data, err := carddispute.ReadFile(f)
		if err != nil {
			b.Fatal(err)
		}
		path := filepath.Join(dir, filepath.Base(f))
		if err := os.WriteFile(path, data, 0o600); err != nil {
			b.Fatal(err)
		}
		if _, err := p.ApplyTools(ctx, path); err != nil {
			b.Fatal(err)
		}
	}
	b.ResetTimer()
	for b.Loop() {
		set, err := p.ToolSet(ctx)
		if err != nil || len(set.Names()) != 8 {
			b.Fatalf("%v %v", set, err)
		}
	}
}
