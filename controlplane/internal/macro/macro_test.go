package macro

import (
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/blendplane/blendplane/controlplane/internal/plan"
)

func TestBuiltinExamplesExpand(t *testing.T) {
	r := Default()
	if len(r.List()) < 3 || r.Fingerprint() == "" {
		t.Fatalf("registry %v", r.List())
	}
	for _, m := range r.List() {
		steps, err := m.Expand(m.Example)
		if err != nil {
			t.Fatalf("%s example: %v", m.Name, err)
		}
		used := map[string]bool{}
		for _, s := range steps {
			used[s.Tool] = true
		}
		for _, tool := range m.Tools {
			if !used[tool] {
				t.Errorf("%s declares tool %s but does not use it", m.Name, tool)
			}
		}
		for tool := range used {
			found := false
			for _, declared := range m.Tools {
				found = found || declared == tool
			}
			if !found {
				t.Errorf("%s uses undeclared tool %s", m.Name, tool)
			}
		}
	}
}

// TestBuiltinDefaults: a macro called with its required arguments only
// expands with its defaults, as JSON values the plan's checks take (64
// written in Go was an int: "int is not a JSON value"; turntable's frames
// read as 0), and passes the check an example does.
func TestBuiltinDefaults(t *testing.T) {
	for _, m := range Default().List() {
		args := map[string]any{}
		required, _ := m.Schema["required"].([]any)
		for _, k := range required {
			args[k.(string)] = m.Example[k.(string)]
		}
		steps, err := m.Expand(args)
		if err != nil {
			t.Fatalf("%s with %v: %v", m.Name, args, err)
		}
		for _, s := range steps {
			if bad := notJSON(s.Args); bad != "" {
				t.Errorf("%s step %s: %s", m.Name, s.ID, bad)
			}
			if s.Tool == "render.settings" && s.Args["frame_end"] != nil && s.Args["frame_end"] != 48.0 {
				t.Errorf("%s step %s: frame_end %v, want the default 48", m.Name, s.ID, s.Args["frame_end"])
			}
		}
	}
}

// notJSON names a value in v that encoding/json would not decode to.
func notJSON(v any) string {
	switch x := v.(type) {
	case nil, bool, float64, string:
		return ""
	case []any:
		for _, e := range x {
			if bad := notJSON(e); bad != "" {
				return bad
			}
		}
		return ""
	case map[string]any:
		for k, e := range x {
			if bad := notJSON(e); bad != "" {
				return k + ": " + bad
			}
		}
		return ""
	}
	return fmt.Sprintf("%T %v", v, v)
}

func TestExpandPlan(t *testing.T) {
	r := Default()
	ops := []plan.Operation{
		{ID: "hero", Tool: "object.create", Args: map[string]any{"type": "monkey", "name": "Suzanne"}, Safety: plan.SafetySafeWrite},
		{ID: "lights", Tool: "macro.three_point_lighting", Args: map[string]any{"target": "Suzanne"}, DependsOn: []string{"hero"}, Safety: plan.SafetySafeWrite,
			MCPCallID: "mcp:s-1:7"},
		{ID: "shot", Tool: "render.still", Args: map[string]any{"output": "a.png"}, DependsOn: []string{"lights"}, Safety: plan.SafetySafeWrite},
	}
	out, err := r.ExpandPlan(ops)
	if err != nil {
		t.Fatal(err)
	}
	if len(out) != 2+3 {
		t.Fatalf("%d ops: %v", len(out), out)
	}
	if out[1].ID != "lights:key" || fmt.Sprint(out[1].DependsOn) != "[hero]" || out[1].Args["target"] != "Suzanne" || out[1].MCPCallID != "mcp:s-1:7" {
		t.Fatalf("steps %+v %+v", out[1], out[2])
	}
	last := out[len(out)-1]
	if last.ID != "shot" || len(last.DependsOn) != 3 || !strings.HasPrefix(last.DependsOn[0], "lights:") {
		t.Fatalf("dependents of the macro: %+v", last)
	}
	again, _ := r.ExpandPlan(ops)
	if !reflect.DeepEqual(out, again) {
		t.Fatal("expansion is not deterministic")
	}
	if _, err := r.ExpandPlan([]plan.Operation{{ID: "x", Tool: "macro.three_point_lighting", Args: map[string]any{"distance": -1.0}}}); err == nil {
		t.Fatal("bad macro args accepted")
	} else if pe, ok := err.(*plan.Error); !ok || pe.Reason != plan.ReasonSchemaInvalid || pe.Violations[0].Field != "operations[0].args" {
		t.Fatalf("bad macro args: %v", err)
	}
}

