package macro

import (
	"fmt"
	"math"
)

func vec3Schema(def []any) map[string]any {
	return map[string]any{"type": "array", "items": map[string]any{"type": "number"}, "minItems": 3, "maxItems": 3, "default": def}
}

var nameSchema = map[string]any{"type": "string", "minLength": 1, "maxLength": 60, "pattern": "^[^_].*"}

func builtin() []*Macro {
	return []*Macro{threePointLighting(), turntableCamera(), productShot()}
}

// threePointLighting: key, fill and rim area lights around a center, each
// aimed at the target object.
func threePointLighting() *Macro {
	return &Macro{
		Name:        "macro.three_point_lighting",
		Version:     "1.1.0",
		Description: "Key, fill and rim area lights around center, aimed at the target object.",
		Schema: map[string]any{
			"type": "object", "additionalProperties": false, "required": []any{"target"},
			"properties": map[string]any{
				"target":      nameSchema,
				"center":      vec3Schema([]any{0.0, 0.0, 0.0}),
				"distance":    map[string]any{"type": "number", "exclusiveMinimum": 0, "maximum": 1000, "default": 6.0},
				"key_energy":  map[string]any{"type": "number", "exclusiveMinimum": 0, "maximum": 1e6, "default": 300.0},
				"name_prefix": map[string]any{"type": "string", "maxLength": 40, "pattern": "^[A-Za-z0-9_. -]*$", "default": ""},
			},
		},
		Example: map[string]any{"target": "Suzanne", "distance": 6.0},
		Tools:   []string{"light.create"},
		expand:  func(a map[string]any) []Step { return lightingSteps(a, "") },
	}
}

func lightingSteps(a map[string]any, idPrefix string) []Step {
	center := a["center"].([]any)
	cx, cy, cz := center[0].(float64), center[1].(float64), center[2].(float64)
	d, e := num(a, "distance"), num(a, "key_energy")
	prefix := str(a, "name_prefix")
	lights := []struct {
		id, name               string
		azimuth, elevation, kE float64
	}{
		{"key", "KeyLight", -45, 35, 1.0},
		{"fill", "FillLight", 45, 20, 0.4},
		{"rim", "RimLight", 180, 50, 0.7},
	}
	var steps []Step
	for _, l := range lights {
		az, el := l.azimuth*math.Pi/180, l.elevation*math.Pi/180
		name := prefix + l.name
		steps = append(steps, Step{ID: idPrefix + l.id, Tool: "light.create", Args: map[string]any{
			"name": name, "type": "area", "energy": round(e * l.kE), "size": round(d / 4),
			"location": vec(cx+d*math.Cos(el)*math.Sin(az), cy-d*math.Cos(el)*math.Cos(az), cz+d*math.Sin(el)),
			"target":   str(a, "target"),
		}})
	}
	return steps
}

// lookAt returns the rotation_euler (XYZ) that points a camera or light at
// (tx, ty, tz) from (x, y, z), with +Z up: their local -Z axis is the view.
func lookAt(x, y, z, tx, ty, tz float64) []any {
	dx, dy, dz := tx-x, ty-y, tz-z
	pitch := math.Atan2(dz, math.Hypot(dx, dy))
	return vec(math.Pi/2+pitch, 0, math.Atan2(-dx, dy))
}

