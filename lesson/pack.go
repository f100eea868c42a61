// Package lesson is the lesson API of seed 004: a tutoring front end drives
// Blender step by step with lesson packs of whitelisted commands over HTTP
// (/lesson, /run_operator, /scene_summary, /audit, /health), optionally
// Ed25519-signed. A lesson becomes one plan of the caller's lesson session,
// so it goes through the public API like any client's: validation, policy
// and approvals, the journal, receipts and audit. The package is a client of
// ControlPlaneService; it also holds the signing that authors use
// (blendctl lesson keygen|sign).
package lesson

import (
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"regexp"
	"slices"
	"strings"

	"github.com/blendplane/blendplane/planjson"
)

// Pack is a lesson pack as sent to POST /lesson.
type Pack struct {
	Lesson    []Step          `json:"lesson"`
	Metadata  json.RawMessage `json:"metadata"`
	Signature *string         `json:"signature"`
}

// Step is one command of a lesson.
type Step struct {
	Command string          `json:"command"`
	Params  json.RawMessage `json:"params,omitempty"`
}

// Metadata are the fields of a pack's metadata the server uses; others are
// kept (and signed) as sent.
type Metadata struct {
	ID       string   `json:"id"`
	Source   string   `json:"source"`
	IssuedAt *float64 `json:"issued_at"`
}

// Limits of a pack.
const (
	maxBodyBytes   = 1 << 20
	maxSteps       = 200
	maxTextLen     = 2000
	maxWaitMillis  = 60_000
	maxHighlightMs = 60_000
	maxCoordinate  = 10_000.0
	maxSize        = 1_000.0
)

var (
	idPattern    = regexp.MustCompile(`^[a-zA-Z0-9_.:-]{1,128}$`)    // request and session ids
	ownerPattern = regexp.MustCompile(`^[a-z0-9][a-z0-9_.-]{0,62}$`) // a principal's name
)

// Error is a refusal or failure with its HTTP status and the failure
// contract the body carries.
type Error struct {
	Status      int
	Code        string // error_code
	Message     string
	Recoverable bool
	RetryHint   string
	Repair      []map[string]any // minimal_repair_plan
	Extra       map[string]any   // further fields of the body
}

func (e *Error) Error() string { return fmt.Sprintf("%d %s: %s", e.Status, e.Code, e.Message) }

func badRequest(msg string) *Error {
	return &Error{Status: http.StatusBadRequest, Code: "SCHEMA_INVALID", Message: msg, Recoverable: true,
		RetryHint: "send a body that matches the lesson pack schema (docs/lesson-pack.schema.json); unknown keys are refused"}
}

func unprocessable(step int, command, msg string) *Error {
	e := &Error{Status: http.StatusUnprocessableEntity, Code: "COMMAND_REFUSED", Message: msg, Recoverable: true,
		RetryHint: "use a whitelisted command with parameters in range (docs/MCP_API.md)"}
	if step >= 0 {
		e.Message = fmt.Sprintf("lesson[%d] %s: %s", step, command, msg)
		e.Repair = []map[string]any{{"operation_id": stepID(step, command), "action": "replace_args"}}
	}
	return e
}

// ParsePack decodes and checks the shape of a lesson pack (400 on any
// mismatch); the commands are checked by Plan.
func ParsePack(body []byte) (*Pack, *Metadata, *Error) {
	if len(body) > maxBodyBytes {
		return nil, nil, badRequest(fmt.Sprintf("the body is %d bytes, over %d", len(body), maxBodyBytes))
	}
	var p Pack
	if err := planjson.DecodeStrict(body, &p); err != nil {
		return nil, nil, badRequest("lesson pack: " + err.Error())
	}
	if err := validateSchema(body); err != nil {
		return nil, nil, badRequest("lesson pack: " + oneLine(err.Error()))
	}
	if len(p.Lesson) == 0 || len(p.Lesson) > maxSteps {
		return nil, nil, badRequest(fmt.Sprintf("lesson: 1 to %d steps, got %d", maxSteps, len(p.Lesson)))
	}
	var md Metadata
	if len(p.Metadata) > 0 && string(p.Metadata) != "null" {
		if err := json.Unmarshal(p.Metadata, &md); err != nil {
			return nil, nil, badRequest("metadata: " + err.Error())
		}
		var obj map[string]any
		if json.Unmarshal(p.Metadata, &obj) != nil {
			return nil, nil, badRequest("metadata must be an object")
		}
	}
	if !idPattern.MatchString(md.ID) {
		return nil, nil, badRequest(`metadata.id: required, ^[a-zA-Z0-9_.:-]{1,128}$ (it names the lesson's plan: a repeated id is the same lesson)`)
	}
	for i, s := range p.Lesson {
		if s.Command == "" {
			return nil, nil, badRequest(fmt.Sprintf("lesson[%d].command: required", i))
		}
	}
	return &p, &md, nil
}

