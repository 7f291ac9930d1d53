package redact_test

import (
	"fmt"

	"github.com/agentplane/agentplane/redact"
)

func ExampleRedactor_Output() {
	// The credential the broker minted for this call, which the tool
	// echoed back along with a colour escape.
	cred := "apc-test-credential-0042"
	out, rep := redact.New(cred).Output([]byte(`{"status":"ok","debug":"used `+cred+`","note":"\u001b[31mred\u001b[0m"}`), 1024)
	fmt.Println(string(out))
	fmt.Println(rep.Redactions, rep.Stripped, rep.Truncated)
	// Output:
	// {"status":"ok","debug":"used [REDACTED:credential]","note":"red"}
	// 1 2 false
}
