// Package planjson is the JSON that the front doors speak to clients and
// models (seed 000's wire): plans in, receipts and the failure contract out.
// The MCP server and the planner runtime share it, so that a model sees the
// same shapes whichever door it comes through.
package planjson

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strconv"
	"strings"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/structpb"

	cpv1 "github.com/blendplane/blendplane/gen/blendplane/controlplane/v1"
	"github.com/blendplane/blendplane/internal/receiptwire"
	"github.com/blendplane/blendplane/internal/structwire"
)

// Schema is the JSON Schema of a whole plan as one call's arguments.
var Schema = json.RawMessage(`{
  "type": "object",
  "properties": {
    "operations": {"type": "array", "minItems": 1, "items": {
      "type": "object",
      "properties": {
        "operation_id": {"type": "string"},
        "tool_name": {"type": "string"},
        "args": {"type": "object"},
        "depends_on": {"type": "array", "items": {"type": "string"}},
        "safety_level": {"type": "string", "enum": ["read_only", "safe_write", "destructive"]}
      },
      "required": ["operation_id", "tool_name", "args"],
      "additionalProperties": false
    }},
    "atomic": {"type": "boolean"}
  },
  "required": ["operations"],
  "additionalProperties": false
}`)

// PlanDescription tells a model what a plan is.
const PlanDescription = "Run a whole plan: operations (operation_id, tool_name, args, depends_on, safety_level) checked " +
	"together before any runs, scheduled by their dependencies, one receipt each. " +
	"atomic: undo them all if one fails."

// Operation is one operation of a plan in seed 000's JSON (Schema's items,
// the planner output schema's operations). safety_level is the seed's name
// ("safe_write"); a caller may accept more.
type Operation struct {
	OperationID string         `json:"operation_id"`
	ToolName    string         `json:"tool_name"`
	Args        map[string]any `json:"args"`
	DependsOn   []string       `json:"depends_on"`
	SafetyLevel string         `json:"safety_level"`
}

// Plan decodes a plan given as Schema's JSON into operations. safetyOf
// gives an operation's level when it declares none (the tool's own).
func Plan(raw json.RawMessage, safetyOf func(tool string) cpv1.SafetyLevel) (ops []*cpv1.Operation, atomic bool, err error) {
	var in struct {
		Operations []Operation `json:"operations"`
		Atomic     bool        `json:"atomic"`
	}
	// A field the plan does not have is refused, not dropped: a misspelt
	// "depends_on" or "atomic" would run a plan other than the one meant.
	if err := DecodeStrict(raw, &in); err != nil {
		err = JSONError(raw, "the plan", err)
		if _, ok := UnknownField(err); ok {
			err = fmt.Errorf("%w (a plan has operations and atomic; an operation has operation_id, tool_name, args, depends_on and safety_level)", err)
		}
		return nil, false, err
	}
	if len(in.Operations) == 0 {
		return nil, false, fmt.Errorf("operations: a plan needs at least one operation")
	}
	ops = make([]*cpv1.Operation, len(in.Operations))
	for i, o := range in.Operations {
		if o.Args == nil {
			o.Args = map[string]any{}
		}
		args, err := structpb.NewStruct(o.Args)
		if err != nil {
			return nil, false, fmt.Errorf("operations[%d].args: %w", i, err)
		}
		level := safetyOf(o.ToolName)
		if o.SafetyLevel != "" {
			if level, err = ParseSafety(o.SafetyLevel); err != nil {
				return nil, false, fmt.Errorf("operations[%d].safety_level: %w", i, err)
			}
		}
		ops[i] = &cpv1.Operation{OperationId: o.OperationID, ToolName: o.ToolName, Args: args, DependsOn: o.DependsOn, SafetyLevel: level}
	}
	return ops, in.Atomic, nil
}

// Args decodes a tool call's arguments into a Struct (nil or null: {}).
func Args(raw json.RawMessage) (*structpb.Struct, error) {
	var m map[string]any
	if len(raw) > 0 && string(raw) != "null" {
		if err := json.Unmarshal(raw, &m); err != nil {
			return nil, JSONError(raw, "arguments", err)
		}
	}
	if m == nil {
		m = map[string]any{}
	}
	return structpb.NewStruct(m)
}

// ParseSafety reads a safety level as the seed names it ("safe_write") or
// as the API does ("SAFETY_LEVEL_SAFE_WRITE"), in any case.
func ParseSafety(s string) (cpv1.SafetyLevel, error) {
	name := strings.ToUpper(s)
	if !strings.HasPrefix(name, "SAFETY_LEVEL_") {
		name = "SAFETY_LEVEL_" + name
	}
	v, ok := cpv1.SafetyLevel_value[name]
	if !ok || v == 0 {
		return 0, fmt.Errorf("%q is not one of read_only, safe_write, destructive", s)
	}
	return cpv1.SafetyLevel(v), nil
}

