package trace

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
)

// maxEditValue bounds one value quoted in an edit summary.
const maxEditValue = 200

// EditSummary says, argument by argument, how an approver's edit changed a
// call: "amount_inr: 9000 -> 60000; reason: (none) -> \"goodwill\"". The
// loop tells the model this and the timeline shows it. Arguments that are
// not JSON objects are compared whole.
func EditSummary(before, after []byte) string {
	var a, b map[string]json.RawMessage
	if json.Unmarshal(before, &a) != nil || json.Unmarshal(after, &b) != nil {
		return fmt.Sprintf("%s -> %s", clip(string(before)), clip(string(after)))
	}
	keys := make([]string, 0, len(a)+len(b))
	for k := range a {
		keys = append(keys, k)
	}
	for k := range b {
		if _, ok := a[k]; !ok {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	var parts []string
	for _, k := range keys {
		old, hadOld := a[k]
		nu, hasNew := b[k]
		switch {
		case !hadOld:
			parts = append(parts, fmt.Sprintf("%s: (none) -> %s", k, clip(string(nu))))
		case !hasNew:
			parts = append(parts, fmt.Sprintf("%s: %s -> (removed)", k, clip(string(old))))
		case string(old) != string(nu):
			parts = append(parts, fmt.Sprintf("%s: %s -> %s", k, clip(string(old)), clip(string(nu))))
		}
	}
	if len(parts) == 0 {
		return "no argument changed"
	}
	return strings.Join(parts, "; ")
}

func clip(s string) string {
	if len(s) <= maxEditValue {
		return s
	}
	i := maxEditValue
	for i > 0 && s[i]&0xC0 == 0x80 { // do not cut a UTF-8 sequence
		i--
	}
	return s[:i] + "…"
}
