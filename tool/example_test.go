package tool_test

import (
	"encoding/json"
	"fmt"

	"github.com/agentplane/agentplane/tool"
)

func ExampleParseManifests() {
	src := `
name: issue_refund
connector: core-banking
tier: 2
timeout_ms: 5000
input_schema:
  type: object
  properties:
    amount_inr: {type: number}
  required: [amount_inr]
approval: required_above
approval_threshold: {amount_inr: 10000}
side_effects: external
`
	ms, err := tool.ParseManifests("tools/refund.yaml", []byte(src))
	if err != nil {
		fmt.Println(err)
		return
	}
	refund := ms[0]
	fmt.Println(refund.Replayable())
	fmt.Println(refund.ValidateArgs(json.RawMessage(`{"amount_inr":"lots"}`)))
	fmt.Println(refund.NeedsApproval(json.RawMessage(`{"amount_inr":12499}`)))
	// Output:
	// false
	// invalid arguments for issue_refund: "amount_inr": expected number, got string
	// true issue_refund needs approval: amount_inr is 12499, above the threshold 10000
}
