package bank

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/agentplane/agentplane/catalog"
)

// OpenIn opens the bank kept in a data directory (bank.db, as the CLI
// keeps it), creating the directory if needed.
func OpenIn(dataDir string) (*Bank, error) {
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return nil, fmt.Errorf("bank: %w", err)
	}
	return Open(filepath.Join(dataDir, "bank.db"))
}

// Find returns the bank among a platform's tool registrars
// (platform.Options.Tools), or nil.
func Find(tools []catalog.Registrar) *Bank {
	for _, r := range tools {
		if b, ok := r.(*Bank); ok {
			return b
		}
	}
	return nil
}