// ErrTrailing: DecodeStrict found more after the JSON value.
var ErrTrailing = errors.New("one JSON value is expected, and more follows it")

// DecodeStrict decodes the one JSON value of raw into v: a field v does not
// have is an error (UnknownField names it), and so is anything after it.
func DecodeStrict(raw []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return ErrTrailing
	}
	return nil
}

// UnknownField is the field a strict decoding refused, from its error
// (JSONError's too).
func UnknownField(err error) (string, bool) {
	_, name, ok := strings.Cut(fmt.Sprint(err), "unknown field ")
	if !ok {
		return "", false
	}
	name, _, _ = strings.Cut(strings.TrimPrefix(name, `"`), `"`)
	return name, true
}

// JSONError says what is wrong with raw, the JSON of what, in the JSON's
// terms, not Go's (encoding/json names the Go types it decodes into), and
// where (line and column).
func JSONError(raw []byte, what string, err error) error {
	at := func(offset int64) string {
		before := raw[:min(max(int(offset), 0), len(raw))]
		// The offset is past the byte at fault: its column is the last read.
		return fmt.Sprintf("line %d, column %d", bytes.Count(before, []byte("\n"))+1, len(before)-bytes.LastIndexByte(before, '\n')-1)
	}
	var te *json.UnmarshalTypeError
	var se *json.SyntaxError
	switch {
	case errors.As(err, &te):
		if te.Field != "" {
			what = te.Field
		}
		kind := "a value of another type"
		switch te.Type.Kind() {
		case reflect.Struct, reflect.Map:
			kind = "an object"
		case reflect.Slice, reflect.Array:
			kind = "an array"
		case reflect.String:
			kind = "a string"
		case reflect.Bool:
			kind = "true or false"
		case reflect.Float64, reflect.Float32, reflect.Int, reflect.Int32, reflect.Int64:
			kind = "a number"
		}
		return fmt.Errorf("%s: %s is expected, not a JSON %s (%s)", what, kind, te.Value, at(te.Offset))
	case errors.Is(err, io.EOF) && len(bytes.TrimSpace(raw)) == 0:
		return fmt.Errorf("%s: empty", what)
	case errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF):
		return fmt.Errorf("%s: not JSON (it ends early: a missing } or ])", what)
	case errors.As(err, &se):
		return fmt.Errorf("%s: not JSON (%v, at %s)", what, se, at(se.Offset))
	}
	return fmt.Errorf("%s: %s", what, strings.TrimPrefix(err.Error(), "json: "))
}

// Receipts is a list of receipts as JSON.
func Receipts(rs []*cpv1.Receipt) []json.RawMessage {
	out := make([]json.RawMessage, len(rs))
	for i, r := range rs {
		out[i] = Receipt(r)
	}
	return out
}

// Receipt is a receipt as JSON, with the seed's field names and short enum
// values: what json.Marshal writes for a map of those fields (keys sorted),
// written directly, so that the tool's result (the big part) is copied once
// and not re-checked.
func Receipt(r *cpv1.Receipt) json.RawMessage {
	res := result(r)
	out := make([]byte, 0, len(res)+768)
	sep := byte('{')
	key := func(k string) { // {"k": or ,"k":
		out = append(append(append(append(out, sep, '"'), k...), '"'), ':')
		sep = ','
	}
	str := func(k, v string) {
		key(k)
		out = structwire.AppendString(out, v)
	}
	if t := r.GetAgentSentTime(); t != nil {
		str("agent_sent_time", t.AsTime().Format(time.RFC3339Nano))
	}
	if as := r.GetArtifacts(); len(as) > 0 {
		key("artifacts")
		for i, a := range as {
			if i == 0 {
				out = append(out, '[')
			} else {
				out = append(out, ',')
			}
			out = structwire.AppendString(out, a.GetName())
		}
		out = append(out, ']')
	}
	if id := r.GetBlenderMutationId(); id != "" {
		str("blender_mutation_id", id)
	}
	if t := r.GetCompleteTime(); t != nil {
		str("complete_time", t.AsTime().Format(time.RFC3339Nano))
	}
	str("determinism_class", r.GetDeterminismClass())
	key("duration_micros")
	out = strconv.AppendInt(out, r.GetDurationMicros(), 10)
	if f := r.GetError(); f != nil {
		b, _ := json.Marshal(Failure(f)) // a map of JSON values always encodes
		key("error")
		out = append(out, b...)
	}
	str("idempotency_key", r.GetIdempotencyKey())
	str("mcp_call_id", r.GetMcpCallId())
	str("operation_id", r.GetOperationId())
	str("request_id", r.GetRequestId())
	key("result")
	out = append(out, res...)
	str("safety_level", strings.ToLower(strings.TrimPrefix(r.GetSafetyLevel().String(), "SAFETY_LEVEL_")))
	str("scene_hash_after", r.GetSceneHashAfter())
	str("scene_hash_before", r.GetSceneHashBefore())
	key("sequence")
	out = strconv.AppendInt(out, r.GetSequence(), 10)
	str("status", Short(r.GetStatus().String()))
	str("tolerance", r.GetTolerance())
	str("tool_name", r.GetToolName())
	if r.GetVerified() {
		key("verified")
		out = append(out, "true"...)
	}
	return append(out, '}')
}

