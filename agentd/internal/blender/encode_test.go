package blender

import (
	"bytes"
	"encoding/json"
	"math"
	"math/rand/v2"
	"reflect"
	"testing"
)

// TestEncodeExecuteAgrees: an execute request's line decodes to what
// encoding/json's does, for random args of every JSON kind (keys and
// strings with escapes, numbers of every size); args jcs refuses are
// encoded by encoding/json itself, byte for byte; NaN fails both.
func TestEncodeExecuteAgrees(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	strs := []string{"", "a", "Cube.001", `quo"te\back`, "<b>&amp;</b>", "line\nbreak\ttab\x01", "\u2028\u2029", "é中😀", "\uffff"}
	nums := []float64{0, math.Copysign(0, -1), 1, -1, 0.1, 1.0 / 3, 1e-7, 1e-6, 123456789.125, 1e20, 1e21, 1e300, -2.5e-300, 1 << 53, 4.5}
	var value func(depth int) any
	value = func(depth int) any {
		switch k := r.IntN(7); {
		case k == 0:
			return nil
		case k == 1:
			return r.IntN(2) == 0
		case k == 2:
			return strs[r.IntN(len(strs))]
		case k == 3 || depth > 2:
			return nums[r.IntN(len(nums))]
		case k == 4:
			l := make([]any, r.IntN(4))
			for i := range l {
				l[i] = value(depth + 1)
			}
			return l
		default:
			m := map[string]any{}
			for range r.IntN(5) {
				m[strs[r.IntN(len(strs))]+strs[r.IntN(len(strs))]] = value(depth + 1)
			}
			return m
		}
	}
	params := func(args map[string]any) executeParams {
		return executeParams{Tool: "object.set_transform", Args: args, MutationID: "m<1>", RequestID: "r", OperationID: "op-1",
			MCPCallID: strs[r.IntN(len(strs))], Batch: "b7", InjectProgress: r.IntN(2), InjectFailure: strs[r.IntN(len(strs))]}
	}
	decode := func(b []byte) any {
		var v any
		if err := json.Unmarshal(b, &v); err != nil {
			t.Fatalf("%s: %v", b, err)
		}
		return v
	}
	for i := range 3000 {
		args := map[string]any{}
		for range r.IntN(6) {
			args[strs[r.IntN(len(strs))]] = value(0)
		}
		if i == 0 {
			args = nil
		}
		p := params(args)
		got, err := encodeExecute(uint64(i), p)
		if err != nil {
			t.Fatal(err)
		}
		want, _ := json.Marshal(request{ID: uint64(i), Method: "execute", Params: p})
		if !reflect.DeepEqual(decode(got), decode(want)) {
			t.Fatalf("%s\ndecodes other than\n%s", got, want)
		}
	}

	for _, args := range []map[string]any{
		{"location": []float64{1, 2, 3}},   // a Go type of its own
		{"name": "bad \xff utf-8"},         // invalid UTF-8: replaced, as encoding/json does
		{"n": 3, "m": map[string]string{}}, // Go types encoding/json knows
	} {
		p := params(args)
		got, err := encodeExecute(1, p)
		want, werr := json.Marshal(request{ID: 1, Method: "execute", Params: p})
		if err != nil || werr != nil || !bytes.Equal(got, want) {
			t.Fatalf("%v: %s, %v; want %s", args, got, err, want)
		}
	}
	if _, err := encodeExecute(1, params(map[string]any{"x": math.NaN()})); err == nil {
		t.Fatal("NaN encoded")
	}
}

// BenchmarkEncodeExecute: an object.set_transform request's line, as
// ExecuteBatch encodes it, against encoding/json's.
func BenchmarkEncodeExecute(b *testing.B) {
	c := Call{Tool: "object.set_transform", Args: map[string]any{"name": "P00042", "location": []any{12.0, 3.0, 1.0}},
		MutationID: "mut-0123456789abcdef", RequestID: "plan-0123456789", OperationID: "op-000123", MCPCallID: "call-0123456789abcdef"}
	b.Run("jcs", func(b *testing.B) {
		for b.Loop() {
			if _, err := encodeExecute(12345, c.params("b1")); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("encoding-json", func(b *testing.B) {
		for b.Loop() {
			if _, err := json.Marshal(request{ID: 12345, Method: "execute", Params: c.params("b1")}); err != nil {
				b.Fatal(err)
			}
		}
	})
}