// Action is what one step does: a tool call of the lesson's plan, or an
// instruction for the front end (no Blender change).
type Action struct {
	Index    int
	Command  string
	Tool     string         // a registry tool; empty for front-end steps
	Args     map[string]any // the tool's args
	Frontend map[string]any // what the front end must do
}

// Operators RUN_OPERATOR (and /run_operator) accepts, each mapped onto a
// registry tool: never arbitrary bpy.ops, never Python.
var operators = map[string]string{
	"mesh.primitive_cube_add":       "cube",
	"mesh.primitive_uv_sphere_add":  "uv_sphere",
	"mesh.primitive_ico_sphere_add": "ico_sphere",
	"mesh.primitive_plane_add":      "plane",
	"mesh.primitive_cylinder_add":   "cylinder",
	"mesh.primitive_cone_add":       "cone",
	"mesh.primitive_torus_add":      "torus",
	"mesh.primitive_monkey_add":     "monkey",
}

// Operators lists the whitelisted operators (for docs and errors).
func Operators() []string {
	out := make([]string, 0, len(operators))
	for op := range operators {
		out = append(out, op)
	}
	slices.Sort(out)
	return out
}

// customPattern is the name of an X_CUSTOM.<name> command: a macro of the
// control plane's registry (macro.<name>).
var customPattern = regexp.MustCompile(`^X_CUSTOM\.([a-z][a-z0-9_]{0,62})$`)

// Plan checks every step against the whitelist and its parameter ranges
// (422 on the first refusal) and returns their actions. With custom,
// X_CUSTOM.<name> commands run the registry's macro.<name> with their params
// as its args (checked by the macro's schema when the plan is submitted);
// without, they are refused.
func Plan(steps []Step, custom bool) ([]Action, *Error) {
	out := make([]Action, 0, len(steps))
	for i, s := range steps {
		a, err := action(i, s, custom)
		if err != nil {
			return nil, err
		}
		out = append(out, a)
	}
	return out, nil
}

func action(i int, s Step, custom bool) (Action, *Error) {
	a := Action{Index: i, Command: s.Command}
	params := s.Params
	if len(params) == 0 || string(params) == "null" {
		params = []byte("{}")
	}
	refuse := func(msg string) (Action, *Error) { return Action{}, unprocessable(i, s.Command, msg) }
	decode := func(v any) *Error {
		if err := planjson.DecodeStrict(params, v); err != nil {
			return unprocessable(i, s.Command, "params: "+err.Error())
		}
		return nil
	}
	switch s.Command {
	case "SPEAK":
		var p struct {
			Text  string `json:"text"`
			Voice string `json:"voice"`
			Lang  string `json:"lang"`
		}
		if err := decode(&p); err != nil {
			return Action{}, err
		}
		if n := len([]rune(p.Text)); n == 0 || n > maxTextLen {
			return refuse(fmt.Sprintf("text: 1 to %d characters", maxTextLen))
		}
		if len(p.Voice) > 64 || len(p.Lang) > 16 {
			return refuse("voice: at most 64 bytes of UTF-8; lang: at most 16")
		}
		a.Frontend = map[string]any{"speak": map[string]any{"text": p.Text, "voice": p.Voice, "lang": p.Lang}}
	case "UI_HIGHLIGHT":
		var p struct {
			Selector   string   `json:"selector"`
			DurationMs *float64 `json:"duration_ms"`
		}
		if err := decode(&p); err != nil {
			return Action{}, err
		}
		if n := len(p.Selector); n == 0 || n > 256 {
			return refuse("selector: 1 to 256 bytes of UTF-8")
		}
		d := 2000.0
		if p.DurationMs != nil {
			if d = *p.DurationMs; d < 0 || d > maxHighlightMs || d != math.Trunc(d) {
				return refuse(fmt.Sprintf("duration_ms: a whole number from 0 to %d", maxHighlightMs))
			}
		}
		a.Frontend = map[string]any{"highlight": map[string]any{"selector": p.Selector, "duration_ms": d}}
	case "WAIT":
		var p struct {
			Ms *float64 `json:"ms"`
		}
		if err := decode(&p); err != nil {
			return Action{}, err
		}
		if p.Ms == nil || *p.Ms < 0 || *p.Ms > maxWaitMillis || *p.Ms != math.Trunc(*p.Ms) {
			return refuse(fmt.Sprintf("ms: required, a whole number from 0 to %d", maxWaitMillis))
		}
		a.Frontend = map[string]any{"wait": map[string]any{"ms": *p.Ms}}
	case "ADD_CUBE":
		var p struct {
			Size     *float64  `json:"size"`
			Location []float64 `json:"location"`
			Name     string    `json:"name"`
		}
		if err := decode(&p); err != nil {
			return Action{}, err
		}
		args, msg := primitive("cube", p.Size, p.Location, p.Name)
		if msg != "" {
			return refuse(msg)
		}
		a.Tool, a.Args = "object.create", args
	case "DELETE_OBJECT", "SELECT_OBJECT":
		var p struct {
			Name string `json:"name"`
		}
		if err := decode(&p); err != nil {
			return Action{}, err
		}
		if !validName(p.Name) {
			return refuse("name: 1 to 63 bytes of UTF-8, not starting with __bp_")
		}
		if s.Command == "DELETE_OBJECT" {
			a.Tool, a.Args = "object.delete", map[string]any{"name": p.Name}
		} else {
			a.Tool, a.Args = "object.select", map[string]any{"names": []any{p.Name}, "active": p.Name}
		}
	case "RUN_OPERATOR":
		var p struct {
			Operator string          `json:"operator"`
			Params   json.RawMessage `json:"params"`
		}
		if err := decode(&p); err != nil {
			return Action{}, err
		}
		args, err := operatorArgs(i, p.Operator, p.Params)
		if err != nil {
			return Action{}, err
		}
		a.Tool, a.Args = "object.create", args
	default:
		if strings.HasPrefix(s.Command, "X_CUSTOM.") {
			m := customPattern.FindStringSubmatch(s.Command)
			if !custom {
				return refuse("namespaced custom commands are off on this server (--lesson-custom-commands)")
			}
			if m == nil {
				return refuse("X_CUSTOM.<name>: name is a macro's, [a-z][a-z0-9_]*")
			}
			var args map[string]any
			if err := json.Unmarshal(params, &args); err != nil || args == nil {
				return refuse("params: an object")
			}
			a.Tool, a.Args = "macro."+m[1], args
			return a, nil
		}
		return refuse("not a whitelisted command (SPEAK, UI_HIGHLIGHT, WAIT, ADD_CUBE, DELETE_OBJECT, SELECT_OBJECT, RUN_OPERATOR)")
	}
	return a, nil
}

