package policy_test

import (
	"context"
	"fmt"

	"github.com/agentplane/agentplane/policy"
)

func ExampleCompile() {
	set, err := policy.Compile([]policy.Rule{
		{Name: "refund-needs-supervisor", When: `tool == "issue_refund" and args.amount_inr > 10000`},
		{Name: "tainted-email", When: `tool == "send_email" and run.read_untrusted_content`},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	args, _ := policy.ArgsFromJSON([]byte(`{"amount_inr": 12499.5, "transaction_id": "txn_1002"}`))
	i, err := set.First(context.Background(), &policy.Input{Tool: "issue_refund", Args: args})
	fmt.Println(set.Name(i), err)

	_, err = policy.Compile([]policy.Rule{{Name: "typo", When: `run.taint`}})
	fmt.Println(err)
	// Output:
	// refund-needs-supervisor <nil>
	// policy "typo": when: <input>:1:4: undefined field 'taint'
}
