// Package wirefields walks the top-level fields of an encoded protobuf
// message without decoding it, for the few places that handle one field
// apart from the rest (a plan's operations, decoded in parallel; a
// receipt's result, passed through undecoded).
package wirefields

import "google.golang.org/protobuf/encoding/protowire"

// Each calls fn with every field of the message b in order: its number,
// wire type and whole encoding (tag included), and value (for a
// length-delimited field, its contents; otherwise the value's encoding).
func Each(b []byte, fn func(num protowire.Number, typ protowire.Type, field, value []byte) error) error {
	for len(b) > 0 {
		num, typ, tl := protowire.ConsumeTag(b)
		if tl < 0 {
			return protowire.ParseError(tl)
		}
		vl := protowire.ConsumeFieldValue(num, typ, b[tl:])
		if vl < 0 {
			return protowire.ParseError(vl)
		}
		value := b[tl : tl+vl]
		if typ == protowire.BytesType {
			value, _ = protowire.ConsumeBytes(value)
		}
		if err := fn(num, typ, b[:tl+vl], value); err != nil {
			return err
		}
		b = b[tl+vl:]
	}
	return nil
}
