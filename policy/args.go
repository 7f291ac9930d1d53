package policy

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
)

// maxArgsDepth bounds the nesting ArgsFromJSON accepts.
const maxArgsDepth = 64

// ArgsFromJSON decodes a call's arguments (a JSON object) into the values
// policies see as args: objects become map[string]any, arrays []any,
// strings, bools and null themselves, and every number a float64 (a CEL
// double), as CEL's own JSON mapping does. Comparisons across int and
// double are enabled, so args.amount_inr > 10000 and args.limit == 100
// read naturally; arithmetic mixes only like with like (args.amount_inr +
// 1.0, or double(run.steps)). Whole numbers beyond 2^53 lose precision.
// A number too large for a float64 is an error: a policy must never see
// an infinity it did not expect.
func ArgsFromJSON(raw []byte) (map[string]any, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, fmt.Errorf("arguments are not valid JSON: %w", err)
	}
	if dec.More() {
		return nil, errors.New("arguments are not valid JSON: trailing data")
	}
	obj, ok := v.(map[string]any)
	if !ok {
		return nil, errors.New("arguments must be a JSON object")
	}
	out, err := convert(obj, 0)
	if err != nil {
		return nil, err
	}
	return out.(map[string]any), nil
}

func convert(v any, depth int) (any, error) {
	if depth > maxArgsDepth {
		return nil, fmt.Errorf("arguments nest deeper than %d", maxArgsDepth)
	}
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			c, err := convert(e, depth+1)
			if err != nil {
				return nil, err
			}
			x[k] = c
		}
		return x, nil
	case []any:
		for i, e := range x {
			c, err := convert(e, depth+1)
			if err != nil {
				return nil, err
			}
			x[i] = c
		}
		return x, nil
	case json.Number:
		return Number(string(x))
	default:
		return v, nil
	}
}

// Number converts a JSON number as ArgsFromJSON does.
func Number(s string) (float64, error) {
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || math.IsInf(f, 0) || math.IsNaN(f) {
		return 0, fmt.Errorf("number %s is out of range", s)
	}
	if f == 0 {
		f = 0 // no negative zero
	}
	return f, nil
}
