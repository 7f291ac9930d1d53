package jsonfields

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
)

// narrow is what Decode is compared with: json.Unmarshal into a struct
// holding only the fields asked for.
type narrow struct {
	Hash     string           `json:"prompt_hash"`
	Cost     int64            `json:"cost_micros"`
	Known    bool             `json:"cost_known"`
	Delta    []int64          `json:"delta"`
	Response *struct{ N int } `json:"response"`
	Any      any              `json:"x"`
	Raw      json.RawMessage  `json:"raw"`
	Index    int              `json:"index"`
}

func decodeNarrow(data []byte) (narrow, error) {
	var n narrow
	var raw Raw
	err := Decode(data, Field{"prompt_hash", &n.Hash}, Field{"cost_micros", &n.Cost}, Field{"cost_known", &n.Known},
		Field{"delta", &n.Delta}, Field{"response", &n.Response}, Field{"x", &n.Any}, Field{"raw", &raw}, Field{"index", &n.Index})
	if raw != nil {
		n.Raw = json.RawMessage(raw)
	}
	return n, err
}

var seeds = []string{
	`{"alias":"a","delta":[1,2],"prompt_hash":"ab12","prompt_bytes":10,"response":{"content":[{"type":"text","text":"hi \"there\" \u00e9"}],"N":3},"cost_micros":5,"cost_known":true}`,
	`null`, ` null `, `nul`, `[]`, `"s"`, `12`, `true`, `{}`, ` { } `, `{`, `}`, ``, ` `, `{"a":}`, `{"a":1,}`, `{"a" 1}`, `{a:1}`,
	`{"prompt_hash":1}`, `{"prompt_hash":null}`, `{"prompt_hash":"a","prompt_hash":"b"}`, `{"prompt_hash":"a","prompt_hash":null}`,
	`{"PROMPT_HASH":"k"}`, `{"prompt_haſh":"fold"}`, `{"prompt\u005fhash":"esc"}`, `{"Prompt_Hash":"a","prompt_hash":"b"}`,
	`{"cost_micros":1.5}`, `{"cost_micros":1e3}`, `{"cost_micros":-0}`, `{"cost_micros":01}`, `{"cost_micros":-}`, `{"cost_micros":1.}`, `{"cost_micros":1e}`, `{"cost_micros":1e+}`,
	`{"cost_micros":"7","cost_known":true}`, `{"delta":[1,"x",3],"cost_micros":4}`, `{"response":{"N":1},"response":{"M":2}}`, `{"response":null}`, `{"response":5}`,
	`{"cost_micros":9223372036854775807}`, `{"cost_micros":9223372036854775808}`, `{"cost_micros":-9223372036854775808}`, `{"cost_micros":-9223372036854775809}`,
	`{"index":-3}`, `{"index":3.0}`, `{"index":"3"}`, `{"index":99999999999999999999}`, `{"cost_known":"true"}`, `{"cost_known":1}`, `{"cost_known":null,"prompt_hash":"a\"b"}`, `{"prompt_hash":"\u00e9t\u00e9"}`, `{"prompt_hash":"été"}`,
	`{"a":1,"b":2,"c":3,"d":4,"e":5,"f":6,"g":7,"h":8,"prompt_hash":"1","prompt_hash":"2","prompt_hash":"3","prompt_hash":"4","prompt_hash":"5","prompt_hash":"6","prompt_hash":"7","prompt_hash":"8","prompt_hash":"9","cost_micros":10}`,
	`{"x":{"deep":[1,{"a":null}]},"raw":[1, 2]}`, `{"raw":null}`, `{"raw":"r","raw":{}}`,
	"{\"a\":\"\x01\"}", "{\"a\":\"\xff\xfe\"}", "{\"\xff\":1}", `{"a":"\x"}`, `{"a":"\u12"}`, `{"a":"\u12g4"}`, `{"a":"\ud800"}`,
	`{"a":tru}`, `{"a":truex}`, `{"a":[1 2]}`, `{"a":[,]}`, `{} {}`, `{}x`, "\t{\r\n}\n",
	strings.Repeat("[", 10000) + strings.Repeat("]", 10000),
	strings.Repeat("[", 10001) + strings.Repeat("]", 10001),
	`{"x":` + strings.Repeat("[", 9999) + strings.Repeat("]", 9999) + `}`,
	`{"x":` + strings.Repeat("[", 10000) + strings.Repeat("]", 10000) + `}`,
}

func check(t *testing.T, data []byte) {
	t.Helper()
	var want narrow
	wantErr := json.Unmarshal(data, &want)
	got, err := decodeNarrow(data)
	if (err == nil) != (wantErr == nil) {
		t.Fatalf("%q: Decode error %v, json.Unmarshal error %v", data, err, wantErr)
	}
	var se *json.SyntaxError
	if errors.As(wantErr, &se) {
		var mine *SyntaxError
		if !errors.As(err, &mine) {
			t.Fatalf("%q: json.Unmarshal finds a syntax error (%v), Decode %v", data, wantErr, err)
		}
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("%q: Decode gives %+v, json.Unmarshal %+v", data, got, want)
	}
}

func TestDecodeAsUnmarshal(t *testing.T) {
	for _, s := range seeds {
		check(t, []byte(s))
	}
}

// FuzzDecode holds Decode to json.Unmarshal into the same narrow struct:
// the same documents refused, the same values decoded.
func FuzzDecode(f *testing.F) {
	for _, s := range seeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) { check(t, data) })
}

func TestRawAliasesTheDocument(t *testing.T) {
	data := []byte(`{"response": {"usage": {"input_tokens": 3}} , "other": 1}`)
	var raw Raw
	if err := Decode(data, Field{"response", &raw}); err != nil {
		t.Fatal(err)
	}
	if string(raw) != `{"usage": {"input_tokens": 3}}` {
		t.Fatalf("raw = %q", raw)
	}
}

func BenchmarkDecode(b *testing.B) {
	data := []byte(`{"alias":"default","delta":[1,2,3,4,5],"prompt_hash":"` + strings.Repeat("ab", 32) + `","prompt_bytes":123456,"response":{"content":[{"type":"text","text":"` +
		strings.Repeat("reasoning ", 120) + `"},{"type":"tool_use","id":"toolu_1","name":"echo","input":{"text":"1 dddd"}}],"stop_reason":"tool_use","usage":{"input_tokens":1000,"output_tokens":300}},"cost_micros":1,"currency":"USD","cost_known":true,"latency_ms":0}`)
	b.Run("jsonfields", func(b *testing.B) {
		b.SetBytes(int64(len(data)))
		for b.Loop() {
			var h string
			if err := Decode(data, Field{"prompt_hash", &h}); err != nil || h == "" {
				b.Fatal(err)
			}
		}
	})
	b.Run("unmarshal", func(b *testing.B) {
		b.SetBytes(int64(len(data)))
		for b.Loop() {
			var v struct {
				H string `json:"prompt_hash"`
			}
			if err := json.Unmarshal(data, &v); err != nil || v.H == "" {
				b.Fatal(err)
			}
		}
	})
}
