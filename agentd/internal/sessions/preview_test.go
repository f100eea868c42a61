package sessions

import (
	"fmt"
	"testing"
)

func TestDiffSnapshots(t *testing.T) {
	before := map[string]any{"schema": "scene_state_v1",
		"objects": map[string]any{
			"Cube":  map[string]any{"type": "MESH", "location": []any{0.0, 0.0, 0.0}, "data": "Cube"},
			"Gone":  map[string]any{"type": "EMPTY"},
			"Same":  map[string]any{"type": "EMPTY"},
			"Light": map[string]any{"type": "LIGHT", "light": map[string]any{"energy": 10.0, "color": []any{1.0, 1.0, 1.0}}},
		},
		"meshes": map[string]any{"Cube": map[string]any{"vertices": 8.0}},
	}
	after := map[string]any{"schema": "scene_state_v1",
		"objects": map[string]any{
			"Cube":  map[string]any{"type": "MESH", "location": []any{1.0, 0.0, 0.0}, "data": "Cube"},
			"New":   map[string]any{"type": "EMPTY"},
			"Same":  map[string]any{"type": "EMPTY"},
			"Light": map[string]any{"type": "LIGHT", "light": map[string]any{"energy": 20.0, "color": []any{1.0, 1.0, 1.0}, "spot": true}},
		},
		"meshes":  map[string]any{"Cube": map[string]any{"vertices": 8.0}},
		"cameras": map[string]any{"Cam": map[string]any{}},
	}
	var got []string
	for _, c := range diffSnapshots(before, after) {
		s := fmt.Sprintf("%s %s/%s", c.GetKind(), c.GetCollection(), c.GetName())
		for _, f := range c.GetFields() {
			s += fmt.Sprintf(" %s:%v->%v", f.GetField(), f.GetBefore().AsInterface(), f.GetAfter().AsInterface())
		}
		got = append(got, s)
	}
	want := []string{
		"KIND_ADDED cameras/Cam",
		"KIND_CHANGED objects/Cube location:[0 0 0]->[1 0 0]",
		"KIND_REMOVED objects/Gone",
		"KIND_CHANGED objects/Light light.energy:10->20 light.spot:<nil>->true",
		"KIND_ADDED objects/New",
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("diff:\n got %q\nwant %q", got, want)
	}
	// A field that became null says so: both sides set, the null one a
	// null Value (its JSON null, not a missing key).
	for _, c := range diffSnapshots(before, after) {
		for _, f := range c.GetFields() {
			if f.GetBefore() == nil || f.GetAfter() == nil {
				t.Errorf("%s %s: a side unset: %v", c.GetName(), f.GetField(), f)
			}
		}
	}
	if d := diffSnapshots(before, before); len(d) != 0 {
		t.Fatalf("a scene against itself: %v", d)
	}
}
