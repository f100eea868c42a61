package plan

import (
	"slices"
	"strings"
	"testing"
)

// TestMaxBytesWherever: "x-max-bytes" applies wherever a schema can be,
// in every draft, and only to strings.
func TestMaxBytesWherever(t *testing.T) {
	long := strings.Repeat("é", 32) // 32 characters, 64 bytes
	tests := []struct {
		name   string
		schema string
		args   string
		field  string // "" if accepted
	}{
		{"at the limit", `{"properties": {"n": {"x-max-bytes": 64}}}`, `{"n": "` + long + `"}`, ""},
		{"over the limit", `{"properties": {"n": {"x-max-bytes": 63}}}`, `{"n": "` + long + `"}`, "operations[0].args.n"},
		{"zero", `{"properties": {"n": {"x-max-bytes": 0}}}`, `{"n": "a"}`, "operations[0].args.n"},
		{"only strings", `{"properties": {"n": {"x-max-bytes": 1}}}`, `{"n": [1, 2, 3]}`, ""},
		{"on the args object itself", `{"x-max-bytes": 1}`, `{"n": "` + long + `"}`, ""},
		{"items", `{"properties": {"n": {"items": {"x-max-bytes": 63}}}}`, `{"n": ["a", "` + long + `"]}`, "operations[0].args.n[1]"},
		{"prefixItems", `{"properties": {"n": {"prefixItems": [{}, {"x-max-bytes": 63}]}}}`, `{"n": ["` + long + `", "` + long + `"]}`, "operations[0].args.n[1]"},
		{"additionalProperties", `{"additionalProperties": {"x-max-bytes": 63}}`, `{"odd key": "` + long + `"}`, `operations[0].args["odd key"]`},
		{"$ref to $defs", `{"$defs": {"name": {"type": "string", "x-max-bytes": 63}}, "properties": {"n": {"$ref": "#/$defs/name"}}}`, `{"n": "` + long + `"}`, "operations[0].args.n"},
		{"allOf", `{"properties": {"n": {"allOf": [{"type": "string"}, {"x-max-bytes": 63}]}}}`, `{"n": "` + long + `"}`, "operations[0].args.n"},
		{"anyOf", `{"properties": {"n": {"anyOf": [{"type": "number"}, {"x-max-bytes": 63}]}}}`, `{"n": "` + long + `"}`, "operations[0].args.n"},
		{"draft-07", `{"$schema": "http://json-schema.org/draft-07/schema#", "definitions": {"name": {"x-max-bytes": 63}}, "properties": {"n": {"$ref": "#/definitions/name"}}}`,
			`{"n": "` + long + `"}`, "operations[0].args.n"},
		{"draft 2019-09", `{"$schema": "https://json-schema.org/draft/2019-09/schema", "properties": {"n": {"x-max-bytes": 63}}}`, `{"n": "` + long + `"}`, "operations[0].args.n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			reg, err := NewRegistry([]ToolDef{{Name: "t", Safety: SafetyReadOnly, InputSchema: decodeJSON(t, tt.schema)}})
			if err != nil {
				t.Fatal(err)
			}
			_, err = Check([]Operation{{ID: "a", Tool: "t", Args: decodeJSON(t, tt.args), Safety: SafetyReadOnly}}, reg)
			if tt.field == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			pe := asPlanError(t, err)
			if pe.Reason != ReasonSchemaInvalid || !slices.ContainsFunc(pe.Violations, func(v Violation) bool { return v.Field == tt.field }) {
				t.Fatalf("got %s %q, want a violation of %s", pe.Reason, pe.Violations, tt.field)
			}
		})
	}
}

func TestMaxBytesMalformed(t *testing.T) {
	for _, v := range []string{`"63"`, `-1`, `1.5`, `true`, `null`, `1e12`} {
		_, err := NewRegistry([]ToolDef{{Name: "t", Safety: SafetyReadOnly,
			InputSchema: decodeJSON(t, `{"properties": {"n": {"items": {"x-max-bytes": `+v+`}}}}`)}})
		if err == nil || !strings.Contains(err.Error(), `"x-max-bytes" must be a non-negative integer`) {
			t.Errorf("x-max-bytes %s: err = %v", v, err)
		}
	}
}

