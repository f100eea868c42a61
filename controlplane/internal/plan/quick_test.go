package plan

import (
	"encoding/json"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"testing"
)

// quickSchemas are the schemas TestQuickSchemaAgrees holds quickSchema to
// jsonschema on: the bridge's tools' (testdata/bridge_schemas.json, its
// registry.tool_list() as of this test: refresh it when the tools change),
// this package's test registry's, and the keywords neither uses.
func quickSchemas(t *testing.T) map[string]map[string]any {
	raw, err := os.ReadFile("testdata/bridge_schemas.json")
	if err != nil {
		t.Fatal(err)
	}
	var docs map[string]map[string]any
	if err := json.Unmarshal(raw, &docs); err != nil {
		t.Fatal(err)
	}
	if len(docs) < 20 {
		t.Fatalf("%d bridge schemas", len(docs))
	}
	docs["test/object.create"] = decodeJSON(t, objectCreateSchema)
	docs["test/types"] = decodeJSON(t, `{"type": "object", "properties": {
		"n": {"type": ["integer", "null"], "minimum": -2, "exclusiveMaximum": 7},
		"f": {"type": ["number", "string"], "maximum": 1.5, "maxLength": 2},
		"e": {"enum": ["a", 1, 2.5, null, true]},
		"o": {"type": "object", "minProperties": 1, "additionalProperties": true,
		      "properties": {"deep": {"type": "array", "maxItems": 2, "items": {"type": "integer"}}}},
		"x": {"x-note": "a vendor keyword", "title": "t", "$comment": "c", "examples": [1]}
	}}`)
	return docs
}

// TestQuickSchemaAgrees: on values made from each schema (mostly valid, a
// part broken), quickSchema says valid exactly when jsonschema does, and it
// compiles for every tool of the bridge (else Check would lose its speed).
func TestQuickSchemaAgrees(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 11))
	for name, doc := range quickSchemas(t) {
		sch, err := compileSchema(name, doc)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		q := compileQuick(doc)
		if q == nil {
			t.Fatalf("%s: no quickSchema for %v", name, doc)
		}
		valid := 0
		for range 3000 {
			v := genValue(rng, doc, 0)
			want := sch.Validate(v) == nil
			if got := q.valid(v); got != want {
				js, _ := json.Marshal(v)
				t.Fatalf("%s: quickSchema says %v, jsonschema %v, for %s", name, got, want, js)
			}
			if want {
				valid++
			}
		}
		if valid < 30 || valid > 2970 {
			t.Errorf("%s: %d of 3000 values valid: the test is not exercising both sides", name, valid)
		}
	}
}

// TestQuickSchemaDeclines: schemas with anything quickSchema does not know
// are left to jsonschema.
func TestQuickSchemaDeclines(t *testing.T) {
	for _, s := range []string{
		`{"$schema": "http://json-schema.org/draft-07/schema#", "type": "object"}`,
		`{"type": "object", "properties": {"a": {"$ref": "#"}}}`,
		`{"type": "object", "properties": {"a": true}}`,
		`{"anyOf": [{"type": "string"}, {"type": "number"}]}`,
		`{"type": "string", "format": "email"}`,
		`{"type": "object", "additionalProperties": {"type": "string"}}`,
		`{"type": "object", "patternProperties": {"^a": {}}}`,
		`{"enum": [{"a": 1}]}`,
		`{"const": "a"}`,
		`{"type": "array", "uniqueItems": true}`,
		`{"type": "object", "properties": {"a": {"type": "string", "$schema": "https://json-schema.org/draft/2020-12/schema"}}}`,
		`{"$id": "urn:x", "type": "object"}`,
		`{"type": "number", "multipleOf": 2}`,
	} {
		if q := compileQuick(decodeJSON(t, s)); q != nil {
			t.Errorf("compileQuick(%s) compiled", s)
		}
	}
	// Values JSON decoders other than encoding/json and structpb make.
	q := compileQuick(decodeJSON(t, `{"type": "object", "properties": {"a": {"type": "number"}}}`))
	for _, v := range []any{map[string]any{"a": json.Number("1")}, map[string]any{"a": 1}, map[string]any{"a": int64(1)}} {
		if q.valid(v) {
			t.Errorf("quickSchema passes %#v", v)
		}
	}
}