// TestBlame: a refusal of the expanded plan names the operations the
// client sent: a step's violation its macro operation, an operation after
// a macro its own index, a step's repair the macro operation's, once.
func TestBlame(t *testing.T) {
	r := Default()
	ops := []plan.Operation{
		{ID: "hero", Tool: "object.create", Args: map[string]any{"type": "monkey", "name": "Suzanne"}, Safety: plan.SafetySafeWrite},
		{ID: "lights", Tool: "macro.three_point_lighting", Args: map[string]any{"target": "Suzanne"}, Safety: plan.SafetySafeWrite},
		{ID: "shot", Tool: "render.still", Args: map[string]any{"output": "a.png"}, Safety: plan.SafetySafeWrite},
	}
	refusal := &plan.Error{Reason: plan.ReasonPolicyBlocked, Message: "m",
		Violations: []plan.Violation{{Field: "operations[2].args.location", Description: "operation \"lights:fill\": denied"},
			{Field: "operations[3]", Description: "operation \"lights:rim\": denied"}, {Field: "operations[4].args.output", Description: "bad"}},
		Repair: []plan.RepairStep{{OperationID: "lights:fill", Action: plan.ActionDrop}, {OperationID: "lights:rim", Action: plan.ActionDrop},
			{OperationID: "shot", Action: plan.ActionReplaceArgs}}}
	got := r.Blame(ops, refusal).(*plan.Error)
	var fields, repair []string
	for _, v := range got.Violations {
		fields = append(fields, v.Field)
	}
	for _, s := range got.Repair {
		repair = append(repair, s.OperationID+" "+s.Action)
	}
	if fmt.Sprint(fields) != "[operations[1] operations[1] operations[2].args.output]" ||
		fmt.Sprint(repair) != "[lights drop shot replace_args]" || !strings.Contains(got.Violations[0].Description, `macro operation "lights"`) {
		t.Fatalf("blamed: %v %v %+v", fields, repair, got.Violations)
	}
	if refusal.Violations[0].Field != "operations[2].args.location" {
		t.Fatal("Blame changed the refusal it was given")
	}
	plain := ops[:1]
	if r.Blame(plain, refusal) != error(refusal) {
		t.Fatal("a plan without macros: the refusal changed")
	}
}

func TestLookAt(t *testing.T) {
	// From straight below -Y looking at the origin: X rotation 90°, no yaw.
	rot := lookAt(0, -5, 0, 0, 0, 0)
	if fmt.Sprint(rot) != "[1.5708 0 0]" {
		t.Fatalf("look at from -Y: %v", rot)
	}
	// From +X: yaw +90° (the camera's view turns towards -X).
	if rot := lookAt(5, 0, 0, 0, 0, 0); fmt.Sprint(rot) != "[1.5708 0 1.5708]" {
		t.Fatalf("look at from +X: %v", rot)
	}
}

