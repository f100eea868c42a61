package service

import (
	"math"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/types/known/structpb"

	cpv1 "github.com/blendplane/blendplane/gen/blendplane/controlplane/v1"
	"github.com/blendplane/blendplane/internal/wirefields"
)

// decodeOperation decodes one encoded Operation as proto.Unmarshal does,
// without protobuf's reflection: proto.Unmarshal fills the args' Structs
// through reflect (map entries, oneofs), which was half of the control
// plane's CPU for a 100,000-operation plan. It knows only what a client's
// encoder writes: each singular field once, known fields only, no map entry
// without its key or value (proto.Unmarshal would make an empty one), a
// Value of exactly one kind, args at most maxWireDepth deep. Anything else
// returns false, and the caller decodes the operation with proto.Unmarshal,
// which also names what is wrong. TestDecodeOperationAgrees holds the two
// to each other.
func decodeOperation(b []byte) (*cpv1.Operation, bool) {
	op := &cpv1.Operation{}
	var seen uint8 // fields met, by bit: each singular field at most once
	for len(b) > 0 {
		num, typ, v, n := wirefields.Next(b)
		if n < 0 || num < 1 || num > 7 || num != 4 && seen&(1<<num) != 0 {
			return nil, false
		}
		seen |= 1 << num
		b = b[n:]
		var ok bool
		switch num {
		case 1:
			op.OperationId, ok = wireString(typ, v)
		case 2:
			op.ToolName, ok = wireString(typ, v)
		case 3:
			op.Args, ok = decodeStruct(typ, v, 1)
		case 4:
			var dep string
			dep, ok = wireString(typ, v)
			op.DependsOn = append(op.DependsOn, dep)
		case 5:
			var level uint64
			level, ok = wireVarint(typ, v, math.MaxInt32)
			op.SafetyLevel = cpv1.SafetyLevel(level)
		case 6:
			var verify uint64
			verify, ok = wireVarint(typ, v, 1)
			op.Verify = verify == 1
		case 7:
			op.McpCallId, ok = wireString(typ, v)
		}
		if !ok {
			return nil, false
		}
	}
	return op, true
}

// maxWireDepth bounds the Structs and lists decodeOperation decodes: deeper
// args are left to proto.Unmarshal (and refused later: plan.MaxArgsDepth).
const maxWireDepth = 64

// wireString is a string field's value v (wirefields.Next's), if valid UTF-8.
func wireString(typ protowire.Type, v []byte) (string, bool) {
	return string(v), typ == protowire.BytesType && utf8.Valid(v)
}

// wireVarint is a varint field's value v (wirefields.Next's), if at most max.
func wireVarint(typ protowire.Type, v []byte, max uint64) (uint64, bool) {
	x, n := protowire.ConsumeVarint(v)
	return x, typ == protowire.VarintType && n > 0 && x <= max
}

// eachItem calls item with every field 1 of b, as a Struct holds its map
// entries and a ListValue its values; false at any other field, or when
// item returns false.
func eachItem(typ protowire.Type, b []byte, depth int, item func(v []byte) bool) bool {
	if typ != protowire.BytesType || depth > maxWireDepth {
		return false
	}
	for len(b) > 0 {
		num, typ, v, n := wirefields.Next(b)
		if n < 0 || num != 1 || typ != protowire.BytesType || !item(v) {
			return false
		}
		b = b[n:]
	}
	return true
}

// decodeStruct decodes a google.protobuf.Struct: its map entries.
func decodeStruct(typ protowire.Type, b []byte, depth int) (*structpb.Struct, bool) {
	s := &structpb.Struct{} // Fields stays nil when empty, as proto.Unmarshal leaves it
	ok := eachItem(typ, b, depth, func(entry []byte) bool {
		key, val, ok := decodeEntry(entry, depth)
		if ok {
			if s.Fields == nil {
				s.Fields = map[string]*structpb.Value{}
			}
			s.Fields[key] = val // a key met twice: the last wins, as in proto.Unmarshal
		}
		return ok
	})
	return s, ok
}

// decodeList decodes a google.protobuf.ListValue: its values.
func decodeList(typ protowire.Type, b []byte, depth int) (*structpb.ListValue, bool) {
	l := &structpb.ListValue{}
	ok := eachItem(typ, b, depth, func(x []byte) bool {
		v, ok := decodeValue(x, depth)
		l.Values = append(l.Values, v)
		return ok
	})
	return l, ok
}

// decodeEntry decodes one map entry of a Struct: key (1) and value (2),
// each once.
func decodeEntry(b []byte, depth int) (key string, val *structpb.Value, ok bool) {
	var seen uint8
	for len(b) > 0 {
		num, typ, v, n := wirefields.Next(b)
		if n < 0 || num < 1 || num > 2 || seen&(1<<num) != 0 {
			return "", nil, false
		}
		seen |= 1 << num
		b = b[n:]
		if num == 1 {
			key, ok = wireString(typ, v)
		} else if ok = typ == protowire.BytesType; ok {
			val, ok = decodeValue(v, depth)
		}
		if !ok {
			return "", nil, false
		}
	}
	return key, val, seen == 1<<1|1<<2
}

// decodeValue decodes a google.protobuf.Value: exactly one of its kinds (a
// second one, whose last proto.Unmarshal keeps, is left to it).
func decodeValue(b []byte, depth int) (*structpb.Value, bool) {
	num, typ, x, n := wirefields.Next(b)
	if n < 0 || n != len(b) {
		return nil, false
	}
	switch num {
	case 1: // null_value: NULL_VALUE only
		_, ok := wireVarint(typ, x, 0)
		return structpb.NewNullValue(), ok
	case 2:
		f, n := protowire.ConsumeFixed64(x)
		return structpb.NewNumberValue(math.Float64frombits(f)), typ == protowire.Fixed64Type && n > 0
	case 3:
		s, ok := wireString(typ, x)
		return structpb.NewStringValue(s), ok
	case 4:
		v, ok := wireVarint(typ, x, 1)
		return structpb.NewBoolValue(v == 1), ok
	case 5:
		s, ok := decodeStruct(typ, x, depth+1)
		return structpb.NewStructValue(s), ok
	case 6:
		l, ok := decodeList(typ, x, depth+1)
		return structpb.NewListValue(l), ok
	}
	return nil, false
}
