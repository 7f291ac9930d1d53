package platform_test

import (
	"context"
	"path/filepath"
	"testing"

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
	writeFiles(b, dir, map[string]string{"tools.yaml": "example:tools.yaml", "run_python.yaml": "example:analysis/run_python.yaml"})
	for _, f := range []string{"tools.yaml", "run_python.yaml"} {
		if _, err := p.ApplyTools(ctx, filepath.Join(dir, f)); err != nil {
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
