package structwire

import (
	"math"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/blendplane/blendplane/internal/wirefields"
)

// maxMapDepth bounds the nesting Map decodes (a Struct is depth 1); deeper
// args are left to proto.Unmarshal, and refused later (64 is agentd's and
// the control plane's limit on args).
const maxMapDepth = 64

// Map decodes the google.protobuf.Struct in wire form b into the map its
// AsMap gives, without building the Struct: proto.Unmarshal fills a
// Struct's maps and oneofs through reflection, and agentd only ever needs
// the maps. It knows only the form encoders write: each map entry with its
// key and value once, each Value of exactly one kind, numbers finite,
// strings valid UTF-8, no other fields, at most maxMapDepth deep. Anything else gives false, and
// the caller decodes with proto.Unmarshal, which also says what is wrong.
func Map(b []byte) (map[string]any, bool) { return mapOf(b, 1) }

func mapOf(b []byte, depth int) (map[string]any, bool) {
	if depth > maxMapDepth {
		return nil, false
	}
	m := map[string]any{} // AsMap gives an empty map, not nil, for {}
	for len(b) > 0 {
		num, typ, e, n := wirefields.Next(b)
		if n < 0 || num != structFields || typ != protowire.BytesType {
			return nil, false
		}
		b = b[n:]
		key, val, ok := mapEntry(e, depth)
		if !ok {
			return nil, false
		}
		m[key] = val // a key met twice: the last wins, as in proto.Unmarshal
	}
	return m, true
}

// mapEntry decodes one map entry of a Struct: key (1) and value (2), each
// once.
func mapEntry(b []byte, depth int) (key string, val any, ok bool) {
	var seen uint8
	for len(b) > 0 {
		num, typ, v, n := wirefields.Next(b)
		if n < 0 || num < entryKey || num > entryValue || seen&(1<<num) != 0 || typ != protowire.BytesType {
			return "", nil, false
		}
		seen |= 1 << num
		b = b[n:]
		if num == entryKey {
			key, ok = string(v), utf8.Valid(v)
		} else {
			val, ok = mapValue(v, depth)
		}
		if !ok {
			return "", nil, false
		}
	}
	return key, val, seen == 1<<entryKey|1<<entryValue
}

// mapValue decodes a google.protobuf.Value of exactly one kind, as
// AsInterface gives it; not a NaN or an infinity, which AsInterface turns
// into the strings "NaN", "Infinity" and "-Infinity".
func mapValue(b []byte, depth int) (any, bool) {
	num, typ, x, n := wirefields.Next(b)
	if n < 0 || n != len(b) {
		return nil, false
	}
	switch {
	case num == valueNull && typ == protowire.VarintType:
		v, n := protowire.ConsumeVarint(x)
		return nil, n > 0 && v == 0
	case num == valueNumber && typ == protowire.Fixed64Type:
		bits, n := protowire.ConsumeFixed64(x)
		f := math.Float64frombits(bits)
		return f, n > 0 && !math.IsNaN(f) && !math.IsInf(f, 0)
	case num == valueString && typ == protowire.BytesType:
		return string(x), utf8.Valid(x)
	case num == valueBool && typ == protowire.VarintType:
		v, n := protowire.ConsumeVarint(x)
		return v == 1, n > 0 && v <= 1
	case num == valueStruct && typ == protowire.BytesType:
		return mapOf(x, depth+1)
	case num == valueList && typ == protowire.BytesType:
		return listOf(x, depth+1)
	}
	return nil, false
}

// listOf decodes a google.protobuf.ListValue's values, as AsSlice gives
// them.
func listOf(b []byte, depth int) ([]any, bool) {
	if depth > maxMapDepth {
		return nil, false
	}
	l := []any{} // AsSlice gives an empty slice, not nil, for []
	for len(b) > 0 {
		num, typ, v, n := wirefields.Next(b)
		if n < 0 || num != listValues || typ != protowire.BytesType {
			return nil, false
		}
		b = b[n:]
		x, ok := mapValue(v, depth)
		if !ok {
			return nil, false
		}
		l = append(l, x)
	}
	return l, true
}
