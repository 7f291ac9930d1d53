package agent

import (
	"fmt"

	"github.com/agentplane/agentplane/policy"
)

// Policies is a definition's policies with their conditions compiled, in
// the order written: Set.First's index i is Rules[i].
type Policies struct {
	Set   *policy.Set
	Rules []Policy
}

// CompilePolicies compiles and type-checks every policy condition (see
// package policy). An error names each rule that does not compile.
func (d *Definition) CompilePolicies() (*Policies, error) {
	rules := make([]policy.Rule, len(d.Policies))
	for i, p := range d.Policies {
		rules[i] = policy.Rule{Name: p.Name, When: p.When}
	}
	set, err := policy.Compile(rules)
	if err != nil {
		return nil, fmt.Errorf("agent %q version %d: %w", d.Agent, d.Version, err)
	}
	return &Policies{Set: set, Rules: append([]Policy(nil), d.Policies...)}, nil
}
