package eval_test

import (
	"os"
	"testing"

	"github.com/agentplane/agentplane/eval"
	cdworld "github.com/agentplane/agentplane/examples/carddispute/world"
)

// FuzzParseSet: any input is either refused with an error or gives a set
// whose tasks all have an id, a text and bound expectations.
func FuzzParseSet(f *testing.F) {
	if b, err := os.ReadFile("../examples/carddispute/evals/card-dispute.yaml"); err == nil {
		f.Add(b)
	}
	f.Add([]byte(header + "tasks:" + okTask))
	f.Add([]byte(header + "tasks:" + okTask + "    expect: {calls: [{tool: x, args: {a: {not: {any_of: [1, {fields: {b: [c]}}]}}}}]}\n"))
	f.Add([]byte(header + "tasks:\n  - &a {id: one, task: t, world: {customer: c_88213}}\n  - *a\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := eval.ParseSet("fuzz.yaml", data, cdworld.World{})
		if err != nil {
			return
		}
		if len(s.Tasks) == 0 {
			t.Fatal("accepted a set without tasks")
		}
		for _, task := range s.Tasks {
			if task.ID == "" || task.Text == "" || task.Expect.Status == "" || task.Approvals.Decider == "" {
				t.Fatalf("accepted an incomplete task: %+v", task)
			}
		}
	})
}
