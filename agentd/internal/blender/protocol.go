package blender

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/blendplane/blendplane/internal/jcs"
)

// Tool error codes (seed-001), as returned in ToolError.Code.
const (
	CodeInvalidInput            = "invalid_input"
	CodeNotFound                = "not_found"
	CodeConflict                = "conflict"
	CodePolicyRefused           = "policy_refused"
	CodeCapabilityMissing       = "capability_missing"
	CodeTimeout                 = "timeout"
	CodeNondeterministicRefused = "nondeterministic_refused"
	CodeInternalError           = "internal_error"
	// CodeQuotaExceeded: the call's files would take the sandbox over its
	// ceiling (Options.StorageLimitMiB), or leave less disk free than the
	// agent keeps (Options.MinFreeDiskMiB); none of them is left.
	CodeQuotaExceeded = "quota_exceeded"
)

// ErrProcessExited is wrapped by every error caused by the Blender process
// being gone (crashed, killed, stopped) rather than by the call itself.
var ErrProcessExited = errors.New("blender process exited")

// ErrMemoryExceeded is wrapped, beside ErrProcessExited, by the error of a
// call during which Blender was stopped for going over its memory limit
// (Options.MemoryLimitMiB).
var ErrMemoryExceeded = errors.New("blender exceeded its memory limit")

// ToolError is a failure the bridge reported for one request. The scene is
// unchanged when a tool returns it.
type ToolError struct {
	Code    string
	Message string
}

func (e *ToolError) Error() string { return e.Code + ": " + e.Message }

// Profile describes the Blender a Process runs.
type Profile struct {
	Version       string      `json:"version"` // "4.5.15"
	BuildHash     string      `json:"build_hash"`
	Platform      string      `json:"platform"`
	PythonVersion string      `json:"python_version"`
	Runtime       RuntimeKind `json:"runtime"`
	Features      []string    `json:"features"` // sorted, e.g. "cycles", "eevee", "io_scene_gltf2"
}

// Tool is one entry of the bridge's tool registry.
type Tool struct {
	Name        string         `json:"name"`
	Version     string         `json:"version"`
	Description string         `json:"description"`
	SafetyLevel string         `json:"safety_level"` // "read_only" | "safe_write" | "destructive"
	InputSchema map[string]any `json:"input_schema"` // JSON Schema, additionalProperties false
	// DeterminismClass is "deterministic" (same scene + same args give the
	// same scene and result) or "seeded" (the output also depends on a seed
	// argument, which the result records: render.still).
	DeterminismClass string `json:"determinism_class"`
	// RollbackMethod is "none" (read-only), "compensation" (Execute returns
	// Outcome.Undo, applied with Process.Undo) or "not_needed" (the tool
	// writes only files, never the scene: render.still).
	RollbackMethod string `json:"rollback_method"`
	// SafetyMode is "headless_safe" (runs in background Blender: every tool
	// today), "ui_assisted" (needs a UI context) or "unsafe_ops" (runs
	// operators that may touch state outside scene_state_v1).
	SafetyMode string `json:"safety_mode"`
	// WritesFiles says the tool writes files into the sandbox (only such
	// tools may: the bridge refuses the others' files). agentd's own: not
	// in the registry the control plane sees.
	WritesFiles bool `json:"writes_files"`
	// IdempotenceClass is "idempotent" (the same args twice give the same
	// state: object.set_transform, render.still), "keyed" (a retry is safe
	// only through the journal's idempotency key: object.create,
	// object.delete) or "read_only".
	IdempotenceClass string `json:"idempotence_class"`
	// BlenderVersions is the range of Blender versions the tool supports,
	// e.g. ">=3.4" or ">=3.4,<5.0" (comma = and). A Process only lists tools
	// whose range includes its Blender.
	BlenderVersions string `json:"blender_versions"`
}

// Determinism classes and rollback methods of Tool.
const (
	DeterminismDeterministic = "deterministic"
	DeterminismSeeded        = "seeded"
	// DeterminismNondeterministic: no promise (python.exec); the control
	// plane refuses such tools unless the session negotiated them.
	DeterminismNondeterministic = "nondeterministic"

	RollbackNone         = "none"
	RollbackCompensation = "compensation"
	RollbackNotNeeded    = "not_needed"
)