// operatorArgs maps a whitelisted operator and its params onto
// object.create's args.
func operatorArgs(step int, operator string, raw json.RawMessage) (map[string]any, *Error) {
	kind, ok := operators[operator]
	if !ok {
		return nil, unprocessable(step, "RUN_OPERATOR", fmt.Sprintf("operator %q is not whitelisted (%s)", operator, strings.Join(Operators(), ", ")))
	}
	if len(raw) == 0 || string(raw) == "null" {
		raw = []byte("{}")
	}
	var p struct {
		Size     *float64  `json:"size"`
		Radius   *float64  `json:"radius"`
		Location []float64 `json:"location"`
	}
	if err := planjson.DecodeStrict(raw, &p); err != nil {
		return nil, unprocessable(step, "RUN_OPERATOR", operator+" params: "+err.Error())
	}
	size := p.Size
	if p.Radius != nil {
		if size != nil {
			return nil, unprocessable(step, "RUN_OPERATOR", "give size or radius, not both")
		}
		d := 2 * *p.Radius
		size = &d
	}
	args, msg := primitive(kind, size, p.Location, "")
	if msg != "" {
		return nil, unprocessable(step, "RUN_OPERATOR", operator+": "+msg)
	}
	return args, nil
}

func primitive(kind string, size *float64, loc []float64, name string) (map[string]any, string) {
	args := map[string]any{"type": kind}
	if size != nil {
		if *size <= 0 || *size > maxSize {
			return nil, fmt.Sprintf("size: greater than 0, at most %g", maxSize)
		}
		args["size"] = *size
	}
	if loc != nil {
		if len(loc) != 3 {
			return nil, "location: three numbers"
		}
		for _, v := range loc {
			if math.Abs(v) > maxCoordinate {
				return nil, fmt.Sprintf("location: each within ±%g", maxCoordinate)
			}
		}
		args["location"] = []any{loc[0], loc[1], loc[2]}
	}
	if name != "" {
		if !validName(name) {
			return nil, "name: 1 to 63 bytes of UTF-8, not starting with __bp_"
		}
		args["name"] = name
	}
	return args, ""
}

func validName(s string) bool {
	return s != "" && len(s) <= 63 && !strings.HasPrefix(s, "__bp_") && !strings.ContainsAny(s, "\x00")
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

// stepID is the operation id of a lesson step in its plan.
func stepID(i int, command string) string {
	return fmt.Sprintf("s%03d-%s", i, strings.ToLower(command))
}
