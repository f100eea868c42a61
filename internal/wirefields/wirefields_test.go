package wirefields

import (
	"bytes"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/types/known/timestamppb"
)

func TestEach(t *testing.T) {
	var b []byte
	b = protowire.AppendVarint(protowire.AppendTag(b, 1, protowire.VarintType), 300)
	b = protowire.AppendBytes(protowire.AppendTag(b, 2, protowire.BytesType), []byte("abc"))
	b = protowire.AppendFixed64(protowire.AppendTag(b, 3, protowire.Fixed64Type), 7)
	var nums []protowire.Number
	var whole []byte
	err := Each(b, func(num protowire.Number, typ protowire.Type, field, value []byte) error {
		nums = append(nums, num)
		whole = append(whole, field...)
		if num == 2 && string(value) != "abc" {
			t.Errorf("bytes value %q", value)
		}
		if num == 1 {
			if v, _ := protowire.ConsumeVarint(value); v != 300 {
				t.Errorf("varint value %d", v)
			}
		}
		return nil
	})
	if err != nil || len(nums) != 3 || !bytes.Equal(whole, b) {
		t.Fatalf("fields %v, %v; whole encodings joined give the message: %v", nums, err, bytes.Equal(whole, b))
	}
	if err := Each(b[:len(b)-2], func(protowire.Number, protowire.Type, []byte, []byte) error { return nil }); err == nil {
		t.Error("a truncated message was walked")
	}
}

func TestEachBytes(t *testing.T) {
	var b []byte
	b = protowire.AppendBytes(protowire.AppendTag(b, 2, protowire.BytesType), []byte("a"))
	b = protowire.AppendVarint(protowire.AppendTag(b, 2, protowire.VarintType), 5) // same number, other type
	b = protowire.AppendBytes(protowire.AppendTag(b, 3, protowire.BytesType), []byte("x"))
	b = protowire.AppendBytes(protowire.AppendTag(b, 2, protowire.BytesType), []byte("b"))
	var got []string
	err := EachBytes(b, 2, func(v []byte) error { got = append(got, string(v)); return nil })
	if err != nil || len(got) != 2 || got[0] != "a" || got[1] != "b" {
		t.Fatalf("field 2: %q, %v; want a, b", got, err)
	}
}

// TestCut: the length-delimited fields numbered num, in order, apart from
// the rest; one of another wire type stays in the rest, as proto.Unmarshal
// keeps it (unknown).
func TestCut(t *testing.T) {
	field := func(num protowire.Number, s string) []byte {
		return protowire.AppendString(protowire.AppendTag(nil, num, protowire.BytesType), s)
	}
	varint3 := protowire.AppendVarint(protowire.AppendTag(nil, 3, protowire.VarintType), 5)
	b := bytes.Join([][]byte{field(1, "a"), field(3, "x"), varint3, field(2, "b"), field(3, "y")}, nil)
	rest, fields, err := Cut(b, 3)
	if err != nil || !bytes.Equal(fields, append(field(3, "x"), field(3, "y")...)) ||
		!bytes.Equal(rest, bytes.Join([][]byte{field(1, "a"), varint3, field(2, "b")}, nil)) {
		t.Fatalf("Cut = %x, %x, %v", rest, fields, err)
	}
	if rest, fields, err := Cut(b, 9); err != nil || fields != nil || &rest[0] != &b[0] || len(rest) != len(b) {
		t.Fatalf("nothing to cut: rest %x (b itself: %v), fields %x, %v", rest, len(rest) > 0 && &rest[0] == &b[0], fields, err)
	}
	if _, _, err := Cut(b[:len(b)-1], 3); err == nil {
		t.Error("a truncated message was cut")
	}
}

func TestFieldNumber(t *testing.T) {
	if n := FieldNumber(&timestamppb.Timestamp{}, "nanos"); n != 2 {
		t.Fatalf("Timestamp.nanos is field %d, want 2", n)
	}
	defer func() {
		if recover() == nil {
			t.Fatal("a misspelt field name gave a number")
		}
	}()
	FieldNumber(&timestamppb.Timestamp{}, "nano")
}