// genValue makes a value for schema doc: usually one it allows, sometimes
// one that breaks a keyword, or one of another type.
func genValue(rng *rand.Rand, doc map[string]any, depth int) any {
	if rng.IntN(25) == 0 || depth > 4 {
		return anyValue(rng)
	}
	if e, ok := doc["enum"].([]any); ok {
		if rng.IntN(6) == 0 {
			return anyValue(rng)
		}
		return e[rng.IntN(len(e))]
	}
	types := []string{"object"}
	switch t := doc["type"].(type) {
	case string:
		types = []string{t}
	case []any:
		types = nil
		for _, x := range t {
			types = append(types, x.(string))
		}
	default:
		if doc["properties"] == nil {
			types = []string{"string", "number", "integer", "array", "null", "boolean"}
		}
	}
	switch types[rng.IntN(len(types))] {
	case "object":
		props, _ := doc["properties"].(map[string]any)
		out := map[string]any{}
		names := make([]string, 0, len(props))
		for k := range props {
			names = append(names, k)
		}
		slices.Sort(names)
		for _, k := range names {
			if rng.IntN(3) == 0 {
				out[k] = genValue(rng, props[k].(map[string]any), depth+1)
			}
		}
		if req, ok := doc["required"].([]any); ok {
			for _, r := range req {
				if rng.IntN(20) > 0 {
					if sub, ok := props[r.(string)].(map[string]any); ok {
						out[r.(string)] = genValue(rng, sub, depth+1)
					} else {
						out[r.(string)] = anyValue(rng)
					}
				}
			}
		}
		if rng.IntN(20) == 0 {
			out["unknown_key"] = 1.0
		}
		return out
	case "array":
		items, _ := doc["items"].(map[string]any)
		n := rng.IntN(6)
		if lo, ok := doc["minItems"].(float64); ok && rng.IntN(4) > 0 {
			n = int(lo) + rng.IntN(2)
		}
		out := make([]any, n)
		for i := range out {
			if items != nil {
				out[i] = genValue(rng, items, depth+1)
			} else {
				out[i] = anyValue(rng)
			}
		}
		return out
	case "string":
		return pickString(rng)
	case "number", "integer":
		return pickNumber(rng)
	case "boolean":
		return rng.IntN(2) == 0
	}
	return nil
}

var stringPool = []string{"", "a", "Cube", "P00042", "Cube.001", "render.png", "out/frame_####.png", "//x",
	"../up", "/abs", strings.Repeat("n", 63), strings.Repeat("n", 64), strings.Repeat("é", 31),
	strings.Repeat("é", 32), strings.Repeat("é", 63), strings.Repeat("é", 64), "a\nb", "tab\t", "del\x7f",
	"\u2028", "x$", "MESH", "cube", "plane", "POINT", "SUN", "BLENDER_EEVEE", "CYCLES", "OBJECT", "glb",
	"fbx", "obj", "out.glb", "scene.fbx", "x.usda", "a.obj", "ünï.gltf", "shot.PNG", "subdivision", "bevel", "location", "rotation_euler", "PERSP", "a", "sphere", "cone"}

func pickString(rng *rand.Rand) string { return stringPool[rng.IntN(len(stringPool))] }

var numberPool = []float64{0, -0.0, 1, -1, 2, 3, 1.5, 0.5, -2.5, 7, 6.999, 63, 64, 100, 1000, 1e9, 1e300,
	-1e300, 0.001, 4096, 10000, 10001, 65536, 24, 250, 0.25, 180, -180, 1 << 31, 9007199254740993}

func pickNumber(rng *rand.Rand) float64 { return numberPool[rng.IntN(len(numberPool))] }

func anyValue(rng *rand.Rand) any {
	switch rng.IntN(6) {
	case 0:
		return nil
	case 1:
		return rng.IntN(2) == 0
	case 2:
		return pickNumber(rng)
	case 3:
		return pickString(rng)
	case 4:
		return []any{pickNumber(rng), pickString(rng)}
	}
	return map[string]any{"k": pickString(rng)}
}
