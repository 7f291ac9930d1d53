// Package helpdesk is the second example of agentplane: a hospital chain's
// IT helpdesk (one of seed 004's tenants). Its agent works a ticket — an
// admin account locked out after a phone swap — checks the attached
// sign-in log with run_python in a tier-2 sandbox, resets the account's MFA
// once IT security has approved it, answers the ticket, and ignores the
// instruction planted at the ticket's end.
//
// The package embeds files/agent.yaml, files/tools.yaml, files/turns.yaml
// and files/models.yaml. The tier-1 tools are the simulated service desk's
// (package desk, which is also the example's eval world); the eval set, its
// simulated model and two agent versions are in evals/ and simmodel/.
package helpdesk

import (
	"embed"
	"io/fs"
)

//go:embed files/*.yaml
var files embed.FS

// FS returns the definition files as a file system rooted at files/.
func FS() fs.FS {
	sub, err := fs.Sub(files, "files")
	if err != nil {
		panic(err) // unreachable: "files" is an embedded directory
	}
	return sub
}