// Safety modes and idempotence classes of Tool.
const (
	SafetyModeHeadlessSafe = "headless_safe"
	SafetyModeUIAssisted   = "ui_assisted"
	SafetyModeUnsafeOps    = "unsafe_ops"

	IdempotenceIdempotent = "idempotent"
	IdempotenceKeyed      = "keyed"
	IdempotenceReadOnly   = "read_only"
)

// Call is one tool invocation.
type Call struct {
	Tool string
	Args map[string]any
	// MutationID is passed through to the bridge's log lines.
	MutationID string
	// Correlation ids, logged by the bridge (stderr) and by Go (slog attrs).
	RequestID, OperationID, MCPCallID string
	// OnProgress, if not nil, receives the progress reports of a long tool
	// (e.g. {"frame": 3, "frames": 10}), in order, on the goroutine that
	// called Execute, before Execute returns. It must not call the Process.
	OnProgress func(map[string]any)
	// Budget bounds the call in ExecuteBatch (0: none), counted from when
	// Blender can start it; over it, Blender is killed. Execute ignores it
	// (it uses ctx).
	Budget time.Duration

	injectProgress int    // test hook: the bridge reports this many progress events first
	injectFailure  string // test hook: executeParams.InjectFailure
}

// Outcome is what a tool call did.
type Outcome struct {
	// Result is what the tool returned, a JSON object, as the
	// google.protobuf.Struct a receipt carries, in wire form
	// (deterministically encoded, so the same result is the same bytes).
	// Fields decodes it.
	Result          []byte
	SceneHashBefore string
	SceneHashAfter  string
	Mutated         bool
	// Undo is the compensation of a successful tool whose rollback method is
	// "compensation": plain JSON, computed by the bridge before the tool
	// mutated anything. Process.Undo applied right after this call returns
	// the scene to SceneHashBefore. Nil for read-only tools, for tools that
	// change nothing in the scene (render.still) and for failed calls.
	// Shapes (v is the record version, tool the tool it undoes):
	//
	//	{"v":1,"tool":"object.create","object":"Cube","mesh":"Cube",
	//	 "scene":"Scene","view_layer":"ViewLayer","active_before":null}
	//	{"v":1,"tool":"object.set_transform","object":"Light",
	//	 "location":[x,y,z],"rotation_euler":[x,y,z],"scale":[x,y,z]}
	//	{"v":1,"tool":"object.delete","object":"M","tomb":"\x7fbp_tomb_m<hex>",
	//	 "data":{"kind":"mesh","name":"M","tomb":"\x7fbp_tomb_m<hex>"|null}|null,
	//	 "collections":[{"scene":"Scene"}|{"collection":"C"}],
	//	 "children":[{"name":"Child","matrix_parent_inverse":[[4]x4]}],
	//	 "camera_of":["Scene"],
	//	 "bases":[{"scene":"Scene","view_layer":"ViewLayer","active":b,"select":b,"hide":b}]}
	//
	// Floats are exact (not rounded), so a restore is bit-identical.
	Undo json.RawMessage
	// Files are the files the call wrote into Options.SandboxDir (renders,
	// exports), sorted by name; nil when it wrote none. Their sizes and
	// hashes are read by the bridge as the call ends, before a later call
	// may replace them, and each is linked under its hash in the session's
	// kept directory beside the sandbox (bridge/sandbox.py, keep). A failed
	// call reports none and leaves none of the files it wrote (the bridge
	// removes them with the rest of its rollback; a failed scene.export
	// also removes the files it was replacing). python.exec writes files
	// without reporting them.
	Files []File
	// RecordsChanged counts the scene_state_v1 records the call made,
	// changed or removed (SCENE.md): how many of Blender's datablocks it
	// changed, which agentd weighs a session's refresh by.
	RecordsChanged int
}

// Fields is the tool's result decoded: what encoding/json makes of its JSON.
func (o Outcome) Fields() map[string]any {
	var s structpb.Struct
	if proto.Unmarshal(o.Result, &s) != nil {
		return nil // not from FromJSON
	}
	return s.AsMap()
}

// Wire shapes of the fd 3/4 protocol (see bridge/main.py).