func TestExpandPlanRefusals(t *testing.T) {
	// A test macro whose step ids hold ':', so that its steps can clash with
	// another macro operation's.
	colon := &Macro{Name: "macro.colon", Version: "1", Schema: map[string]any{"type": "object"}, Example: map[string]any{},
		Tools: []string{"scene.inspect"}, expand: func(map[string]any) []Step {
			return []Step{{ID: "b:key", Tool: "scene.inspect"}}
		}}
	r, err := New(append(builtin(), colon))
	if err != nil {
		t.Fatal(err)
	}
	lights := func(id string, args map[string]any) plan.Operation {
		if args == nil {
			args = map[string]any{"target": "Suzanne"}
		}
		return plan.Operation{ID: id, Tool: "macro.three_point_lighting", Args: args, Safety: plan.SafetySafeWrite}
	}
	inspect := func(id string) plan.Operation {
		return plan.Operation{ID: id, Tool: "scene.inspect", Safety: plan.SafetyReadOnly}
	}
	// three_point_lighting's longest step is "fill": ":fill" adds 5
	// characters, so its operation ids may have at most 123.
	fits, over := strings.Repeat("l", 123), strings.Repeat("l", 124)
	tests := []struct {
		name       string
		ops        []plan.Operation
		reason     string
		message    []string
		violations []plan.Violation
		repair     []plan.RepairStep
	}{
		{
			name:    "step ids longer than an operation_id",
			ops:     []plan.Operation{inspect("hero"), lights(fits, nil), lights(over, nil)},
			reason:  plan.ReasonSchemaInvalid,
			message: []string{"1 operation would give macro steps ids", plan.OperationIDPattern, "give them shorter operation ids"},
			violations: []plan.Violation{{Field: "operations[2].operation_id", Description: `operation "` + over +
				`": macro.three_point_lighting would give a step the id "` + over + `:fill" of 129 characters; ` +
				`an operation_id has at most 128, so this operation's id may have at most 123`}},
			repair: []plan.RepairStep{{OperationID: over, Action: plan.ActionDrop}},
		},
		{
			name:   "step ids with characters an operation_id cannot have",
			ops:    []plan.Operation{lights("my lights", nil)},
			reason: plan.ReasonSchemaInvalid,
			violations: []plan.Violation{{Field: "operations[0].operation_id", Description: `operation "my lights": ` +
				`macro.three_point_lighting would give a step the id "my lights:key", which does not match ^[a-zA-Z0-9_.:-]{1,128}$`}},
			repair: []plan.RepairStep{{OperationID: "my lights", Action: plan.ActionDrop}},
		},
		{
			name:    "bad args and long ids together, in operation order",
			ops:     []plan.Operation{lights(over, nil), lights("x", map[string]any{"target": "Suzanne", "distance": -1.0})},
			reason:  plan.ReasonSchemaInvalid,
			message: []string{"macro args do not match the macro's schema", "; 1 operation would give macro steps ids"},
			violations: []plan.Violation{
				{Field: "operations[0].operation_id", Description: `operation "` + over + `": macro.three_point_lighting would give a step the id "` +
					over + `:fill" of 129 characters; an operation_id has at most 128, so this operation's id may have at most 123`},
				{Field: "operations[1].args", Description: `operation "x": args of macro.three_point_lighting: at '/distance': exclusiveMinimum: got -1, want 0`},
			},
			repair: []plan.RepairStep{{OperationID: over, Action: plan.ActionDrop}, {OperationID: "x", Action: plan.ActionReplaceArgs}},
		},
		{
			name:    "a later operation takes a step's id",
			ops:     []plan.Operation{lights("lights", nil), inspect("lights:key")},
			reason:  plan.ReasonOperationIDDuplicate,
			message: []string{"operation_id reused by 1 operation", `"<operation_id>:<step>"`},
			violations: []plan.Violation{{Field: "operations[1].operation_id",
				Description: `operation_id "lights:key" is already used by step "key" of macro operation "lights" (operations[0])`}},
			repair: []plan.RepairStep{{OperationID: "lights:key", Action: plan.ActionDrop}},
		},
		{
			name:   "a later macro operation's step takes an id",
			ops:    []plan.Operation{inspect("lights:rim"), inspect("lights:key"), lights("lights", nil)},
			reason: plan.ReasonOperationIDDuplicate,
			violations: []plan.Violation{
				{Field: "operations[2].operation_id", Description: `operation "lights": the id "lights:key" of its macro step "key" is already used by operations[1]`},
				{Field: "operations[2].operation_id", Description: `operation "lights": the id "lights:rim" of its macro step "rim" is already used by operations[0]`},
			},
			repair: []plan.RepairStep{{OperationID: "lights", Action: plan.ActionDrop}},
		},
		{
			name:   "two macro operations' steps",
			ops:    []plan.Operation{{ID: "a", Tool: "macro.colon", Safety: plan.SafetyReadOnly}, lights("a:b", nil)},
			reason: plan.ReasonOperationIDDuplicate,
			violations: []plan.Violation{{Field: "operations[1].operation_id",
				Description: `operation "a:b": the id "a:b:key" of its macro step "key" is already used by step "b:key" of macro operation "a" (operations[0])`}},
			repair: []plan.RepairStep{{OperationID: "a:b", Action: plan.ActionDrop}},
		},
		{
			name: "duplicates first, by index in the submitted plan",
			// plan.Check would see the duplicate "x" at operations[7] of
			// the expanded plan; the client sent it at operations[2].
			ops:    []plan.Operation{lights("l", map[string]any{"distance": -1.0}), inspect("x"), inspect("x"), lights("l", nil)},
			reason: plan.ReasonOperationIDDuplicate,
			violations: []plan.Violation{
				{Field: "operations[2].operation_id", Description: `operation_id "x" is already used by operations[1]`},
				{Field: "operations[3].operation_id", Description: `operation_id "l" is already used by operations[0]`},
			},
			repair: []plan.RepairStep{{OperationID: "x", Action: plan.ActionDrop}, {OperationID: "l", Action: plan.ActionDrop}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, err := r.ExpandPlan(tt.ops)
			if err == nil {
				t.Fatalf("expanded to %d operations", len(out))
			}
			pe, ok := err.(*plan.Error)
			if !ok || pe.Reason != tt.reason {
				t.Fatalf("err = %v, want %s", err, tt.reason)
			}
			for _, m := range tt.message {
				if !strings.Contains(pe.Message, m) {
					t.Errorf("Message %q does not contain %q", pe.Message, m)
				}
			}
			if !slices.Equal(pe.Violations, tt.violations) {
				t.Errorf("Violations:\n got %q\nwant %q", pe.Violations, tt.violations)
			}
			if !slices.Equal(pe.Repair, tt.repair) {
				t.Errorf("Repair = %q, want %q", pe.Repair, tt.repair)
			}
		})
	}
}

