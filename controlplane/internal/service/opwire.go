package service

import (
	"math"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/types/known/structpb"

	cpv1 "github.com/blendplane/blendplane/gen/blendplane/controlplane/v1"
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
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 || num < 1 || num > 7 {
			return nil, false
		}
		b = b[n:]
		if num != 4 {
			if seen&(1<<num) != 0 {
				return nil, false
			}
			seen |= 1 << num
		}
		switch num {
		case 5, 6: // safety_level, verify
			if typ != protowire.VarintType {
				return nil, false
			}
			v, n := protowire.ConsumeVarint(b)
			if n < 0 || v > math.MaxInt32 || num == 6 && v > 1 {
				return nil, false
			}
			b = b[n:]
			if num == 5 {
				op.SafetyLevel = cpv1.SafetyLevel(v)
			} else {
				op.Verify = v == 1
			}
			continue
		}
		if typ != protowire.BytesType {
			return nil, false
		}
		v, n := protowire.ConsumeBytes(b)
		if n < 0 {
			return nil, false
		}
		b = b[n:]
		if num == 3 {
			s, ok := decodeStruct(v, 1)
			if !ok {
				return nil, false
			}
			op.Args = s
			continue
		}
		if !utf8.Valid(v) {
			return nil, false
		}
		switch num {
		case 1:
			op.OperationId = string(v)
		case 2:
			op.ToolName = string(v)
		case 4:
			op.DependsOn = append(op.DependsOn, string(v))
		case 7:
			op.McpCallId = string(v)
		}
	}
	return op, true
}

// maxWireDepth bounds the Structs and lists decodeOperation decodes: deeper
// args are left to proto.Unmarshal (and refused later: plan.MaxArgsDepth).
const maxWireDepth = 64

// decodeStruct decodes a google.protobuf.Struct: field 1, its map entries.
func decodeStruct(b []byte, depth int) (*structpb.Struct, bool) {
	if depth > maxWireDepth {
		return nil, false
	}
	s := &structpb.Struct{} // Fields stays nil when empty, as proto.Unmarshal leaves it
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 || num != 1 || typ != protowire.BytesType {
			return nil, false
		}
		b = b[n:]
		entry, n := protowire.ConsumeBytes(b)
		if n < 0 {
			return nil, false
		}
		b = b[n:]
		key, val, ok := decodeEntry(entry, depth)
		if !ok {
			return nil, false
		}
		if s.Fields == nil {
			s.Fields = map[string]*structpb.Value{}
		}
		s.Fields[key] = val // a key met twice: the last wins, as in proto.Unmarshal
	}
	return s, true
}

// decodeEntry decodes one map entry of a Struct: key (1), then value (2).
func decodeEntry(b []byte, depth int) (string, *structpb.Value, bool) {
	var key string
	var val *structpb.Value
	var seen uint8
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 || num < 1 || num > 2 || typ != protowire.BytesType || seen&(1<<num) != 0 {
			return "", nil, false
		}
		seen |= 1 << num
		b = b[n:]
		v, n := protowire.ConsumeBytes(b)
		if n < 0 {
			return "", nil, false
		}
		b = b[n:]
		if num == 1 {
			if !utf8.Valid(v) {
				return "", nil, false
			}
			key = string(v)
			continue
		}
		var ok bool
		if val, ok = decodeValue(v, depth); !ok {
			return "", nil, false
		}
	}
	return key, val, seen == 1<<1|1<<2
}

// decodeValue decodes a google.protobuf.Value: exactly one of its kinds.
func decodeValue(b []byte, depth int) (*structpb.Value, bool) {
	num, typ, n := protowire.ConsumeTag(b)
	if n < 0 {
		return nil, false
	}
	b = b[n:]
	var v *structpb.Value
	switch {
	case num == 1 && typ == protowire.VarintType: // null_value: NULL_VALUE only
		x, n := protowire.ConsumeVarint(b)
		if n < 0 || x != 0 {
			return nil, false
		}
		b, v = b[n:], structpb.NewNullValue()
	case num == 2 && typ == protowire.Fixed64Type:
		x, n := protowire.ConsumeFixed64(b)
		if n < 0 {
			return nil, false
		}
		b, v = b[n:], structpb.NewNumberValue(math.Float64frombits(x))
	case num == 4 && typ == protowire.VarintType:
		x, n := protowire.ConsumeVarint(b)
		if n < 0 || x > 1 {
			return nil, false
		}
		b, v = b[n:], structpb.NewBoolValue(x == 1)
	case (num == 3 || num == 5 || num == 6) && typ == protowire.BytesType:
		x, n := protowire.ConsumeBytes(b)
		if n < 0 {
			return nil, false
		}
		b = b[n:]
		switch num {
		case 3:
			if !utf8.Valid(x) {
				return nil, false
			}
			v = structpb.NewStringValue(string(x))
		case 5:
			s, ok := decodeStruct(x, depth+1)
			if !ok {
				return nil, false
			}
			v = structpb.NewStructValue(s)
		case 6:
			l, ok := decodeList(x, depth+1)
			if !ok {
				return nil, false
			}
			v = structpb.NewListValue(l)
		}
	default:
		return nil, false
	}
	return v, len(b) == 0 // a second kind: proto.Unmarshal's last one wins; left to it
}

// decodeList decodes a google.protobuf.ListValue: field 1, its values.
func decodeList(b []byte, depth int) (*structpb.ListValue, bool) {
	if depth > maxWireDepth {
		return nil, false
	}
	l := &structpb.ListValue{}
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 || num != 1 || typ != protowire.BytesType {
			return nil, false
		}
		b = b[n:]
		x, n := protowire.ConsumeBytes(b)
		if n < 0 {
			return nil, false
		}
		b = b[n:]
		v, ok := decodeValue(x, depth)
		if !ok {
			return nil, false
		}
		l.Values = append(l.Values, v)
	}
	return l, true
}