type request struct {
	ID     uint64 `json:"id"`
	Method string `json:"method"`
	Params any    `json:"params"`
}

// response is one line from the bridge. R is what its result decodes to:
// json.RawMessage to decode it later, executeResult for an execute's answer
// (ExecuteBatch decodes those with decodeExecute: once per operation).
type response[R any] struct {
	ID     *uint64    `json:"id"`
	OK     bool       `json:"ok"`
	Result R          `json:"result"`
	Error  *wireError `json:"error"`
	// Progress is set on the intermediate lines {"id": N, "progress": {...}}
	// an execute may write before its response.
	Progress map[string]any `json:"progress"`
}

type wireError struct {
	Code      string `json:"code"`
	Message   string `json:"message"`
	SceneHash string `json:"scene_hash"`
}

type executeParams struct {
	Tool        string         `json:"tool"`
	Args        map[string]any `json:"args"`
	MutationID  string         `json:"mutation_id,omitempty"`
	RequestID   string         `json:"request_id,omitempty"`
	OperationID string         `json:"operation_id,omitempty"`
	MCPCallID   string         `json:"mcp_call_id,omitempty"`
	// InjectProgress is a test hook (Call.injectProgress).
	InjectProgress int `json:"inject_progress,omitempty"`
	// Batch is set by ExecuteBatch: once a call of the batch fails, the
	// bridge refuses its later calls with codeNotRun, without running them.
	Batch string `json:"batch,omitempty"`
	// InjectFailure is a test hook: the bridge fails the tool at its
	// Tx.checkpoint of that label, after partial work.
	InjectFailure string `json:"inject_failure,omitempty"`
}

// encodeExecute is an execute request's line, without its newline: what
// json.Marshal gives for request{id, "execute", p}, less its reflection
// over the args (with the journal's entries, a tenth of agentd's CPU under
// durable load): args through jcs, and encoding/json for what jcs refuses
// (Go types other than JSON's, invalid UTF-8), so that nothing is encoded
// differently. Both give the bridge the same values.
func encodeExecute(id uint64, p executeParams) ([]byte, error) {
	if line, err := appendExecute(make([]byte, 0, 384), id, p); err == nil {
		return line, nil
	}
	return json.Marshal(request{ID: id, Method: "execute", Params: p})
}

func appendExecute(b []byte, id uint64, p executeParams) ([]byte, error) {
	b = append(b, `{"id":`...)
	b = strconv.AppendUint(b, id, 10)
	b = append(b, `,"method":"execute","params":{"tool":`...)
	b, err := jcs.AppendString(b, p.Tool)
	if err != nil {
		return nil, err
	}
	b = append(b, `,"args":`...)
	if p.Args == nil {
		b = append(b, "null"...)
	} else if b, err = jcs.Append(b, p.Args, true); err != nil {
		return nil, err
	}
	b, err = jcs.AppendFields(b, [2]string{"mutation_id", p.MutationID}, [2]string{"request_id", p.RequestID},
		[2]string{"operation_id", p.OperationID}, [2]string{"mcp_call_id", p.MCPCallID}, [2]string{"batch", p.Batch},
		[2]string{"inject_failure", p.InjectFailure})
	if err != nil {
		return nil, err
	}
	if p.InjectProgress != 0 {
		b = append(b, `,"inject_progress":`...)
		b = strconv.AppendInt(b, int64(p.InjectProgress), 10)
	}
	return append(b, "}}"...), nil
}

// codeNotRun is the bridge's answer to a call of a batch after one of its
// calls failed: the call did not run. Never returned to callers.
const codeNotRun = "not_run"

// codeOutOfMemory is the bridge's answer to a request during which an
// allocation failed (Python's MemoryError: the memory ceiling's rlimit).
// The Process stops Blender and fails the call with ErrMemoryExceeded.
const codeOutOfMemory = "out_of_memory"

// File is a file a call wrote: its plain name in the sandbox, size and hex
// SHA-256.
type File struct {
	Name   string `json:"name"`
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
}

