package jsoncanon

import (
	"strings"
	"testing"
)

func TestNoDuplicateKeys(t *testing.T) {
	for _, ok := range []string{`{}`, `{"a":1,"b":{"a":2}}`, `[{"a":1},{"a":2}]`, `"x"`, `{"a":[1,{"b":null}]}`} {
		if err := NoDuplicateKeys([]byte(ok)); err != nil {
			t.Errorf("%s: %v", ok, err)
		}
	}
	for _, bad := range []string{
		`{"a":1,"a":2}`,
		`{"bindings":{"customer_id":"c_1"},"bindings":{"region":"in"}}`,
		`{"x":{"b":1,"b":1}}`,
		`[{"a":1,"a":1}]`,
		`{"a":1} {"b":2}`,
		`{"a":`,
		strings.Repeat("[", 200) + strings.Repeat("]", 200),
	} {
		if err := NoDuplicateKeys([]byte(bad)); err == nil {
			t.Errorf("%s accepted", bad)
		}
	}
}
