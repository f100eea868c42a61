package receiptwire

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"testing"

	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	agentv1 "github.com/blendplane/blendplane/gen/blendplane/agent/v1"
	cpv1 "github.com/blendplane/blendplane/gen/blendplane/controlplane/v1"
	"github.com/blendplane/blendplane/internal/jsontest"
)

// summary is a receipt like scene.get_summary's at n objects.
func summary(n int) *cpv1.Receipt {
	objs := make([]any, n)
	for i := range objs {
		objs[i] = map[string]any{"name": fmt.Sprintf("Object_%04d", i), "type": "MESH"}
	}
	res, err := structpb.NewStruct(map[string]any{"objects": objs, "object_count": float64(n), "active_object": nil})
	if err != nil {
		panic(err)
	}
	return &cpv1.Receipt{RequestId: "r", OperationId: "op", ToolName: "scene.get_summary", Status: cpv1.Receipt_STATUS_SUCCEEDED,
		Result: res, SceneHashBefore: "h1", SceneHashAfter: "h1", CompleteTime: timestamppb.Now(),
		Artifacts: []*cpv1.Artifact{{Name: "a.png", Sha256: "00"}}}
}

// A receipt decoded with its result in wire form encodes to what decodes
// as the receipt it was, and Result gives its result.
func TestRoundTrip(t *testing.T) {
	for _, want := range []*cpv1.Receipt{summary(3), {RequestId: "no-result", Status: cpv1.Receipt_STATUS_FAILED}} {
		raw, err := proto.Marshal(want)
		if err != nil {
			t.Fatal(err)
		}
		got := &cpv1.Receipt{}
		if err := Unmarshal(raw, got); err != nil {
			t.Fatal(err)
		}
		if got.GetResult() != nil {
			t.Error("the result was decoded")
		}
		if got.GetRequestId() != want.GetRequestId() || got.GetStatus() != want.GetStatus() || len(got.GetArtifacts()) != len(want.GetArtifacts()) {
			t.Errorf("fields: %v, want %v", got, want)
		}
		res, err := Result(got)
		if err != nil || !proto.Equal(res, want.GetResult()) {
			t.Errorf("Result = %v, %v; want %v", res, err, want.GetResult())
		}
		got.Sequence = 7 // as the control plane numbers it
		again, err := proto.MarshalOptions{Deterministic: true}.Marshal(got)
		if err != nil {
			t.Fatal(err)
		}
		decoded := &cpv1.Receipt{}
		if err := proto.Unmarshal(again, decoded); err != nil {
			t.Fatal(err)
		}
		want = proto.Clone(want).(*cpv1.Receipt)
		want.Sequence = 7
		if !proto.Equal(decoded, want) {
			t.Errorf("re-encoded: %v\nwant %v", decoded, want)
		}
	}
}

// SetResult gives a receipt its result in wire form, replacing one set
// before; it encodes as a receipt with that result does.
func TestSetResult(t *testing.T) {
	want := summary(2)
	r := proto.Clone(want).(*cpv1.Receipt)
	r.Result = nil
	if err := SetResult(r, summary(5).GetResult()); err != nil {
		t.Fatal(err)
	}
	if err := SetResult(r, want.GetResult()); err != nil {
		t.Fatal(err)
	}
	if r.GetResult() != nil {
		t.Error("the result is decoded")
	}
	raw, _ := proto.Marshal(r)
	got := &cpv1.Receipt{}
	if err := proto.Unmarshal(raw, got); err != nil || !proto.Equal(got, want) {
		t.Errorf("encoded: %v %v\nwant %v", got, err, want)
	}
}

