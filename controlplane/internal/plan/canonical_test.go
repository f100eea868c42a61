package plan

import (
	"encoding/json"
	"math"
	"strings"
	"testing"
)

func TestCanonicalJSON(t *testing.T) {
	tests := []struct {
		name string
		in   any
		want string
	}{
		{"keys sorted, no whitespace", decodeJSON(t, `{ "b": 1, "a": {"y": [1, 2], "x": null} }`), `{"a":{"x":null,"y":[1,2]},"b":1}`},
		{"integral floats", []any{1.0, math.Copysign(0, -1), 0.0, 100.0, -3.0, 9007199254740993.0}, `[1,0,0,100,-3,9007199254740992]`},
		{"ECMAScript number forms", []any{0.1, 1.5e-7, 1e21, 1e20, 123456789012345680000.0, 1e-6, -2.5e-10, 5e-324, math.MaxFloat64},
			`[0.1,1.5e-7,1e+21,100000000000000000000,123456789012345680000,0.000001,-2.5e-10,5e-324,1.7976931348623157e+308]`},
		{"json.Number and ints", []any{json.Number("1.0"), json.Number("-0"), 42, int64(1) << 60, uint8(7)}, `[1,0,42,1152921504606846976,7]`},
		{"strings: minimal escapes", []any{"a\"b\\c", "\n\t\r\b\f\x00\x1f", "<>&\u2028é😀"}, `["a\"b\\c","\n\t\r\b\f\u0000\u001f","<>&` + "\u2028é😀" + `"]`},
		// RFC 8785 sorts keys by UTF-16 code units: U+FFFD (one unit, 0xFFFD)
		// after 😀 (0xD83D 0xDE00), although its UTF-8 sorts before.
		{"keys in UTF-16 order", map[string]any{"\ufffd": 1.0, "😀": 2.0, "é": 3.0, "z": 4.0, "": 5.0}, `{"":5,"z":4,"é":3,"😀":2,"` + "\ufffd" + `":1}`},
		{"empty containers", map[string]any{"a": []any{}, "b": map[string]any{}}, `{"a":[],"b":{}}`},
		{"scalars", true, `true`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := CanonicalJSON(tt.in)
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tt.want {
				t.Fatalf("got  %s\nwant %s", got, tt.want)
			}
			if !json.Valid(got) {
				t.Fatalf("%s is not valid JSON", got)
			}
		})
	}
}

func TestCanonicalJSONRefuses(t *testing.T) {
	for _, v := range []any{math.NaN(), math.Inf(1), "\xff", map[string]any{"\xfe": 1.0}, []any{make(chan int)}, json.Number("x")} {
		if b, err := CanonicalJSON(v); err == nil {
			t.Errorf("CanonicalJSON(%#v) = %s, want an error", v, b)
		}
	}
}

func TestCanonicalJSONDeepIsIterative(t *testing.T) {
	var v any = 1.0
	for range 200_000 {
		v = []any{v}
	}
	b, err := CanonicalJSON(v)
	if err != nil {
		t.Fatal(err)
	}
	if want := strings.Repeat("[", 200_000) + "1" + strings.Repeat("]", 200_000); string(b) != want {
		t.Fatal("wrong encoding of a deep array")
	}
}

func TestIdempotencyKey(t *testing.T) {
	a := decodeJSON(t, `{"name": "Cube", "location": [1, 2.0, 3], "kind": "MESH"}`)
	b := decodeJSON(t, `{"kind":"MESH","location":[1.0,2,3.000],"name":"Cube"}`)
	k := IdempotencyKey("req-1", "op-1", a)
	if len(k) != 64 || strings.Trim(k, "0123456789abcdef") != "" {
		t.Fatalf("key %q is not hex SHA-256", k)
	}
	if IdempotencyKey("req-1", "op-1", b) != k {
		t.Fatal("key order or number form changed the key")
	}
	// A pinned value, so that the key never changes by accident: agents
	// journal it.
	if k != pinnedKey {
		t.Fatalf("key = %s, pinned %s", k, pinnedKey)
	}
	if IdempotencyKey("req-1", "op-1", nil) != IdempotencyKey("req-1", "op-1", map[string]any{}) {
		t.Fatal("nil and empty args differ")
	}
	// Framing: moving bytes between fields changes the key.
	distinct := map[string]bool{
		k:                                    true,
		IdempotencyKey("req-1o", "p-1", a):   true,
		IdempotencyKey("req-", "1op-1", a):   true,
		IdempotencyKey("req-1", "op-2", a):   true,
		IdempotencyKey("req-2", "op-1", a):   true,
		IdempotencyKey("req-1", "op-1", nil): true,
		IdempotencyKey("req-1", "op-1", map[string]any{"name": "Cube", "location": []any{1.0, 2.0, 3.0}, "kind": "LIGHT"}): true,
	}
	if len(distinct) != 7 {
		t.Fatalf("only %d distinct keys of 7", len(distinct))
	}
	// Non-JSON args (refused by Check) still give a stable key.
	odd := map[string]any{"x": math.NaN(), "y": "\xff"}
	if first, again := IdempotencyKey("r", "o", odd), IdempotencyKey("r", "o", odd); first != again {
		t.Fatal("unstable key for odd args")
	}
}

// pinnedKey was computed independently (Python: hashlib.sha256 over struct.pack(">Q", len) framing).
const pinnedKey = "1e848465c9108fe2520a271a30178e6fc8cad0d173c9770664a3b2c14f82e27a"

func TestDigest(t *testing.T) {
	base := func() []Operation {
		return []Operation{
			{ID: "a", Tool: "object.create", Args: map[string]any{"name": "Cube", "kind": "MESH"}, Safety: SafetySafeWrite},
			{ID: "b", Tool: "scene.inspect", DependsOn: []string{"a"}, Safety: SafetyReadOnly},
		}
	}
	d := Digest(base(), false)
	same := base()
	same[0].Args = decodeJSON(t, `{"kind": "MESH", "name": "Cube"}`)
	if Digest(same, false) != d {
		t.Fatal("equal plans differ")
	}
	changes := map[string]func([]Operation) []Operation{
		"id":      func(o []Operation) []Operation { o[0].ID = "a2"; return o },
		"tool":    func(o []Operation) []Operation { o[1].Tool = "scene.inspect2"; return o },
		"args":    func(o []Operation) []Operation { o[0].Args["name"] = "Cube2"; return o },
		"deps":    func(o []Operation) []Operation { o[1].DependsOn = nil; return o },
		"safety":  func(o []Operation) []Operation { o[1].Safety = SafetyDestructive; return o },
		"order":   func(o []Operation) []Operation { o[0], o[1] = o[1], o[0]; return o },
		"dropped": func(o []Operation) []Operation { return o[:1] },
		"id↔tool": func(o []Operation) []Operation { o[1].ID, o[1].Tool = "bscene.inspect", ""; return o },
	}
	seen := map[string]string{d: "base", Digest(base(), true): "atomic"}
	for name, change := range changes {
		got := Digest(change(base()), false)
		if prev, dup := seen[got]; dup {
			t.Errorf("change %q gives the digest of %q", name, prev)
		}
		seen[got] = name
	}
}
