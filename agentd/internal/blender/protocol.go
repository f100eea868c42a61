package blender

import (
	"encoding/json"
	"errors"
)

// Tool error codes (seed-001), as returned in ToolError.Code.
const (
	CodeInvalidInput      = "invalid_input"
	CodeNotFound          = "not_found"
	CodeConflict          = "conflict"
	CodePolicyRefused     = "policy_refused"
	CodeCapabilityMissing = "capability_missing"
	CodeTimeout           = "timeout"
	CodeInternalError     = "internal_error"
)

// ErrProcessExited is wrapped by every error caused by the Blender process
// being gone (crashed, killed, stopped) rather than by the call itself.
var ErrProcessExited = errors.New("blender process exited")

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
}

// Call is one tool invocation.
type Call struct {
	Tool string
	Args map[string]any
	// MutationID is passed through to the bridge's log lines.
	MutationID string
	// Correlation ids, logged by the bridge (stderr) and by Go (slog attrs).
	RequestID, OperationID, MCPCallID string
}

// Outcome is what a tool call did.
type Outcome struct {
	Result          map[string]any
	SceneHashBefore string
	SceneHashAfter  string
	Mutated         bool
}

// Wire shapes of the fd 3/4 protocol (see bridge.py).

type request struct {
	ID     uint64 `json:"id"`
	Method string `json:"method"`
	Params any    `json:"params"`
}

type response struct {
	ID     *uint64         `json:"id"`
	OK     bool            `json:"ok"`
	Result json.RawMessage `json:"result"`
	Error  *wireError      `json:"error"`
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
}

type executeResult struct {
	Result          map[string]any `json:"result"`
	SceneHashBefore string         `json:"scene_hash_before"`
	SceneHashAfter  string         `json:"scene_hash_after"`
	Mutated         bool           `json:"mutated"`
}

type helloParams struct {
	SandboxDir string      `json:"sandbox_dir"`
	Runtime    RuntimeKind `json:"runtime"`
}

type helloResult struct {
	ProtocolVersion int     `json:"protocol_version"`
	Profile         Profile `json:"profile"`
	Tools           []Tool  `json:"tools"`
	SceneHash       string  `json:"scene_hash"`
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
