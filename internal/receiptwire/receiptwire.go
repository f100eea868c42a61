// Package receiptwire passes a receipt's result through a process without
// decoding it. A result is a google.protobuf.Struct, and Go decodes and
// encodes Structs slowly (a 220-object scene summary, 11 KB, takes about
// 0.2 ms each way): the control plane would decode every result an agent
// sends, then encode it again for its store and for every stream, without
// ever reading it.
//
// Unmarshal leaves the result as the bytes it arrived in, in the receipt's
// unknown fields, from where proto.Marshal writes them back unchanged under
// the same field number: whoever decodes the receipt next sees an ordinary
// result. On such a receipt GetResult() is nil; Result decodes it for the
// rare reader that needs it.
package receiptwire

import (
	"fmt"

	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	agentv1 "github.com/blendplane/blendplane/gen/blendplane/agent/v1"
	cpv1 "github.com/blendplane/blendplane/gen/blendplane/controlplane/v1"
	"github.com/blendplane/blendplane/internal/wirefields"
)

var (
	resultField   = wirefields.FieldNumber(&cpv1.Receipt{}, "result")
	executeEvent  = wirefields.FieldNumber(&agentv1.ExecuteResponse{}, "receipt")
	streamedEvent = wirefields.FieldNumber(&cpv1.StreamReceiptsResponse{}, "receipt")
)

// Unmarshal decodes a receipt from b, its result left undecoded: the
// fields around it are decoded where they lie (merged, as one decode
// would), the result's bytes copied aside.
func Unmarshal(b []byte, r *cpv1.Receipt) error {
	proto.Reset(r)
	merge := proto.UnmarshalOptions{Merge: true}
	var result []byte
	start, off := 0, 0
	err := wirefields.Each(b, func(n protowire.Number, typ protowire.Type, field, _ []byte) error {
		if n == resultField {
			if typ != protowire.BytesType {
				return fmt.Errorf("field %d: wire type %d, want a message", n, typ)
			}
			if err := merge.Unmarshal(b[start:off], r); err != nil {
				return err
			}
			result = append(result, field...)
			start = off + len(field)
		}
		off += len(field)
		return nil
	})
	if err == nil {
		err = merge.Unmarshal(b[start:], r)
	}
	if err != nil {
		return err
	}
	if len(result) > 0 {
		m := r.ProtoReflect()
		m.SetUnknown(append(m.GetUnknown(), result...))
	}
	return nil
}

// SetResult gives r the result res in wire form (deterministically
// encoded): the receipt is then encoded as often as it is sent or journaled,
// and its result only once.
func SetResult(r *cpv1.Receipt, res *structpb.Struct) error {
	raw, err := proto.MarshalOptions{Deterministic: true}.Marshal(res)
	if err != nil {
		return err
	}
	return SetResultWire(r, raw)
}

// SetResultWire gives r the result whose google.protobuf.Struct is raw, in
// wire form (structwire.FromJSON).
func SetResultWire(r *cpv1.Receipt, raw []byte) error {
	r.Result = nil
	m := r.ProtoReflect()
	unknown, _, err := wirefields.Cut(m.GetUnknown(), resultField) // a result set before is replaced
	if err != nil {
		return err
	}
	unknown = protowire.AppendTag(append([]byte(nil), unknown...), resultField, protowire.BytesType)
	m.SetUnknown(protowire.AppendBytes(unknown, raw))
	return nil
}

// Result is r's result, decoded if it is still in its wire form.
func Result(r *cpv1.Receipt) (*structpb.Struct, error) {
	if r.GetResult() != nil {
		return r.GetResult(), nil
	}
	_, raw, err := wirefields.Cut(r.ProtoReflect().GetUnknown(), resultField)
	if err != nil || len(raw) == 0 {
		return nil, err
	}
	var holder cpv1.Receipt
	if err := proto.Unmarshal(raw, &holder); err != nil {
		return nil, err
	}
	return holder.GetResult(), nil
}

// Codec is gRPC's proto codec, except that the receipt of an
// ExecuteResponse (from an agent) or of a StreamReceiptsResponse (from the
// control plane) is decoded with Unmarshal, its result left in wire form.
// The control plane's calls to agents use it, and the MCP server's.
type Codec struct{}

var base = encoding.GetCodecV2("proto")

// Name is the codec's content subtype: proto, as the server's.
func (Codec) Name() string { return base.Name() }

// Marshal encodes as gRPC's proto codec does.
func (Codec) Marshal(v any) (mem.BufferSlice, error) { return base.Marshal(v) }

// Unmarshal decodes as gRPC's proto codec does, but a response's receipt
// keeps its result in wire form.
func (Codec) Unmarshal(data mem.BufferSlice, v any) error {
	var set func(*cpv1.Receipt)
	var receipt protowire.Number
	switch resp := v.(type) {
	case *agentv1.ExecuteResponse:
		receipt = executeEvent
		set = func(r *cpv1.Receipt) { resp.Event = &agentv1.ExecuteResponse_Receipt{Receipt: r} }
	case *cpv1.StreamReceiptsResponse:
		receipt = streamedEvent
		set = func(r *cpv1.Receipt) { resp.Event = &cpv1.StreamReceiptsResponse_Receipt{Receipt: r} }
	default:
		return base.Unmarshal(data, v)
	}
	m := v.(proto.Message)
	rest, event, err := wirefields.Cut(data.Materialize(), receipt)
	if err != nil {
		return err
	}
	if err := proto.Unmarshal(rest, m); err != nil {
		return err
	}
	// One receipt per response (a oneof): the last occurrence wins.
	return wirefields.Each(event, func(_ protowire.Number, _ protowire.Type, _, raw []byte) error {
		r := &cpv1.Receipt{}
		if err := Unmarshal(raw, r); err != nil {
			return err
		}
		set(r)
		return nil
	})
}
