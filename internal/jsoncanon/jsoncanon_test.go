package jsoncanon

import (
	"bytes"
	"encoding/json"
	"testing"
)

// writeString writes exactly what json.Marshal writes for every string.
func TestWriteStringIsMarshal(t *testing.T) {
	strs := []string{"", "plain text 0-9", `a"b`, `a\b`, "<script>", "a&b", "tab\there", "nl\n", "\x7f", "é", "\u2028", "\u2029", "\xff\xfe", "日本"}
	for c := 0; c < 256; c++ {
		strs = append(strs, string([]byte{byte(c)}), "x"+string([]byte{byte(c)})+"y")
	}
	for _, s := range strs {
		var buf bytes.Buffer
		writeString(&buf, s)
		want, _ := json.Marshal(s)
		if !bytes.Equal(buf.Bytes(), want) {
			t.Errorf("writeString(%q) = %s, json.Marshal gives %s", s, buf.Bytes(), want)
		}
	}
}

func TestCanonicalize(t *testing.T) {
	got, err := Canonicalize([]byte(` {"b": "x<y", "a": [1.0, 1e0, "\u00e9", {"z": true, "k\"": null}], "c": "plain"} `))
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"a":[1,1,"é",{"k\"":null,"z":true}],"b":"x\u003cy","c":"plain"}`; string(got) != want {
		t.Fatalf("Canonicalize = %s, want %s", got, want)
	}
}
