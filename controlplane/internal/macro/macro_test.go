package macro

import (
	"fmt"
	"reflect"
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

func TestExpandPlan(t *testing.T) {
	r := Default()
	ops := []plan.Operation{
		{ID: "hero", Tool: "object.create", Args: map[string]any{"type": "monkey", "name": "Suzanne"}, Safety: plan.SafetySafeWrite},
		{ID: "lights", Tool: "macro.three_point_lighting", Args: map[string]any{"target": "Suzanne"}, DependsOn: []string{"hero"}, Safety: plan.SafetySafeWrite},
		{ID: "shot", Tool: "render.still", Args: map[string]any{"output": "a.png"}, DependsOn: []string{"lights"}, Safety: plan.SafetySafeWrite},
	}
	out, err := r.ExpandPlan(ops)
	if err != nil {
		t.Fatal(err)
	}
	if len(out) != 2+6 {
		t.Fatalf("%d ops: %v", len(out), out)
	}
	if out[1].ID != "lights:key" || fmt.Sprint(out[1].DependsOn) != "[hero]" || fmt.Sprint(out[2].DependsOn) != "[lights:key]" {
		t.Fatalf("steps %+v %+v", out[1], out[2])
	}
	last := out[len(out)-1]
	if last.ID != "shot" || len(last.DependsOn) != 6 || !strings.HasPrefix(last.DependsOn[0], "lights:") {
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