// The codec keeps a receipt's result in wire form and decodes the rest of
// an ExecuteResponse (and every other message) as gRPC's proto codec does.
func TestCodec(t *testing.T) {
	decode := func(in, out proto.Message) {
		t.Helper()
		raw, err := proto.Marshal(in)
		if err != nil {
			t.Fatal(err)
		}
		if err := (Codec{}).Unmarshal(mem.BufferSlice{mem.SliceBuffer(raw)}, out); err != nil {
			t.Fatal(err)
		}
	}
	want := summary(2)
	resp := &agentv1.ExecuteResponse{}
	decode(&agentv1.ExecuteResponse{Event: &agentv1.ExecuteResponse_Receipt{Receipt: want}}, resp)
	if r := resp.GetReceipt(); r == nil || r.GetResult() != nil || r.GetToolName() != want.GetToolName() {
		t.Fatalf("receipt: %v", resp)
	}
	if res, _ := Result(resp.GetReceipt()); !proto.Equal(res, want.GetResult()) {
		t.Errorf("result %v", res)
	}
	progress := &agentv1.ExecuteResponse{}
	decode(&agentv1.ExecuteResponse{Event: &agentv1.ExecuteResponse_Progress{Progress: &cpv1.Progress{Done: 3, Total: 9}}}, progress)
	if progress.GetProgress().GetDone() != 3 || progress.GetReceipt() != nil {
		t.Errorf("progress: %v", progress)
	}
	other := &cpv1.Receipt{}
	decode(want, other) // not an ExecuteResponse: decoded whole
	if !proto.Equal(other, want) {
		t.Errorf("a receipt on its own: %v", other)
	}
}

// Malformed input is refused, as proto.Unmarshal refuses it.
func TestMalformed(t *testing.T) {
	good, _ := proto.Marshal(summary(1))
	for name, b := range map[string][]byte{
		"truncated":            good[:len(good)-3],
		"result not a message": protowire.AppendVarint(protowire.AppendTag(nil, resultField, protowire.VarintType), 5),
		"bad tag":              {0x80},
	} {
		if err := Unmarshal(b, &cpv1.Receipt{}); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// BenchmarkDecode: a scene summary of 220 objects, decoded whole and with
// its result left in wire form, then encoded again (what the control plane
// does for its store and each stream).
func BenchmarkDecode(b *testing.B) {
	raw, _ := proto.Marshal(summary(220))
	b.Run("whole", func(b *testing.B) {
		for b.Loop() {
			r := &cpv1.Receipt{}
			if err := proto.Unmarshal(raw, r); err != nil {
				b.Fatal(err)
			}
			proto.Marshal(r)
		}
	})
	b.Run("wire", func(b *testing.B) {
		for b.Loop() {
			r := &cpv1.Receipt{}
			if err := Unmarshal(raw, r); err != nil {
				b.Fatal(err)
			}
			proto.Marshal(r)
		}
	})
}

// ResultJSON writes exactly what json.Marshal writes for the result's
// AsMap, for results of every kind of value, nested, from wire form and
// from a decoded result.
func TestResultJSON(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 500 {
		m := map[string]any{"v": jsontest.Value(rng, 0), "w": jsontest.Value(rng, 0)}
		res, err := structpb.NewStruct(m)
		if err != nil {
			t.Fatal(err)
		}
		want, err := json.Marshal(res.AsMap())
		if err != nil {
			t.Fatal(err)
		}
		r := &cpv1.Receipt{Result: res}
		got, err := ResultJSON(r)
		if err != nil || string(got) != string(want) {
			t.Fatalf("case %d, decoded result: %s %v\nwant %s", i, got, err, want)
		}
		raw, _ := proto.Marshal(r)
		wire := &cpv1.Receipt{}
		if err := Unmarshal(raw, wire); err != nil {
			t.Fatal(err)
		}
		if got, err := ResultJSON(wire); err != nil || string(got) != string(want) {
			t.Fatalf("case %d, in wire form: %s %v\nwant %s", i, got, err, want)
		}
	}
	if got, err := ResultJSON(&cpv1.Receipt{}); err != nil || string(got) != "{}" { // as AsMap of none
		t.Errorf("no result: %s %v", got, err)
	}
}

// BenchmarkResultJSON: a 220-object summary's result as JSON, through
// AsMap and json.Marshal, and straight from its wire form.
func BenchmarkResultJSON(b *testing.B) {
	raw, _ := proto.Marshal(summary(220))
	b.Run("decode+AsMap+Marshal", func(b *testing.B) {
		for b.Loop() {
			r := &cpv1.Receipt{}
			proto.Unmarshal(raw, r)
			json.Marshal(r.GetResult().AsMap())
		}
	})
	b.Run("wire", func(b *testing.B) {
		for b.Loop() {
			r := &cpv1.Receipt{}
			Unmarshal(raw, r)
			ResultJSON(r)
		}
	})
}
