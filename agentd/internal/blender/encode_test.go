package blender

import (
	"bytes"
	"encoding/json"
	"math"
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/blendplane/blendplane/internal/jsontest"
)

// TestEncodeExecuteAgrees: an execute request's line decodes to what
// encoding/json's does, for random args of every JSON kind (keys and
// strings with escapes, numbers of every size); args jcs refuses are
// encoded by encoding/json itself, byte for byte; NaN fails both.
func TestEncodeExecuteAgrees(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	strs := jsontest.Strings
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
		args := jsontest.Object(r, 0)
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