// turntableCamera: a camera circling the center, keyframed every 1/8 turn
// and always looking at it, plus the frame range.
func turntableCamera() *Macro {
	return &Macro{
		Name:        "macro.turntable_camera",
		Version:     "1.0.0",
		Description: "An active camera that circles center once over frames 1..frames, keyframed every eighth of a turn, looking at center.",
		Schema: map[string]any{
			"type": "object", "additionalProperties": false,
			"properties": map[string]any{
				"name":   map[string]any{"type": "string", "minLength": 1, "maxLength": 60, "pattern": "^[^_].*", "default": "TurntableCamera"},
				"center": vec3Schema([]any{0.0, 0.0, 0.0}),
				"radius": map[string]any{"type": "number", "exclusiveMinimum": 0, "maximum": 1000, "default": 8.0},
				"height": map[string]any{"type": "number", "minimum": -1000, "maximum": 1000, "default": 3.0},
				"frames": map[string]any{"type": "integer", "minimum": 8, "maximum": 10000, "default": 48},
				"lens":   map[string]any{"type": "number", "minimum": 1, "maximum": 5000, "default": 50.0},
			},
		},
		Example: map[string]any{"radius": 8.0, "frames": 48},
		Tools:   []string{"camera.create", "keyframe.insert", "render.settings"},
		expand: func(a map[string]any) []Step {
			center := a["center"].([]any)
			cx, cy, cz := center[0].(float64), center[1].(float64), center[2].(float64)
			r, h, frames, name := num(a, "radius"), num(a, "height"), int(num(a, "frames")), str(a, "name")
			steps := []Step{
				{ID: "camera", Tool: "camera.create", Args: map[string]any{"name": name, "lens": num(a, "lens"),
					"location": vec(cx, cy-r, cz+h), "set_active": true}},
				{ID: "range", Tool: "render.settings", Args: map[string]any{"frame_start": 1.0, "frame_end": float64(frames)}},
			}
			prevYaw := 0.0
			for k := 0; k <= 8; k++ {
				a := -math.Pi/2 + 2*math.Pi*float64(k)/8
				x, y, z := cx+r*math.Cos(a), cy+r*math.Sin(a), cz+h
				rot := lookAt(x, y, z, cx, cy, cz)
				// Unwrap the yaw so the interpolation turns one way, not back.
				yaw := rot[2].(float64)
				for yaw < prevYaw-math.Pi {
					yaw += 2 * math.Pi
				}
				rot[2], prevYaw = round(yaw), yaw
				frame := float64(1 + k*(frames-1)/8)
				deps := []string{"camera"}
				if k > 0 {
					deps = []string{fmt.Sprintf("rot%d", k-1)}
				}
				steps = append(steps,
					Step{ID: fmt.Sprintf("loc%d", k), Tool: "keyframe.insert", DependsOn: deps,
						Args: map[string]any{"object": name, "data_path": "location", "frame": frame, "value": vec(x, y, z)}},
					Step{ID: fmt.Sprintf("rot%d", k), Tool: "keyframe.insert", DependsOn: []string{fmt.Sprintf("loc%d", k)},
						Args: map[string]any{"object": name, "data_path": "rotation_euler", "frame": frame, "value": rot}},
				)
			}
			return steps
		},
	}
}

// productShot: a seamless backdrop with its material, three-point lighting,
// an 85 mm camera aimed at the target, and render settings.
func productShot() *Macro {
	return &Macro{
		Name:        "macro.product_shot",
		Version:     "1.1.0",
		Description: "Backdrop plane with a matte material, three-point lighting and an active 85 mm camera aimed at the target.",
		Schema: map[string]any{
			"type": "object", "additionalProperties": false, "required": []any{"target"},
			"properties": map[string]any{
				"target": nameSchema,
				"center": vec3Schema([]any{0.0, 0.0, 0.0}),
				"backdrop_color": map[string]any{"type": "array", "items": map[string]any{"type": "number", "minimum": 0, "maximum": 1},
					"minItems": 4, "maxItems": 4, "default": []any{0.8, 0.8, 0.8, 1.0}},
				"resolution": map[string]any{"type": "array", "items": map[string]any{"type": "integer", "minimum": 16, "maximum": 8192},
					"minItems": 2, "maxItems": 2, "default": []any{1280.0, 720.0}},
				"samples": map[string]any{"type": "integer", "minimum": 1, "maximum": 4096, "default": 64},
			},
		},
		Example: map[string]any{"target": "Suzanne"},
		Tools:   []string{"camera.create", "camera.look_at", "light.create", "material.assign", "material.create", "object.create", "render.settings"},
		expand: func(a map[string]any) []Step {
			center := a["center"].([]any)
			cx, cy, cz := center[0].(float64), center[1].(float64), center[2].(float64)
			steps := []Step{
				{ID: "backdrop", Tool: "object.create", Args: map[string]any{"type": "plane", "name": "Backdrop", "size": 40.0, "location": vec(cx, cy, cz)}},
				{ID: "backdrop_material", Tool: "material.create", Args: map[string]any{"name": "BackdropMaterial",
					"base_color": a["backdrop_color"], "roughness": 0.6}},
				{ID: "backdrop_assign", Tool: "material.assign", Args: map[string]any{"object": "Backdrop", "material": "BackdropMaterial"},
					DependsOn: []string{"backdrop", "backdrop_material"}},
				{ID: "camera", Tool: "camera.create", Args: map[string]any{"name": "ProductCamera", "lens": 85.0,
					"location": vec(cx, cy-12, cz+3), "set_active": true}},
				{ID: "aim_camera", Tool: "camera.look_at", Args: map[string]any{"name": "ProductCamera", "target": str(a, "target")},
					DependsOn: []string{"camera"}},
				{ID: "settings", Tool: "render.settings", Args: map[string]any{"resolution": a["resolution"], "samples": a["samples"]}},
			}
			return append(steps, lightingSteps(map[string]any{"target": a["target"], "center": a["center"],
				"distance": 6.0, "key_energy": 300.0, "name_prefix": ""}, "light_")...)
		},
	}
}