// result is a receipt's result as JSON, written from its wire form when it
// is still in it (receiptwire); a result that cannot be written says why.
func result(r *cpv1.Receipt) json.RawMessage {
	b, err := receiptwire.ResultJSON(r)
	if err != nil {
		b, _ = json.Marshal(map[string]any{"error": "the result cannot be written as JSON: " + err.Error()})
	}
	return b
}

// Failure is the failure contract as JSON (error_code, recoverable,
// retry_hint, minimal_repair_plan, message).
func Failure(f *cpv1.Failure) map[string]any {
	b, _ := protojson.MarshalOptions{UseProtoNames: true, EmitUnpopulated: true}.Marshal(f)
	var m map[string]any
	json.Unmarshal(b, &m)
	if m == nil {
		m = map[string]any{}
	}
	for _, step := range asList(m["minimal_repair_plan"]) {
		if st, ok := step.(map[string]any); ok {
			if a, ok := st["action"].(string); ok {
				st["action"] = strings.ToLower(strings.TrimPrefix(a, "ACTION_"))
			}
		}
	}
	return m
}

func asList(v any) []any { l, _ := v.([]any); return l }

// Refusal is a plan the control plane refused (or any other RPC error), as
// the failure contract: the error code from its ErrorInfo, the field
// violations and the repair plan.
func Refusal(err error) map[string]any {
	st := status.Convert(err)
	out := map[string]any{"error_code": st.Code().String(), "recoverable": false, "message": st.Message()}
	var violations, repair []any
	reasoned := false // an ErrorInfo: the control plane's answer
	for _, d := range st.Details() {
		switch d := d.(type) {
		case *errdetails.ErrorInfo:
			out["error_code"], reasoned = d.GetReason(), true
		case *errdetails.BadRequest:
			for _, v := range d.GetFieldViolations() {
				violations = append(violations, map[string]any{"field": v.GetField(), "description": v.GetDescription()})
			}
		case *cpv1.RepairPlan:
			for _, s := range d.GetSteps() {
				repair = append(repair, map[string]any{"operation_id": s.GetOperationId(),
					"action": strings.ToLower(strings.TrimPrefix(s.GetAction().String(), "ACTION_"))})
			}
		}
	}
	if violations != nil || repair != nil {
		out["recoverable"] = true
		out["retry_hint"] = st.Message()
		out["field_violations"] = violations
		out["minimal_repair_plan"] = repair
	}
	if !reasoned {
		transportFailure(out, st.Code())
	}
	return out
}

// transportFailure names a failure that no control plane answered (no
// ErrorInfo: the connection failed, or the call's own deadline passed) in
// the contract's terms: worth the same call again, a little later.
func transportFailure(out map[string]any, code codes.Code) {
	switch code {
	case codes.Unavailable:
		out["error_code"], out["recoverable"] = "CONTROL_PLANE_UNAVAILABLE", true
		out["retry_hint"] = "the control plane did not answer (restarting, or unreachable): make the same call again in a few seconds"
	case codes.DeadlineExceeded:
		out["error_code"], out["recoverable"] = "DEADLINE_EXCEEDED", true
		out["retry_hint"] = "the call took longer than its deadline: make it again, or split the plan"
	}
}

// Describe is an RPC error's message without the gRPC prefix.
func Describe(err error) string {
	if st, ok := status.FromError(err); ok {
		return st.Code().String() + ": " + st.Message()
	}
	return err.Error()
}

// Short is an enum value without its prefix: STATUS_SUCCEEDED → SUCCEEDED.
func Short(enum string) string {
	if _, after, ok := strings.Cut(enum, "_"); ok {
		return after
	}
	return enum
}

// Sanitize keeps an id within ^[a-zA-Z0-9_.:-]{1,128}$.
func Sanitize(id string) string {
	b := []byte(id)
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("_.:-", c) >= 0) {
			b[i] = '_'
		}
	}
	if len(b) > 128 {
		b = b[len(b)-128:]
	}
	return string(b)
}
