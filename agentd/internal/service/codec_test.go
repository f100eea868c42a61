package service

import (
	"errors"
	"math"
	"reflect"

	"strings"
	"testing"

	"buf.build/go/protovalidate"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	agentv1 "github.com/blendplane/blendplane/gen/blendplane/agent/v1"
)

// TestCodecKeepsArgsInWireForm: an ExecuteRequest decoded by Codec is the
// one proto.Unmarshal gives, but for its operations' args, which
// operationArgs then gives as AsMap does: args of every kind, args sent in
// two parts (proto.Unmarshal merges them), and the other fields as they
// were, operations' order included.
func TestCodecKeepsArgsInWireForm(t *testing.T) {
	mustStruct := func(m map[string]any) *structpb.Struct {
		s, err := structpb.NewStruct(m)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	req := &agentv1.ExecuteRequest{SessionId: "s1", RequestId: "r1", Epoch: 7}
	for i, args := range []map[string]any{
		{"type": "cube", "name": "C_000", "location": []any{0.0, 3.5, -1e-9}},
		{},
		{"nested": map[string]any{"list": []any{true, nil, "é", []any{}, map[string]any{}}}, "n": 1e300},
	} {
		req.Operations = append(req.Operations, &agentv1.OperationCall{OperationId: "op-" + string(rune('a'+i)), ToolName: "object.create",
			Args: mustStruct(args), IdempotencyKey: strings.Repeat("ab", 32), McpCallId: "call-1", TimeBudgetMs: int64(i), Verify: i == 1})
	}
	wire, err := proto.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	// A last operation whose args come in two parts: {"a": 1} then {"b": "x"}.
	part := func(m map[string]any) []byte {
		b, _ := proto.Marshal(mustStruct(m))
		return protowire.AppendBytes(protowire.AppendTag(nil, argsField, protowire.BytesType), b)
	}
	split := append(protowire.AppendString(protowire.AppendTag(nil, 1, protowire.BytesType), "op-split"), part(map[string]any{"a": 1.0})...)
	split = append(split, part(map[string]any{"b": "x"})...)
	wire = protowire.AppendBytes(protowire.AppendTag(wire, operationsField, protowire.BytesType), split)

	// An operation with a field 3 that is not a message first (proto keeps
	// it as an unknown field, args come from the other), and one whose args
	// hold a NaN and an infinity (AsMap makes them strings).
	varint3 := append(protowire.AppendVarint(protowire.AppendTag(nil, argsField, protowire.VarintType), 5), part(map[string]any{"c": true})...)
	wire = protowire.AppendBytes(protowire.AppendTag(wire, operationsField, protowire.BytesType), varint3)
	special, _ := proto.Marshal(&agentv1.OperationCall{OperationId: "op-special", Args: &structpb.Struct{Fields: map[string]*structpb.Value{
		"nan": structpb.NewNumberValue(math.NaN()), "inf": structpb.NewNumberValue(math.Inf(-1))}}})
	wire = protowire.AppendBytes(protowire.AppendTag(wire, operationsField, protowire.BytesType), special)

	want := &agentv1.ExecuteRequest{}
	if err := proto.Unmarshal(wire, want); err != nil {
		t.Fatal(err)
	}
	got := &agentv1.ExecuteRequest{}
	if err := (Codec{}).Unmarshal(mem.BufferSlice{mem.SliceBuffer(wire)}, got); err != nil {
		t.Fatal(err)
	}
	args, err := operationArgs(got.GetOperations())
	if err != nil {
		t.Fatal(err)
	}
	if len(args) != len(want.GetOperations()) {
		t.Fatalf("%d operations, want %d", len(args), len(want.GetOperations()))
	}
	for i, o := range want.GetOperations() {
		if !reflect.DeepEqual(args[i], o.GetArgs().AsMap()) {
			t.Errorf("operation %d: args %#v, want %#v", i, args[i], o.GetArgs().AsMap())
		}
		if got.GetOperations()[i].GetArgs() != nil {
			t.Errorf("operation %d: args decoded into a Struct", i)
		}
		o.Args = nil
		o.ProtoReflect().SetUnknown(nil) // proto keeps a field 3 that is not a message there
		g := proto.Clone(got.GetOperations()[i]).(*agentv1.OperationCall)
		g.ProtoReflect().SetUnknown(nil)
		if !proto.Equal(g, o) {
			t.Errorf("operation %d: %v, want %v", i, g, o)
		}
	}
	want.Operations, got.Operations = nil, nil
	if !proto.Equal(got, want) {
		t.Errorf("request %v, want %v", got, want)
	}
}

// TestCodecRefusals: an operation without args, or with args that do not
// decode, is refused as invalid input, naming the operation.
func TestCodecRefusals(t *testing.T) {
	op := func(fields ...[]byte) []byte {
		b := protowire.AppendString(protowire.AppendTag(nil, 1, protowire.BytesType), "op")
		for _, f := range fields {
			b = append(b, f...)
		}
		return b
	}
	badArgs := protowire.AppendBytes(protowire.AppendTag(nil, argsField, protowire.BytesType), []byte{0x0a, 0x05, 0x0a}) // a truncated entry
	for name, tc := range map[string]struct {
		op   []byte
		want string
	}{
		"no args":       {op(), "operations[1].args: value is required"},
		"args in error": {op(badArgs), "operations[1].args:"},
	} {
		good, _ := proto.Marshal(&agentv1.OperationCall{OperationId: "ok", Args: &structpb.Struct{}})
		wire := protowire.AppendBytes(protowire.AppendTag(nil, operationsField, protowire.BytesType), good)
		wire = protowire.AppendBytes(protowire.AppendTag(wire, operationsField, protowire.BytesType), tc.op)
		req := &agentv1.ExecuteRequest{}
		if err := (Codec{}).Unmarshal(mem.BufferSlice{mem.SliceBuffer(wire)}, req); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		_, err := operationArgs(req.GetOperations())
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want InvalidArgument with %q", name, err, tc.want)
		}
	}
}

