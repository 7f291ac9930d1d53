// Package carddispute is the card-dispute example of agentplane (seed 004):
// a private bank's card-support agent that finds a duplicate ₹12,499
// airline charge, raises a dispute, refunds it with a supervisor's approval
// and emails the customer, while ignoring an instruction planted in the
// support ticket.
//
// The package embeds the example's definitions: files/agent.yaml (the agent,
// version 1), files/tools.yaml (the tool manifests), files/turns.yaml (the
// scripted model turns) and files/models.yaml (model aliases for the
// scripted provider), plus README.md. The tools themselves are implemented
// by the simulated bank in the sub-package bank.
package carddispute

import (
	"embed"
	"io/fs"
	"path"
)

// Files holds files/agent.yaml, files/tools.yaml, files/turns.yaml,
// files/models.yaml, the analysis step's analysis/*.yaml and README.md.
//
//go:embed files/*.yaml files/connectors/*.yaml analysis/*.yaml README.md
var Files embed.FS

// Names of the embedded definition files, as ReadFile accepts them.
const (
	AgentFile  = "agent.yaml"
	ToolsFile  = "tools.yaml"
	TurnsFile  = "turns.yaml"
	ModelsFile = "models.yaml"
	ReadmeFile = "README.md"
)

// ReadFile returns an embedded file. A bare YAML name such as "agent.yaml"
// is looked up in files/; "README.md" and full paths such as
// "files/agent.yaml" are read as given.
func ReadFile(name string) ([]byte, error) {
	if b, err := Files.ReadFile(name); err == nil || path.Dir(name) != "." {
		return b, err
	}
	return Files.ReadFile(path.Join("files", name))
}

// FS returns the definition files as a file system rooted at files/, so that
// a relative reference such as models.yaml's "script: turns.yaml" resolves.
func FS() fs.FS {
	sub, err := fs.Sub(Files, "files")
	if err != nil {
		panic(err) // unreachable: "files" is a valid, embedded directory
	}
	return sub
}
