package jcs

import (
	"encoding/json"
	"math"
	"testing"
)

// Canonical forms of RFC 8785: keys by UTF-16 code units, numbers as
// ECMAScript writes them, minimal escapes, no whitespace.
func TestMarshal(t *testing.T) {
	for _, c := range []struct {
		in   any
		want string
	}{
		{nil, `null`},
		{map[string]any{}, `{}`},
		{[]any{}, `[]`},
		{map[string]any{"b": 1.0, "a": []any{true, nil, "x"}, "": map[string]any{}}, `{"":{},"a":[true,null,"x"],"b":1}`},
		// U+10000 (a surrogate pair, D800 DC00) sorts before U+E000 in UTF-16.
		{map[string]any{"\ue000": 1.0, "\U00010000": 2.0}, "{\"\U00010000\":2,\"\ue000\":1}"},
		{[]any{math.Copysign(0, -1), 1e21, 1e-7, 0.1, 123456789.0, json.Number("2.50"), int64(1) << 60}, `[0,1e+21,1e-7,0.1,123456789,2.5,1152921504606846976]`},
		{"quote \" backslash \\ control \x01 tab \t é", `"quote \" backslash \\ control \u0001 tab \t é"`},
		{[]any{[]any{[]any{}}, map[string]any{"k": []any{map[string]any{"z": 1.0, "y": 2.0}}}}, `[[[]],{"k":[{"y":2,"z":1}]}]`},
	} {
		got, err := Marshal(c.in)
		if err != nil || string(got) != c.want {
			t.Errorf("Marshal(%#v) = %s, %v; want %s", c.in, got, err, c.want)
		}
	}
	for _, bad := range []any{math.NaN(), math.Inf(1), "bad \xff", map[string]any{"bad \xff": 1.0}, struct{}{}} {
		if got, err := Marshal(bad); err == nil {
			t.Errorf("Marshal(%#v) = %s, want an error", bad, got)
		}
	}
	// Lenient mode writes what strict mode refuses.
	if got, err := Append([]byte("x:"), map[string]any{"k": math.NaN()}, false); err != nil || string(got) != `x:{"k":NaN}` {
		t.Errorf("lenient: %s %v", got, err)
	}
}

// AppendFields writes the non-empty fields, values escaped canonically, and
// refuses invalid UTF-8.
func TestAppendFields(t *testing.T) {
	got, err := AppendFields([]byte("{"), [2]string{"a", ""}, [2]string{"b", "x\"<\n"}, [2]string{"c", "é"})
	if err != nil || string(got) != `{,"b":"x\"<\n","c":"é"` {
		t.Fatalf("%s %v", got, err)
	}
	if _, err := AppendFields(nil, [2]string{"a", "\xff"}); err == nil {
		t.Fatal("invalid UTF-8 written")
	}
}
