// Command agentplane is the single binary of agentplane: CLI, server and
// workers. See README.md.
package main

import (
	"context"
	"os"

	"github.com/agentplane/agentplane/internal/cli"
)

func main() {
	os.Exit(cli.Main(context.Background(), os.Args[1:], os.Stdout, os.Stderr))
}
