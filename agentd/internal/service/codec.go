package service

import (
	"errors"
	"fmt"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/encoding"
	_ "google.golang.org/grpc/encoding/proto" // registers the proto codec wrapped below
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	agentv1 "github.com/blendplane/blendplane/gen/blendplane/agent/v1"
	"github.com/blendplane/blendplane/internal/panicguard"
	"github.com/blendplane/blendplane/internal/structwire"
	"github.com/blendplane/blendplane/internal/undecoded"
	"github.com/blendplane/blendplane/internal/wirefields"
)

// Codec is gRPC's proto codec, except that each operation of an
// ExecuteRequest keeps its args in wire form, in its unknown fields, for
// operationArgs to decode straight into the maps agentd runs them with:
// proto.Unmarshal fills the args' Structs through reflection, and AsMap then
// copies them into maps, which took 1.8–2.9 ms of agentd's CPU before the
// first operation of a 400-operation batch could start (Codec: 0.9–1.2).
// Nothing validates args (agent.proto ignores them), so validation sees the
// same request.
//
// A request that does not decode (or whose decoding panics) is not failed
// here, which gRPC would answer INTERNAL, but recorded, and the Validator
// refuses it as INVALID_ARGUMENT.
type Codec struct {
	failures *undecoded.Requests
}

// NewCodec returns the codec of one server, for its Validator too.
func NewCodec() Codec { return Codec{failures: &undecoded.Requests{}} }

var base = encoding.GetCodecV2("proto")

// Field numbers of ExecuteRequest.operations and OperationCall.args.
var (
	operationsField = wirefields.FieldNumber(&agentv1.ExecuteRequest{}, "operations")
	argsField       = wirefields.FieldNumber(&agentv1.OperationCall{}, "args")
)

// Name is the codec's content subtype: proto, as the client's.
func (Codec) Name() string { return base.Name() }

// Marshal encodes as gRPC's proto codec does.
func (Codec) Marshal(v any) (mem.BufferSlice, error) { return base.Marshal(v) }

// Unmarshal decodes as gRPC's proto codec does, but an ExecuteRequest's
// operations keep their args in wire form.
func (c Codec) Unmarshal(data mem.BufferSlice, v any) error {
	m, ok := v.(proto.Message)
	if !ok || c.failures == nil {
		return c.decode(data, v, "")
	}
	name := m.ProtoReflect().Descriptor().FullName()
	if err := c.decode(data, v, name); err != nil {
		c.failures.Record(m, fmt.Errorf("the request is not a valid %s: %w", name, err))
	}
	return nil
}

func (Codec) decode(data mem.BufferSlice, v any, name protoreflect.FullName) (err error) {
	defer panicguard.Catch("decoding a "+string(name), &err)
	req, ok := v.(*agentv1.ExecuteRequest)
	if !ok {
		return base.Unmarshal(data, v)
	}
	return unmarshalExecute(data.Materialize(), req)
}

// failure takes the decoding failure recorded for m, if any.
func (c Codec) failure(m proto.Message) error { return c.failures.Take(m) }

func unmarshalExecute(b []byte, req *agentv1.ExecuteRequest) error {
	rest, ops, err := wirefields.Cut(b, operationsField)
	if err != nil {
		return err
	}
	if err := proto.Unmarshal(rest, req); err != nil {
		return err
	}
	return wirefields.EachBytes(ops, operationsField, func(raw []byte) error {
		rest, args, err := wirefields.Cut(raw, argsField)
		if err != nil {
			return err
		}
		op := &agentv1.OperationCall{}
		if err := operationUnmarshal.Unmarshal(rest, op); err != nil {
			return err
		}
		if len(args) > 0 { // kept in wire form, for operationArgs
			m := op.ProtoReflect()
			m.SetUnknown(append(m.GetUnknown(), args...))
		}
		req.Operations = append(req.Operations, op)
		return nil
	})
}

// operationArgs is each operation's args, as Struct.AsMap gives them:
// decoded from the wire form Codec left, or from the Struct of a request
// decoded whole. Every operation must have its args: the rule protovalidate
// leaves to agentd (agent.proto).
func operationArgs(ops []*agentv1.OperationCall) ([]map[string]any, error) {
	out := make([]map[string]any, len(ops))
	for i, o := range ops {
		args, err := argsOf(o)
		if err != nil {
			return nil, status.Errorf(codes.InvalidArgument, "validation error: operations[%d].args: %v", i, err)
		}
		out[i] = args
	}
	return out, nil
}

func argsOf(o *agentv1.OperationCall) (map[string]any, error) {
	if o.GetArgs() != nil {
		return o.GetArgs().AsMap(), nil
	}
	_, parts, err := wirefields.Cut(o.ProtoReflect().GetUnknown(), argsField)
	switch {
	case err != nil:
		return nil, err
	case len(parts) == 0:
		return nil, errors.New("value is required")
	}
	// One occurrence, as encoders write it, decodes straight into maps;
	// anything else as proto.Unmarshal does (several merge).
	if _, _, v, n := wirefields.Next(parts); n == len(parts) {
		if args, ok := structwire.Map(v); ok {
			return args, nil
		}
	}
	var whole agentv1.OperationCall
	if err := operationUnmarshal.Unmarshal(parts, &whole); err != nil {
		return nil, err
	}
	return whole.GetArgs().AsMap(), nil
}

// operationUnmarshal decodes an operation as a part of its request: one
// level of nesting less than the request's own limit, which counts the
// request.
var operationUnmarshal = proto.UnmarshalOptions{RecursionLimit: protowire.DefaultRecursionLimit - 1}