// TestCodecDepthAsProto: args nested as deep as proto.Unmarshal takes in
// an ExecuteRequest decode, one level deeper are refused, as before.
func TestCodecDepthAsProto(t *testing.T) {
	both := map[bool]int{}
	for lists := 4990; lists <= 5005; lists++ {
		v := structpb.NewStringValue("x")
		for range lists {
			v = structpb.NewListValue(&structpb.ListValue{Values: []*structpb.Value{v}})
		}
		op, err := proto.Marshal(&agentv1.OperationCall{OperationId: "deep",
			Args: &structpb.Struct{Fields: map[string]*structpb.Value{"n": v}}})
		if err != nil {
			t.Fatal(err)
		}
		wire := protowire.AppendBytes(protowire.AppendTag(nil, operationsField, protowire.BytesType), op)
		protoOK := proto.Unmarshal(wire, &agentv1.ExecuteRequest{}) == nil
		req := &agentv1.ExecuteRequest{}
		codecOK := (Codec{}).Unmarshal(mem.BufferSlice{mem.SliceBuffer(wire)}, req) == nil
		if codecOK {
			_, err := operationArgs(req.GetOperations())
			codecOK = err == nil
		}
		if codecOK != protoOK {
			t.Fatalf("%d nested lists: Codec ok=%v, proto.Unmarshal ok=%v", lists, codecOK, protoOK)
		}
		both[protoOK]++
	}
	if both[true] == 0 || both[false] == 0 {
		t.Fatalf("the depths tried do not reach proto's limit: %v", both)
	}
}

// BenchmarkReceiveExecute decodes ObjectCreate400's batch (400 named cubes)
// into the args agentd runs, and validates it, each both ways, side by
// side: agentd's work on a batch before its first operation can start.
func BenchmarkReceiveExecute(b *testing.B) {
	req := &agentv1.ExecuteRequest{SessionId: "s1", RequestId: "bench-0", Epoch: 1}
	for j := 0; j < 400; j++ {
		args, _ := structpb.NewStruct(map[string]any{"type": "cube", "name": "C0_" + strings.Repeat("7", 3),
			"location": []any{float64(j % 20 * 3), float64(j / 20 % 20 * 3), 0.0}})
		req.Operations = append(req.Operations, &agentv1.OperationCall{OperationId: "op-000", ToolName: "object.create", Args: args,
			IdempotencyKey: strings.Repeat("ab", 32), McpCallId: "call-0123456789abcdef", TimeBudgetMs: 60000})
	}
	wire, _ := proto.Marshal(req)
	b.Run("decode/codec", func(b *testing.B) {
		for b.Loop() {
			var r agentv1.ExecuteRequest
			if err := (Codec{}).Unmarshal(mem.BufferSlice{mem.SliceBuffer(wire)}, &r); err != nil {
				b.Fatal(err)
			}
			if _, err := operationArgs(r.GetOperations()); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("decode/proto+AsMap", func(b *testing.B) {
		for b.Loop() {
			var r agentv1.ExecuteRequest
			if err := proto.Unmarshal(wire, &r); err != nil {
				b.Fatal(err)
			}
			for _, o := range r.GetOperations() {
				o.GetArgs().AsMap()
			}
		}
	})
	pv, err := protovalidate.New()
	if err != nil {
		b.Fatal(err)
	}
	for name, v := range map[string]protovalidate.Validator{"Validator": Validator{Validator: pv}, "protovalidate": pv} {
		b.Run("validate/"+name, func(b *testing.B) {
			for b.Loop() {
				if err := v.Validate(req); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestUndecodableRefused: a request that does not decode is not failed by
// the codec (gRPC would answer INTERNAL) but refused by the Validator, as a
// violation protovalidate's interceptor answers INVALID_ARGUMENT, and
// forgotten then.
func TestUndecodableRefused(t *testing.T) {
	pv, err := protovalidate.New()
	if err != nil {
		t.Fatal(err)
	}
	codec := NewCodec()
	val := Validator{Validator: pv, Codec: codec}
	for name, msg := range map[string]proto.Message{"ExecuteRequest": &agentv1.ExecuteRequest{}, "OpenSessionRequest": &agentv1.OpenSessionRequest{}} {
		truncated := []byte{0x0a, 0x40, 'a'} // field 1, 64 bytes long, one there
		if err := codec.Unmarshal(mem.BufferSlice{mem.SliceBuffer(truncated)}, msg); err != nil {
			t.Fatalf("%s: the codec failed the call: %v", name, err)
		}
		var verr *protovalidate.ValidationError
		err := val.Validate(msg)
		if !errors.As(err, &verr) || !strings.Contains(err.Error(), "is not a valid blendplane.agent.v1."+name) {
			t.Fatalf("%s: %v", name, err)
		}
		if codec.failure(msg) != nil {
			t.Fatalf("%s: the failure was kept after the refusal", name)
		}
	}
}