// TestSchemaMetaschemaStillWhole: registering the vocabulary must not
// loosen the check of the schema against its draft's metaschema.
func TestSchemaMetaschemaStillWhole(t *testing.T) {
	for _, s := range []string{`{"title": 5}`, `{"properties": {"n": {"format": 7}}}`, `{"deprecated": "yes"}`} {
		if _, err := NewRegistry([]ToolDef{{Name: "t", Safety: SafetyReadOnly, InputSchema: decodeJSON(t, s)}}); err == nil {
			t.Errorf("schema %s compiled", s)
		}
	}
}

// TestControlCharacterPatterns: the bridge's pattern refuses control
// characters whether its JSON spells them as regexp escapes or (from a
// Python string that was not raw) as the characters themselves.
func TestControlCharacterPatterns(t *testing.T) {
	for _, pattern := range []string{`^[^\x00-\x1f\x7f]+$`, "^[^\x00-\x1f\x7f]+$"} {
		reg, err := NewRegistry([]ToolDef{{Name: "t", Safety: SafetyReadOnly, InputSchema: map[string]any{
			"properties": map[string]any{"name": map[string]any{"type": "string", "pattern": pattern}},
		}}})
		if err != nil {
			t.Fatalf("pattern %q: %v", pattern, err)
		}
		for name, ok := range map[string]bool{"Cube": true, "Cube é🧊 ~": true, "\u0085": true, "a\nb": false, "\x00": false, "\x1f": false, "\x7f": false, "\t": false, "": false} {
			_, err := Check([]Operation{{ID: "a", Tool: "t", Args: map[string]any{"name": name}, Safety: SafetyReadOnly}}, reg)
			if ok != (err == nil) {
				t.Errorf("pattern %q, name %q: %v", pattern, name, err)
			}
			if err != nil {
				pe := asPlanError(t, err)
				if pe.Reason != ReasonSchemaInvalid || len(pe.Violations) != 1 || pe.Violations[0].Field != "operations[0].args.name" ||
					!strings.Contains(pe.Violations[0].Description, "does not match the pattern") {
					t.Errorf("pattern %q, name %q: %s %q", pattern, name, pe.Reason, pe.Violations)
				}
			}
		}
	}
}

// TestSpan: "x-span" refuses a range whose end is before its start, or
// that holds more than max values, naming the end as the field (in the
// whole check and the quick one alike); a range with an end left out is
// not its business. Numbers print as the bridge's do (1000000, not 1e+06).
func TestSpan(t *testing.T) {
	schema := `{"type": "object", "properties": {"from": {"type": "integer"}, "to": {"type": "integer"}, "max": {"type": "string"}},
		"x-span": {"start": "from", "end": "to", "max": 500}}`
	reg, err := NewRegistry([]ToolDef{{Name: "t", Safety: SafetyReadOnly, InputSchema: decodeJSON(t, schema)}})
	if err != nil {
		t.Fatal(err)
	}
	for args, want := range map[string]string{
		`{"from": 1, "to": 500}`:           "",
		`{"from": 7, "to": 7}`:             "",
		`{"from": 10}`:                     "",
		`{"to": 3}`:                        "",
		`{"from": 10, "to": 5}`:            "to 5 is before from 10",
		`{"from": 1, "to": 501}`:           "from 1 to to 501 is 501 values, at most 500",
		`{"from": -300, "to": 300}`:        "from -300 to to 300 is 601 values, at most 500",
		`{"from": 10, "to": 5, "max": ""}`: "to 5 is before from 10",
		`{"from": 1000000, "to": 999999}`:  "to 999999 is before from 1000000",
	} {
		ops := []Operation{{ID: "a", Tool: "t", Args: decodeJSON(t, args), Safety: SafetyReadOnly}}
		_, err := Check(ops, reg)
		if want == "" {
			if err != nil {
				t.Errorf("%s: %v", args, err)
			}
			continue
		}
		pe := asPlanError(t, err)
		if pe.Reason != ReasonSchemaInvalid || len(pe.Violations) != 1 || pe.Violations[0].Field != "operations[0].args.to" ||
			!strings.HasSuffix(pe.Violations[0].Description, want) {
			t.Errorf("%s: %s %q, want a violation of operations[0].args.to saying %q", args, pe.Reason, pe.Violations, want)
		}
	}
	// "unit" names what the range counts.
	if frames, err := compileSpan(map[string]any{"start": "a", "end": "b", "max": 500.0, "unit": "frames"}); err != nil ||
		frames.violation(map[string]any{"a": 1.0, "b": 501.0}) != "a 1 to b 501 is 501 frames, at most 500" {
		t.Errorf("x-span with a unit: %v %q", err, frames.violation(map[string]any{"a": 1.0, "b": 501.0}))
	}
	// Check stops at the quick check's "valid": each of the two alone.
	sch, err := compileSchema("t", decodeJSON(t, schema))
	if err != nil {
		t.Fatal(err)
	}
	q := compileQuick(decodeJSON(t, schema))
	for args, valid := range map[string]bool{`{"from": 1, "to": 500}`: true, `{"from": 10}`: true, `{"from": 10, "to": 5}`: false, `{"from": 1, "to": 501}`: false} {
		if got := sch.Validate(decodeJSON(t, args)) == nil; got != valid {
			t.Errorf("jsonschema with x-span, %s: valid %v", args, got)
		}
		if q == nil || q.valid(decodeJSON(t, args)) != valid {
			t.Errorf("the quick check of x-span, %s: want valid %v", args, valid)
		}
	}
}

