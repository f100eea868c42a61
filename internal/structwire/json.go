package structwire

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strconv"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/blendplane/blendplane/internal/wirefields"
)

// AppendJSON appends the google.protobuf.Struct in wire form b as JSON: the
// bytes json.Marshal gives for its AsMap (keys sorted, numbers and strings
// as encoding/json writes them), without building either.
func AppendJSON(out, b []byte) ([]byte, error) { return appendStruct(out, b, 0) }

// maxWireDepth bounds nesting as protobuf's own decoder does (its default
// recursion limit).
const maxWireDepth = 10000

const errDepthLimit = "result nested deeper than %d"

func appendStruct(out, b []byte, depth int) ([]byte, error) {
	if depth > maxWireDepth {
		return nil, fmt.Errorf(errDepthLimit, maxWireDepth)
	}
	type entry struct {
		key, value []byte // value nil: null
	}
	var small [32]entry // most results' objects fit: no allocation
	entries := small[:0]
	for len(b) > 0 {
		num, typ, e, n := wirefields.Next(b)
		if n < 0 {
			return nil, protowire.ParseError(n)
		}
		b = b[n:]
		if num != structFields || typ != protowire.BytesType {
			continue // unknown to Struct: AsMap ignores it too
		}
		var ent entry
		for len(e) > 0 {
			num, typ, v, n := wirefields.Next(e)
			if n < 0 {
				return nil, protowire.ParseError(n)
			}
			e = e[n:]
			if typ != protowire.BytesType {
				continue
			}
			switch num {
			case entryKey:
				ent.key = v
			case entryValue:
				ent.value = v
			}
		}
		entries = append(entries, ent)
	}
	// A repeated key: the last one wins, as in a Go map.
	slices.SortStableFunc(entries, func(x, y entry) int { return bytes.Compare(x.key, y.key) })
	out = append(out, '{')
	first := true
	for i, e := range entries {
		if i+1 < len(entries) && bytes.Equal(entries[i+1].key, e.key) {
			continue
		}
		if !first {
			out = append(out, ',')
		}
		first = false
		out = AppendString(out, e.key)
		out = append(out, ':')
		var err error
		if out, err = appendValue(out, e.value, depth+1); err != nil {
			return nil, err
		}
	}
	return append(out, '}'), nil
}

func appendList(out, b []byte, depth int) ([]byte, error) {
	if depth > maxWireDepth {
		return nil, fmt.Errorf(errDepthLimit, maxWireDepth)
	}
	out = append(out, '[')
	first := true
	for len(b) > 0 {
		num, typ, val, n := wirefields.Next(b)
		if n < 0 {
			return nil, protowire.ParseError(n)
		}
		b = b[n:]
		if num != listValues || typ != protowire.BytesType {
			continue
		}
		if !first {
			out = append(out, ',')
		}
		first = false
		var err error
		if out, err = appendValue(out, val, depth+1); err != nil {
			return nil, err
		}
	}
	return append(out, ']'), nil
}

// appendValue writes a google.protobuf.Value: its kind's last occurrence,
// null when it has none (as AsInterface gives nil).
func appendValue(out, b []byte, depth int) ([]byte, error) {
	var kind protowire.Number
	var val []byte
	var typ protowire.Type
	for len(b) > 0 {
		num, t, v, n := wirefields.Next(b)
		if n < 0 {
			return nil, protowire.ParseError(n)
		}
		b = b[n:]
		if num >= valueNull && num <= valueList {
			kind, typ, val = num, t, v
		}
	}
	wrong := func() error { return fmt.Errorf("result: value kind %d has wire type %d", kind, typ) }
	switch kind {
	case 0, valueNull:
		return append(out, "null"...), nil
	case valueNumber:
		if typ != protowire.Fixed64Type {
			return nil, wrong()
		}
		bits, _ := protowire.ConsumeFixed64(val)
		return appendFloat(out, math.Float64frombits(bits))
	case valueString:
		if typ != protowire.BytesType {
			return nil, wrong()
		}
		return AppendString(out, val), nil
	case valueBool:
		if typ != protowire.VarintType {
			return nil, wrong()
		}
		if v, _ := protowire.ConsumeVarint(val); v != 0 {
			return append(out, "true"...), nil
		}
		return append(out, "false"...), nil
	}
	if typ != protowire.BytesType {
		return nil, wrong()
	}
	if kind == valueStruct {
		return appendStruct(out, val, depth)
	}
	return appendList(out, val, depth)
}

// appendFloat writes f as encoding/json does.
func appendFloat(out []byte, f float64) ([]byte, error) {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return nil, fmt.Errorf("result: unsupported number %v", f)
	}
	format := byte('f')
	if abs := math.Abs(f); abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		format = 'e'
	}
	out = strconv.AppendFloat(out, f, format, -1, 64)
	if format == 'e' { // e-09 → e-9, as encoding/json writes it
		if n := len(out); n >= 4 && out[n-4] == 'e' && out[n-3] == '-' && out[n-2] == '0' {
			out[n-2] = out[n-1]
			out = out[:n-1]
		}
	}
	return out, nil
}

// AppendString writes s as encoding/json does (HTML-safe, invalid UTF-8 as
// U+FFFD): plain ASCII directly, anything else through encoding/json.
func AppendString[S ~string | ~[]byte](out []byte, s S) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' || c >= 0x80 {
			b, _ := json.Marshal(string(s)) // a string always encodes
			return append(out, b...)
		}
	}
	out = append(out, '"')
	out = append(out, s...)
	return append(out, '"')
}