type executeResult struct {
	Result          json.RawMessage `json:"result"`
	SceneHashBefore string          `json:"scene_hash_before"`
	SceneHashAfter  string          `json:"scene_hash_after"`
	Mutated         bool            `json:"mutated"`
	Undo            json.RawMessage `json:"undo"`
	Files           []File          `json:"files"`
	RecordsChanged  int             `json:"records_changed"`
}

// maxArgsDepth is the deepest nesting of objects and arrays Execute sends to
// Blender ({} is depth 1): a copy of the control plane's plan.MaxArgsDepth,
// with its definition (agentd does not import the control plane). Deeper
// args would make the bridge's JSON decoder or schema checker recurse; the
// bridge refuses them too, but Go refuses them without a round trip.
const maxArgsDepth = 64

// checkArgsDepth returns an invalid_input *ToolError when args nest deeper
// than maxArgsDepth: a non-empty object or array at depth maxArgsDepth, as
// plan.MaxArgsDepth counts. It walks map[string]any and []any, the shapes
// of decoded JSON and structpb values; the bridge catches any other.
func checkArgsDepth(args map[string]any) error {
	type node struct {
		v     any
		depth int
	}
	todo := []node{{args, 1}}
	for len(todo) > 0 {
		n := todo[len(todo)-1]
		todo = todo[:len(todo)-1]
		switch x := n.v.(type) {
		case map[string]any:
			if len(x) > 0 && n.depth >= maxArgsDepth {
				return &ToolError{Code: CodeInvalidInput, Message: fmt.Sprintf("args nested deeper than %d levels", maxArgsDepth)}
			}
			for _, v := range x {
				todo = append(todo, node{v, n.depth + 1})
			}
		case []any:
			if len(x) > 0 && n.depth >= maxArgsDepth {
				return &ToolError{Code: CodeInvalidInput, Message: fmt.Sprintf("args nested deeper than %d levels", maxArgsDepth)}
			}
			for _, v := range x {
				todo = append(todo, node{v, n.depth + 1})
			}
		}
	}
	return nil
}

type undoParams struct {
	Undo        json.RawMessage `json:"undo"`
	MutationID  string          `json:"mutation_id,omitempty"`
	RequestID   string          `json:"request_id,omitempty"`
	OperationID string          `json:"operation_id,omitempty"`
	MCPCallID   string          `json:"mcp_call_id,omitempty"`
}

type undoResult struct {
	SceneHashBefore string `json:"scene_hash_before"`
	SceneHashAfter  string `json:"scene_hash_after"`
}

type checkpointParams struct {
	Path string `json:"path"`
}

type checkpointResult struct {
	SceneHash string  `json:"scene_hash"`
	Bytes     int64   `json:"bytes"`
	Millis    float64 `json:"ms"`
}

type helloParams struct {
	SandboxDir      string      `json:"sandbox_dir"`
	StorageLimitMiB int64       `json:"storage_limit_mib,omitempty"`
	MinFreeDiskMiB  int64       `json:"min_free_disk_mib,omitempty"`
	Runtime         RuntimeKind `json:"runtime"`
	Faults          []string    `json:"faults,omitempty"`
	// Debug turns on the bridge's per-call diagnostic lines, which Process
	// logs at debug level only.
	Debug bool `json:"debug,omitempty"`
}

type adoptParams struct {
	SandboxDir      string `json:"sandbox_dir"`
	StorageLimitMiB int64  `json:"storage_limit_mib,omitempty"`
}

type helloResult struct {
	ProtocolVersion int     `json:"protocol_version"`
	Profile         Profile `json:"profile"`
	Tools           []Tool  `json:"tools"`
	SceneHash       string  `json:"scene_hash"`
	// ScriptAutoexec is Blender's "Auto Run Python Scripts" preference,
	// which must be off (Start refuses a Blender that has it on).
	ScriptAutoexec bool `json:"script_autoexec"`
}

type hashResult struct {
	SceneHash string `json:"scene_hash"`
}

// Snapshot is the full canonical scene_state_v1 snapshot.
type Snapshot struct {
	// SceneHash is recomputed from scratch by the bridge.
	SceneHash string `json:"scene_hash"`
	// IncrementalSceneHash is the bridge's running hash; it must equal SceneHash.
	IncrementalSceneHash string         `json:"incremental_scene_hash"`
	State                map[string]any `json:"snapshot"`
}
