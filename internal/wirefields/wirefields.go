// Package wirefields walks the top-level fields of an encoded protobuf
// message without decoding it, for the few places that handle one field
// apart from the rest (a plan's operations, decoded in parallel; a
// receipt's result, passed through undecoded; an operation's args, decoded
// straight into maps).
package wirefields

import (
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// FieldNumber is the number of m's field called name, for the code that
// reads or cuts that field in wire form. It panics if m has no such field:
// a misspelt name fails at start-up, not on the wire.
func FieldNumber(m proto.Message, name string) protowire.Number {
	md := m.ProtoReflect().Descriptor()
	fd := md.Fields().ByName(protoreflect.Name(name))
	if fd == nil {
		panic("wirefields: " + string(md.FullName()) + " has no field " + name)
	}
	return fd.Number()
}

// Each calls fn with every field of the message b in order: its number,
// wire type and whole encoding (tag included), and value (for a
// length-delimited field, its contents; otherwise the value's encoding).
func Each(b []byte, fn func(num protowire.Number, typ protowire.Type, field, value []byte) error) error {
	for len(b) > 0 {
		num, typ, value, n := Next(b)
		if n < 0 {
			return protowire.ParseError(n)
		}
		if err := fn(num, typ, b[:n], value); err != nil {
			return err
		}
		b = b[n:]
	}
	return nil
}

// EachBytes calls fn with the contents of every length-delimited field num
// of the message b, in order: each part of a message field (which
// proto.Unmarshal merges), or each value of a repeated string or message.
func EachBytes(b []byte, num protowire.Number, fn func(value []byte) error) error {
	return Each(b, func(n protowire.Number, typ protowire.Type, _, value []byte) error {
		if n != num || typ != protowire.BytesType {
			return nil
		}
		return fn(value)
	})
}

// Cut splits the top-level fields of the message b into the
// length-delimited ones numbered num (as they are, tags included), as a
// message field or a string is written, and the rest: a field numbered num
// of another wire type stays in rest, where proto.Unmarshal keeps it as an
// unknown field. rest is b itself when nothing was cut.
func Cut(b []byte, num protowire.Number) (rest, fields []byte, err error) {
	copied := false // rest is b until a field is cut
	off := 0
	err = Each(b, func(n protowire.Number, typ protowire.Type, field, _ []byte) error {
		switch {
		case n == num && typ == protowire.BytesType:
			if !copied { // each sized to hold all it may get: no regrowth
				rest, copied = append(make([]byte, 0, len(b)-len(field)), b[:off]...), true
				fields = make([]byte, 0, len(b)-off)
			}
			fields = append(fields, field...)
		case copied:
			rest = append(rest, field...)
		}
		off += len(field)
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	if !copied {
		rest = b
	}
	return rest, fields, nil
}

// Next reads the field at the start of b, as Each gives it, and its whole
// length: negative (a protowire error code) if b does not start with a
// whole field. Loops on a hot path call it instead of Each: no closure.
func Next(b []byte) (num protowire.Number, typ protowire.Type, value []byte, n int) {
	num, typ, tl := protowire.ConsumeTag(b)
	if tl < 0 {
		return 0, 0, nil, tl
	}
	if typ == protowire.BytesType { // the usual case: its length read once
		v, vl := protowire.ConsumeBytes(b[tl:])
		if vl < 0 {
			return 0, 0, nil, vl
		}
		return num, typ, v, tl + vl
	}
	vl := protowire.ConsumeFieldValue(num, typ, b[tl:])
	if vl < 0 {
		return 0, 0, nil, vl
	}
	return num, typ, b[tl : tl+vl], tl + vl
}