func TestSpanMalformed(t *testing.T) {
	for _, v := range []string{`true`, `{}`, `{"start": "a"}`, `{"start": "a", "end": "a"}`, `{"start": "a", "end": 5}`,
		`{"start": "a", "end": "b", "max": 0}`, `{"start": "a", "end": "b", "max": 1.5}`, `{"start": "a", "end": "b", "step": 1}`,
		`{"start": "a", "end": "b", "unit": ""}`, `{"start": "a", "end": "b", "unit": 3}`} {
		_, err := NewRegistry([]ToolDef{{Name: "t", Safety: SafetyReadOnly, InputSchema: decodeJSON(t, `{"x-span": `+v+`}`)}})
		if err == nil || !strings.Contains(err.Error(), `"x-span" must be {"start"`) {
			t.Errorf("x-span %s: err = %v", v, err)
		}
	}
	// Beside x-max-bytes in one schema object, both hold.
	reg, err := NewRegistry([]ToolDef{{Name: "t", Safety: SafetyReadOnly, InputSchema: decodeJSON(t, `{"properties": {"v":
		{"type": ["object", "string"], "x-span": {"start": "a", "end": "b"}, "x-max-bytes": 1}}}`)}})
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range []string{`{"a": 2, "b": 1}`, `"ab"`} {
		if _, err := Check([]Operation{{ID: "a", Tool: "t", Args: decodeJSON(t, `{"v": `+v+`}`), Safety: SafetyReadOnly}}, reg); err == nil {
			t.Errorf("x-span beside x-max-bytes: %s refused by neither", v)
		}
	}
}

// TestBoundsAsWritten: a number over or under its bound is refused with the
// numbers as JSON writes them (the library's printer wrote 2×10⁰⁶).
func TestBoundsAsWritten(t *testing.T) {
	reg, err := NewRegistry([]ToolDef{{Name: "t", Safety: SafetyReadOnly, InputSchema: decodeJSON(t,
		`{"properties": {"n": {"maximum": 1048574}, "m": {"minimum": 0.5}, "x": {"exclusiveMinimum": 0}, "y": {"exclusiveMaximum": 10}}}`)}})
	if err != nil {
		t.Fatal(err)
	}
	_, err = Check([]Operation{{ID: "a", Tool: "t", Args: decodeJSON(t, `{"n": 2000000, "m": 0.25, "x": 0, "y": 1e7}`), Safety: SafetyReadOnly}}, reg)
	pe := asPlanError(t, err)
	var got []string
	for _, v := range pe.Violations {
		got = append(got, v.Field+": "+v.Description[strings.Index(v.Description, ": ")+2:])
	}
	want := []string{"operations[0].args.m: minimum: got 0.25, want 0.5", "operations[0].args.n: maximum: got 2000000, want 1048574",
		"operations[0].args.x: exclusiveMinimum: got 0, want 0", "operations[0].args.y: exclusiveMaximum: got 10000000, want 10"}
	if !slices.Equal(got, want) {
		t.Errorf("got %q, want %q", got, want)
	}
}
