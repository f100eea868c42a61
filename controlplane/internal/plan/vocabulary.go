package plan

import (
	"encoding/json"
	"fmt"
	"math"
	"strconv"

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

// SpanKeyword bounds, in an object's schema, a range two of its number
// properties give ("x-span": {"start": "frame_start", "end": "frame_end",
// "max": 500}): when the object has both, end is not before start, and
// end − start + 1 (the frames of a range of whole frames) is at most max
// ("max" is optional; "unit", optional too, names what the range counts in
// the refusal: "frames"). A JSON Schema cannot compare two values; a tool that reads
// such a pair would refuse it only when it runs. Either end left out is the
// tool's default (the scene's), known only then.
const SpanKeyword = "x-span"

// vocabularyURL names Blendplane's JSON Schema vocabulary. Schemas never
// list it in a "$vocabulary": the compiler asserts it for every schema.
const vocabularyURL = "urn:blendplane:vocabulary:v1"

// vocabulary is Blendplane's JSON Schema vocabulary: the keywords the
// control plane asserts on top of the draft's. ("x-sandbox-path" is not one:
// it is a policy, checked by the contract gate.)
func vocabulary() *jsonschema.Vocabulary {
	return &jsonschema.Vocabulary{URL: vocabularyURL, Compile: compileVocabulary}
}

// compileVocabulary compiles the vocabulary's keywords in one schema
// object. It checks their values itself, since the vocabulary has no
// metaschema.
func compileVocabulary(_ *jsonschema.CompilerContext, obj map[string]any) (jsonschema.SchemaExt, error) {
	var exts keywords
	if v, ok := obj[MaxBytesKeyword]; ok {
		n, ok := nonNegativeInt(v)
		if !ok {
			return nil, fmt.Errorf("%q must be a non-negative integer, not %v", MaxBytesKeyword, v)
		}
		exts = append(exts, maxBytes(n))
	}
	if v, ok := obj[SpanKeyword]; ok {
		s, err := compileSpan(v)
		if err != nil {
			return nil, err
		}
		exts = append(exts, s)
	}
	switch len(exts) {
	case 0:
		return nil, nil
	case 1:
		return exts[0], nil
	}
	return exts, nil
}

// keywords are the vocabulary's keywords of one schema object.
type keywords []jsonschema.SchemaExt

func (ks keywords) Validate(ctx *jsonschema.ValidatorContext, v any) {
	for _, k := range ks {
		k.Validate(ctx, v)
	}
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

// span is a compiled "x-span".
type span struct {
	start, end string
	max        int    // 0: no bound
	unit       string // what it counts ("values" if not given)
}

// compileSpan reads "x-span"'s value: start and end, two different
// property names, max, a positive integer, and unit, a word, if given.
func compileSpan(v any) (span, error) {
	m, ok := v.(map[string]any)
	var s span
	if ok {
		s.start, _ = m["start"].(string)
		s.end, _ = m["end"].(string)
	}
	bad := !ok || s.start == "" || s.end == "" || s.start == s.end
	s.unit = "values"
	for k, x := range m {
		switch k {
		case "start", "end":
		case "unit":
			u, isString := x.(string)
			bad, s.unit = bad || !isString || u == "", u
		case "max":
			n, isInt := nonNegativeInt(x)
			bad, s.max = bad || !isInt || n == 0, n
		default:
			bad = true
		}
	}
	if bad {
		return span{}, fmt.Errorf(`%q must be {"start": <property>, "end": <another property>, "max": <positive integer, optional>, "unit": <word, optional>}, not %v`, SpanKeyword, v)
	}
	return s, nil
}

// violation says how obj breaks the span, or "" when it does not (or has
// not both ends as numbers: their types are for the draft's keywords).
func (s span) violation(obj map[string]any) string {
	a, aok := number(obj[s.start])
	b, bok := number(obj[s.end])
	switch {
	case !aok || !bok:
		return ""
	case b < a:
		return fmt.Sprintf("%s %s is before %s %s", s.end, plain(b), s.start, plain(a))
	case s.max > 0 && b-a+1 > float64(s.max):
		return fmt.Sprintf("%s %s to %s %s is %s %s, at most %d", s.start, plain(a), s.end, plain(b), plain(b-a+1), s.unit, s.max)
	}
	return ""
}

// number is a JSON number of args (float64: json.Number is refused before
// any schema sees it).
func number(v any) (float64, bool) {
	f, ok := v.(float64)
	return f, ok
}

// plain writes a number as the bridge's Python does: 1000000, not 1e+06.
func plain(f float64) string { return strconv.FormatFloat(f, 'f', -1, 64) }

func (s span) Validate(ctx *jsonschema.ValidatorContext, v any) {
	if obj, ok := v.(map[string]any); ok {
		if msg := s.violation(obj); msg != "" {
			ctx.AddError(&spanError{end: s.end, msg: msg})
		}
	}
}

// spanError is the jsonschema.ErrorKind of a range its "x-span" refuses;
// schemaViolations names the range's end as the field.
type spanError struct{ end, msg string }

func (*spanError) KeywordPath() []string { return []string{SpanKeyword} }

func (k *spanError) LocalizedString(*message.Printer) string { return k.msg }
