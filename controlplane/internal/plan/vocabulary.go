package plan

import (
	"encoding/json"
	"fmt"
	"math"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"golang.org/x/text/message"
)

// MaxBytesKeyword bounds, in a tool's input schema, the UTF-8 byte length
// of a string ("x-max-bytes": 63). Blender's datablock names are at most 63
// bytes, and "maxLength" counts characters: a name of 63 "é" passes
// maxLength and would fail only in Blender. Like any JSON Schema keyword it
// applies wherever a schema does (properties, items, $defs, anyOf, ...) and
// only to strings. Its value must be a non-negative integer, or the tool's
// schema does not compile.
const MaxBytesKeyword = "x-max-bytes"

// vocabularyURL names Blendplane's JSON Schema vocabulary. Schemas never
// list it in a "$vocabulary": the compiler asserts it for every schema.
const vocabularyURL = "urn:blendplane:vocabulary:v1"

// vocabulary is Blendplane's JSON Schema vocabulary: the keywords the
// control plane asserts on top of the draft's. ("x-sandbox-path" is not one:
// it is a policy, checked by the contract gate.)
func vocabulary() *jsonschema.Vocabulary {
	return &jsonschema.Vocabulary{URL: vocabularyURL, Compile: compileMaxBytes}
}

// compileMaxBytes compiles "x-max-bytes" in one schema object. It checks
// the keyword's value itself, since the vocabulary has no metaschema.
func compileMaxBytes(_ *jsonschema.CompilerContext, obj map[string]any) (jsonschema.SchemaExt, error) {
	v, ok := obj[MaxBytesKeyword]
	if !ok {
		return nil, nil
	}
	n, ok := nonNegativeInt(v)
	if !ok {
		return nil, fmt.Errorf("%q must be a non-negative integer, not %v", MaxBytesKeyword, v)
	}
	return maxBytes(n), nil
}

// nonNegativeInt accepts the integers JSON decoders produce: float64
// (encoding/json, structpb), json.Number (jsonschema.UnmarshalJSON) and Go
// integers.
func nonNegativeInt(v any) (int, bool) {
	switch x := v.(type) {
	case float64:
		if x >= 0 && x <= math.MaxInt32 && x == math.Trunc(x) {
			return int(x), true
		}
	case json.Number:
		if n, err := x.Int64(); err == nil && n >= 0 && n <= math.MaxInt32 {
			return int(n), true
		}
	case int:
		if x >= 0 {
			return x, true
		}
	case int64:
		if x >= 0 && x <= math.MaxInt32 {
			return int(x), true
		}
	}
	return 0, false
}

// maxBytes is a compiled "x-max-bytes".
type maxBytes int

func (m maxBytes) Validate(ctx *jsonschema.ValidatorContext, v any) {
	// Args are valid UTF-8 by now (jsonViolations), so len is the UTF-8
	// byte length.
	if s, ok := v.(string); ok && len(s) > int(m) {
		ctx.AddError(&maxBytesError{got: len(s), want: int(m)})
	}
}

// maxBytesError is the jsonschema.ErrorKind of a string over its
// "x-max-bytes"; schemaViolations reports it like any other keyword.
type maxBytesError struct {
	got, want int
}

func (*maxBytesError) KeywordPath() []string { return []string{MaxBytesKeyword} }

func (k *maxBytesError) LocalizedString(*message.Printer) string {
	return fmt.Sprintf("is %d bytes in UTF-8, at most %d", k.got, k.want)
}
