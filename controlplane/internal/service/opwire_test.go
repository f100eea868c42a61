package service

import (
	"math"
	"math/rand/v2"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	cpv1 "github.com/blendplane/blendplane/gen/blendplane/controlplane/v1"
)

var wireStrings = []string{"", "a", "op-1", "Cube.001", "é", "日本", "\x00", "a\nb", "\U0001F600"}
var wireNumbers = []float64{0, math.Copysign(0, -1), 1, -1.5, 1e300, math.Inf(1), math.Inf(-1), math.NaN(), 5e-324}

func randomValue(rng *rand.Rand, depth int) *structpb.Value {
	k := rng.IntN(6)
	if depth > 3 && k >= 4 {
		k = rng.IntN(4)
	}
	switch k {
	case 0:
		return structpb.NewNullValue()
	case 1:
		return structpb.NewNumberValue(wireNumbers[rng.IntN(len(wireNumbers))])
	case 2:
		return structpb.NewStringValue(wireStrings[rng.IntN(len(wireStrings))])
	case 3:
		return structpb.NewBoolValue(rng.IntN(2) == 0)
	case 4:
		return structpb.NewStructValue(randomStruct(rng, depth+1))
	}
	l := &structpb.ListValue{}
	for range rng.IntN(4) {
		l.Values = append(l.Values, randomValue(rng, depth+1))
	}
	return structpb.NewListValue(l)
}

func randomStruct(rng *rand.Rand, depth int) *structpb.Struct {
	s := &structpb.Struct{Fields: map[string]*structpb.Value{}}
	for range rng.IntN(5) {
		s.Fields[wireStrings[rng.IntN(len(wireStrings))]] = randomValue(rng, depth)
	}
	return s
}

func randomOperation(rng *rand.Rand) *cpv1.Operation {
	op := &cpv1.Operation{OperationId: wireStrings[rng.IntN(len(wireStrings))], ToolName: wireStrings[rng.IntN(len(wireStrings))],
		SafetyLevel: cpv1.SafetyLevel(rng.IntN(6)), Verify: rng.IntN(2) == 0, McpCallId: wireStrings[rng.IntN(len(wireStrings))]}
	if rng.IntN(8) > 0 {
		op.Args = randomStruct(rng, 1)
	}
	for range rng.IntN(3) {
		op.DependsOn = append(op.DependsOn, wireStrings[rng.IntN(len(wireStrings))])
	}
	return op
}

// TestDecodeOperationAgrees: decodeOperation decodes what encoders write
// exactly as proto.Unmarshal does, and whatever else it accepts (encodings
// with a byte changed, cut short, a field repeated or added, args nested
// deep) proto.Unmarshal decodes to the same message.
func TestDecodeOperationAgrees(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 5))
	agree := func(b []byte, mustDecode bool) {
		t.Helper()
		fast, ok := decodeOperation(b)
		if !ok {
			if mustDecode {
				t.Fatalf("decodeOperation refused an encoder's operation %x", b)
			}
			return
		}
		want := &cpv1.Operation{}
		if err := proto.Unmarshal(b, want); err != nil {
			t.Fatalf("decodeOperation accepted %x, which proto.Unmarshal refuses: %v", b, err)
		}
		if !proto.Equal(fast, want) || hasNilValue(fast.GetArgs()) {
			t.Fatalf("decodeOperation(%x) = %v, proto.Unmarshal: %v", b, fast, want)
		}
	}
	for n := 0; n < 5000; n++ {
		b, err := proto.MarshalOptions{Deterministic: n%2 == 0}.Marshal(randomOperation(rng))
		if err != nil {
			t.Fatal(err)
		}
		agree(b, true)
		if len(b) == 0 {
			continue
		}
		changed := append([]byte(nil), b...)
		changed[rng.IntN(len(b))] ^= byte(1 + rng.IntN(255))
		agree(changed, false)
		agree(b[:rng.IntN(len(b))], false)
		agree(append(append([]byte(nil), b...), b...), false)                                                             // every field twice
		agree(protowire.AppendVarint(protowire.AppendTag(append([]byte(nil), b...), 99, protowire.VarintType), 1), false) // unknown
	}
	// Two operations in one record: proto.Unmarshal merges them (the last
	// scalar, the union of the args, both lists of dependencies).
	for range 2000 {
		b1, _ := proto.Marshal(randomOperation(rng))
		b2, _ := proto.Marshal(randomOperation(rng))
		agree(append(b1, b2...), false)
	}
	// Odd encodings of the args, each field of a Struct's entry and Value.
	tag := func(b []byte, num protowire.Number, typ protowire.Type) []byte {
		return protowire.AppendTag(b, num, typ)
	}
	field := func(num protowire.Number, v []byte) []byte {
		return protowire.AppendBytes(tag(nil, num, protowire.BytesType), v)
	}
	number := func(x float64) []byte {
		return protowire.AppendFixed64(tag(nil, 2, protowire.Fixed64Type), math.Float64bits(x))
	}
	entry := func(key string, value []byte) []byte {
		return field(1, append(field(1, []byte(key)), field(2, value)...))
	}
	for _, args := range [][]byte{
		append(entry("a", number(1)), entry("a", number(2))...),                                                        // one key twice: the last wins
		field(1, field(1, []byte("a"))),                                                                                // an entry without its value
		field(1, field(2, number(1))),                                                                                  // an entry without its key
		field(1, append(field(2, number(1)), field(1, []byte("a"))...)),                                                // value before key
		entry("a", protowire.AppendVarint(tag(nil, 2, protowire.VarintType), 7)),                                       // a number as a varint
		entry("a", append(number(1), field(3, []byte("s"))...)),                                                        // two kinds
		entry("a", append(protowire.AppendVarint(tag(nil, 2, protowire.VarintType), 7), field(3, []byte("abcde"))...)), // a varint, then a string
		entry("a", field(2, []byte("8 bytes!"))),                                                                       // a number as bytes
		entry("a", nil),                                                                                                // a Value of no kind
		entry("a", protowire.AppendVarint(tag(nil, 1, protowire.VarintType), 1)),                                       // null_value 1
		entry("a", field(6, field(1, nil))),                                                                            // a list of one empty Value
	} {
		agree(field(3, args), false)
	}
	// Args nested past maxWireDepth: left to proto.Unmarshal.
	deep := structpb.NewNullValue()
	for range maxWireDepth + 2 {
		deep = structpb.NewStructValue(&structpb.Struct{Fields: map[string]*structpb.Value{"a": deep}})
	}
	b, _ := proto.Marshal(&cpv1.Operation{Args: deep.GetStructValue()})
	if _, ok := decodeOperation(b); ok {
		t.Fatal("decodeOperation decoded args nested past its limit")
	}
}

// hasNilValue reports a nil Value anywhere in s, which proto.Equal takes
// for an empty one but proto.Unmarshal never makes.
func hasNilValue(s *structpb.Struct) bool {
	for _, v := range s.GetFields() {
		if v == nil || hasNilValue(v.GetStructValue()) {
			return true
		}
		for _, item := range v.GetListValue().GetValues() {
			if item == nil || hasNilValue(item.GetStructValue()) {
				return true
			}
		}
	}
	return false
}
