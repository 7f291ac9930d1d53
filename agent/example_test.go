package agent_test

import (
	"fmt"

	"github.com/agentplane/agentplane/agent"
)

func ExampleParseAction() {
	a, err := agent.ParseAction("require_approval(group=card-ops-supervisors)")
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(a.Kind, a.Group, a.Expires)
	fmt.Println(a)
	// Output:
	// require_approval card-ops-supervisors 24h0m0s
	// require_approval(group: card-ops-supervisors, expires: 24h)
}