// TestExpandPlanLongestIDs: ids at the limit expand, and every expanded id
// is a valid operation_id.
func TestExpandPlanLongestIDs(t *testing.T) {
	r := Default()
	for _, m := range r.List() {
		steps, err := m.Expand(m.Example)
		if err != nil {
			t.Fatal(err)
		}
		suffix := 0
		for _, s := range steps {
			suffix = max(suffix, len(":"+s.ID))
		}
		id := strings.Repeat("m", plan.MaxOperationIDLength-suffix)
		out, err := r.ExpandPlan([]plan.Operation{{ID: id, Tool: m.Name, Args: m.Example, Safety: plan.SafetyDestructive}})
		if err != nil {
			t.Fatalf("%s with an id of %d characters: %v", m.Name, len(id), err)
		}
		for _, o := range out {
			if !plan.ValidOperationID(o.ID) {
				t.Fatalf("%s: invalid step id %q", m.Name, o.ID)
			}
		}
		_, err = r.ExpandPlan([]plan.Operation{{ID: id + "m", Tool: m.Name, Args: m.Example, Safety: plan.SafetyDestructive}})
		if pe, ok := err.(*plan.Error); !ok || pe.Reason != plan.ReasonSchemaInvalid || pe.Violations[0].Field != "operations[0].operation_id" {
			t.Fatalf("%s with an id of %d characters: %v", m.Name, len(id)+1, err)
		}
	}
}

// TestExpandPlanWithoutMacros: a plan without (known) macros comes back as
// it is, duplicates and all: plan.Check reports them with the same indices.
func TestExpandPlanWithoutMacros(t *testing.T) {
	ops := []plan.Operation{{ID: "a", Tool: "scene.inspect"}, {ID: "a", Tool: "macro.unknown"}}
	out, err := Default().ExpandPlan(ops)
	if err != nil || len(out) != len(ops) || &out[0] != &ops[0] {
		t.Fatalf("got %v, %v", out, err)
	}
}

// TestExpandPlanArgsMessageIsDeterministic: the validator reports an
// object's members in map order; the refusal must not depend on it.
func TestExpandPlanArgsMessageIsDeterministic(t *testing.T) {
	ops := []plan.Operation{{ID: "l", Tool: "macro.three_point_lighting", Args: map[string]any{
		"a": 1.0, "b": 2.0, "c": 3.0, "distance": -1.0, "key_energy": "high", "center": []any{0.0, "up"},
	}}}
	want := `operation "l": args of macro.three_point_lighting: at '': additional properties 'a', 'b', 'c' not allowed; ` +
		`at '': missing property 'target'; at '/center': minItems: got 2, want 3; at '/center/1': got string, want number; ` +
		`at '/distance': exclusiveMinimum: got -1, want 0; at '/key_energy': got string, want number`
	for range 50 {
		_, err := Default().ExpandPlan(ops)
		pe, ok := err.(*plan.Error)
		if !ok || len(pe.Violations) != 1 || pe.Violations[0].Description != want {
			t.Fatalf("got %q, want %q", pe.Violations, want)
		}
	}
}
