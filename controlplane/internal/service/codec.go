package service

import (
	"fmt"
	"sync"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/encoding"
	_ "google.golang.org/grpc/encoding/proto" // registers the proto codec wrapped below
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"
)

// Codec is the server's proto codec. gRPC turns any codec error into a bare
// INTERNAL status, so a request that does not decode (malformed protobuf,
// invalid UTF-8 in a string, nesting deeper than protobuf allows) or is
// over the payload limit is not failed here: Codec resets the message,
// records why, and the Validation interceptor, which sees the same message
// next, refuses it with its documented code and ErrorInfo.
//
// The transport's own limit (grpc.MaxRecvMsgSize) must be above Limit, so
// that messages a little over Limit reach the codec; beyond the transport
// limit gRPC refuses them itself, without details.
type Codec struct {
	// Limit is the largest message accepted, in bytes.
	Limit int

	base     encoding.CodecV2
	failures sync.Map // proto.Message → error, until the interceptor takes it
}

var _ encoding.CodecV2 = (*Codec)(nil)

// NewCodec wraps gRPC's proto codec.
func NewCodec(limit int) *Codec {
	return &Codec{Limit: limit, base: encoding.GetCodecV2("proto")}
}

// Name is the codec's content subtype.
func (c *Codec) Name() string { return c.base.Name() }

// Marshal encodes as gRPC's proto codec does.
func (c *Codec) Marshal(v any) (mem.BufferSlice, error) { return c.base.Marshal(v) }

// Unmarshal decodes a request, recording a refusal instead of failing.
func (c *Codec) Unmarshal(data mem.BufferSlice, v any) error {
	m, ok := v.(proto.Message)
	if !ok {
		return c.base.Unmarshal(data, v)
	}
	if n := data.Len(); n > c.Limit {
		c.failures.Store(m, fieldStatus(codes.ResourceExhausted, "PAYLOAD_TOO_LARGE", "",
			fmt.Sprintf("the request is %d bytes; this control plane accepts at most %d: split it", n, c.Limit)))
		return nil
	}
	if err := c.base.Unmarshal(data, v); err != nil {
		proto.Reset(m)
		c.failures.Store(m, fieldStatus(codes.InvalidArgument, "SCHEMA_INVALID", "",
			fmt.Sprintf("the request is not a valid %s: %v", m.ProtoReflect().Descriptor().FullName(), err)))
	}
	return nil
}

// failure takes the refusal recorded for a decoded message, if any.
func (c *Codec) failure(m any) error {
	if c == nil {
		return nil
	}
	if err, ok := c.failures.LoadAndDelete(m); ok {
		return err.(error)
	}
	return nil
}
