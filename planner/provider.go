package planner

import (
	"context"
	"encoding/json"
	"errors"
)

// A Provider is a language model behind one SDK: Gemini (genai) or an
// OpenAI-compatible chat completions endpoint (openai-go). It turns a
// conversation and the functions on offer into the model's next turn,
// streaming the text of that turn to onDelta as it arrives.
type Provider interface {
	// Model is the model's name, as the audit records it.
	Model() string
	// Generate asks the model for its next turn. onDelta may be nil.
	// Errors are the provider's (transport, HTTP status, quota): the run
	// reports them as ModelError without their details.
	Generate(ctx context.Context, req Request, onDelta func(text string)) (Turn, error)
}

// Request is one model call.
type Request struct {
	// System is the system instruction.
	System string
	// Messages is the conversation so far, oldest first; the last one is
	// the user's prompt or the results of the model's last calls.
	Messages []Message
	// Functions are the functions the model may call.
	Functions []Function
}

// Role is who said a message.
type Role string

const (
	RoleUser  Role = "user"
	RoleModel Role = "model"
	// RoleTool carries the results of the model's calls (Results).
	RoleTool Role = "tool"
)

// Message is one turn of the conversation.
type Message struct {
	Role Role
	Text string
	// Calls are the function calls of a model turn.
	Calls []Call
	// Results answer the calls of the model turn before (RoleTool).
	Results []Result
}

// Function is a function declaration: Name as the registry spells it
// (dots included; a provider whose API forbids them maps names reversibly),
// Parameters a JSON Schema object.
type Function struct {
	Name        string
	Description string
	Parameters  json.RawMessage
}

// Call is a function call of the model. ID is the provider's call id
// (OpenAI's tool_call_id; Gemini's id, possibly empty); Args is the JSON the
// model sent, unchecked: it may not even be JSON.
type Call struct {
	ID   string
	Name string
	Args string
}

// Result answers a Call: the same ID and Name, and the result as a JSON
// object.
type Result struct {
	ID       string
	Name     string
	Response json.RawMessage
}

// Turn is the model's answer: text, calls, or both.
type Turn struct {
	Text  string
	Calls []Call
}

// ErrNotConfigured: the control plane runs without a planner provider.
var ErrNotConfigured = errors.New("no planner is configured: start the control plane with --planner gemini (GEMINI_API_KEY) or --planner openai --planner-base-url URL (OPENAI_API_KEY; Ollama, llama.cpp's server, vLLM), see docs/PLANNER.md")
