package platform

import (
	"bytes"
	"context"
	"fmt"
	"os"

	"gopkg.in/yaml.v3"
)

// StaticDirectory is a fixed tenant -> user -> groups map (demo and tests).
type StaticDirectory map[string]map[string][]string

// InGroup implements runs.Directory.
func (s StaticDirectory) InGroup(_ context.Context, tenant, user, group string) (bool, error) {
	for _, g := range s[tenant][user] {
		if g == group {
			return true, nil
		}
	}
	return false, nil
}

// LoadDirectoryFile reads a directory.yaml: tenant -> user -> groups.
//
//	example-bank:
//	  supervisor@example-bank.in: [card-ops-supervisors]
func LoadDirectoryFile(path string) (StaticDirectory, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	var d StaticDirectory
	if err := dec.Decode(&d); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return d, nil
}
