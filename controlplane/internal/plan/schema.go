package plan

import (
	"errors"
	"fmt"
	"math"
	"math/big"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/santhosh-tekuri/jsonschema/v6/kind"
	"golang.org/x/text/language"
	"golang.org/x/text/message"
)

// MaxArgsDepth is the deepest nesting of arrays and objects accepted in
// args ({} is depth 1). The JSON Schema validator recurses over args, so
// deeper args are refused before it runs. structpb's own decoding limit
// already keeps args from the wire well below this.
const MaxArgsDepth = 64

var printer = message.NewPrinter(language.English)

// checkArgs refuses operations whose args are not plain JSON or fail their
// tool's input schema. All tools are known by now. Large plans are checked
// in parallel, a contiguous share of the operations per CPU; the refusal is
// the same as a sequential check's (shares are joined in order).
func checkArgs(ops []Operation, reg *Registry) error {
	found := make([]*Error, Shares(len(ops)))
	if err := InShares(len(ops), "checking a plan's args", func(w, lo, hi int) error {
		found[w] = checkArgsRange(ops, lo, hi, reg)
		return nil
	}); err != nil {
		return err
	}
	var e *Error
	for _, f := range found {
		if f == nil {
			continue
		}
		if e == nil {
			e = &Error{Reason: ReasonSchemaInvalid}
		}
		e.Violations = append(e.Violations, f.Violations...)
		e.Repair = append(e.Repair, f.Repair...)
	}
	if e == nil {
		return nil
	}
	e.Message = fmt.Sprintf("args do not match the tool's input schema in %s; fix the listed fields",
		plural(len(e.Repair), "operation", "operations"))
	return e
}

// checkArgsRange checks ops[lo:hi]; the Error it returns has no message.
func checkArgsRange(ops []Operation, lo, hi int, reg *Registry) *Error {
	var e *Error
	empty := map[string]any{}
	var scratch []argNode
	for i := lo; i < hi; i++ {
		op := ops[i]
		args := op.Args
		if args == nil {
			args = empty
		}
		var vs []Violation
		vs, scratch = jsonViolations(i, op.ID, args, scratch[:0])
		if len(vs) == 0 {
			t, _ := reg.lookup(op.Tool)
			if t.quick != nil && t.quick.valid(args) {
				continue
			}
			if err := t.schema.Validate(args); err != nil {
				vs = schemaViolations(i, op.ID, args, err)
			}
		}
		if len(vs) == 0 {
			continue
		}
		if e == nil {
			e = &Error{Reason: ReasonSchemaInvalid}
		}
		e.Violations = append(e.Violations, vs...)
		e.Repair = append(e.Repair, RepairStep{OperationID: op.ID, Action: ActionReplaceArgs})
	}
	return e
}

// argNode is one value met while walking args; parent and token rebuild its
// path only when it is reported.
type argNode struct {
	val    any
	parent int // index into the walk's nodes, -1 for the args object
	token  string
	depth  int
}

// jsonViolations walks args iteratively and reports, sorted by field, what
// JSON cannot carry (NaN, infinities, invalid UTF-8, Go types encoding/json
// does not produce) and nesting deeper than MaxArgsDepth. It uses nodes as
// scratch space and returns it for reuse.
func jsonViolations(i int, id string, args map[string]any, nodes []argNode) ([]Violation, []argNode) {
	var vs []Violation
	nodes = append(nodes, argNode{val: args, parent: -1, depth: 1})
	report := func(n int, what string) {
		vs = append(vs, Violation{
			Field:       argsField(i, nodes, n),
			Description: fmt.Sprintf("operation %q: %s", id, what),
		})
	}
	for n := 0; n < len(nodes); n++ {
		switch x := nodes[n].val.(type) {
		case nil, bool:
		case string:
			if !utf8.ValidString(x) {
				report(n, "string is not valid UTF-8")
			}
		case float64:
			if math.IsNaN(x) || math.IsInf(x, 0) {
				report(n, fmt.Sprintf("%v is not a JSON number", x))
			}
		case map[string]any:
			if nodes[n].depth >= MaxArgsDepth && len(x) > 0 {
				report(n, fmt.Sprintf("nested deeper than %d levels", MaxArgsDepth))
				continue
			}
			for k, v := range x {
				if !utf8.ValidString(k) {
					report(n, fmt.Sprintf("key %q is not valid UTF-8", k))
					continue
				}
				nodes = append(nodes, argNode{val: v, parent: n, token: k, depth: nodes[n].depth + 1})
			}
		case []any:
			if nodes[n].depth >= MaxArgsDepth && len(x) > 0 {
				report(n, fmt.Sprintf("nested deeper than %d levels", MaxArgsDepth))
				continue
			}
			for j, v := range x {
				nodes = append(nodes, argNode{val: v, parent: n, token: strconv.Itoa(j), depth: nodes[n].depth + 1})
			}
		default:
			report(n, fmt.Sprintf("%T is not a JSON value", x))
		}
	}
	sortViolations(vs) // map order above is random
	clear(nodes)       // drop references to args
	return vs, nodes
}

func sortViolations(vs []Violation) {
	slices.SortFunc(vs, func(a, b Violation) int {
		if c := strings.Compare(a.Field, b.Field); c != 0 {
			return c
		}
		return strings.Compare(a.Description, b.Description)
	})
}

// argsField renders the path of nodes[n], such as operations[2].args.location[0].
func argsField(i int, nodes []argNode, n int) string {
	var toks []string
	var arr []bool
	for ; n > 0; n = nodes[n].parent {
		_, inArray := nodes[nodes[n].parent].val.([]any)
		toks = append(toks, nodes[n].token)
		arr = append(arr, inArray)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "operations[%d].args", i)
	for k := len(toks) - 1; k >= 0; k-- {
		appendPathToken(&b, toks[k], arr[k])
	}
	return b.String()
}

// appendPathToken writes .key, ["odd key"] or [index].
func appendPathToken(b *strings.Builder, tok string, index bool) {
	switch {
	case index:
		b.WriteByte('[')
		b.WriteString(tok)
		b.WriteByte(']')
	case isIdentifier(tok):
		b.WriteByte('.')
		b.WriteString(tok)
	default:
		b.WriteByte('[')
		b.WriteString(strconv.Quote(tok))
		b.WriteByte(']')
	}
}

func isIdentifier(s string) bool {
	if s == "" {
		return false
	}
	for k := 0; k < len(s); k++ {
		c := s[k]
		if c != '_' && (c < 'a' || c > 'z') && (c < 'A' || c > 'Z') && (k == 0 || c < '0' || c > '9') {
			return false
		}
	}
	return true
}

// schemaViolations turns the validator's error tree into one violation per
// failing keyword, sorted (the validator visits object members in map
// order). It descends only through nodes that merely group causes; the
// failure of an anyOf, oneOf or not is reported as itself, since its causes
// are the alternatives that did not match.
func schemaViolations(i int, id string, args map[string]any, err error) []Violation {
	var ve *jsonschema.ValidationError
	if !errors.As(err, &ve) {
		return []Violation{{Field: fmt.Sprintf("operations[%d].args", i), Description: fmt.Sprintf("operation %q: %v", id, err)}}
	}
	var vs []Violation
	add := func(loc []string, extra string, what string) {
		vs = append(vs, Violation{
			Field:       instanceField(i, args, loc, extra),
			Description: fmt.Sprintf("operation %q: %s", id, what),
		})
	}
	stack := []*jsonschema.ValidationError{ve}
	for len(stack) > 0 {
		e := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		switch k := e.ErrorKind.(type) {
		case *kind.Schema, *kind.Reference, *kind.Group, *kind.AllOf:
			if len(e.Causes) > 0 {
				stack = append(stack, e.Causes...)
				continue
			}
			add(e.InstanceLocation, "", k.LocalizedString(printer))
		case *kind.Required:
			for _, p := range k.Missing {
				add(e.InstanceLocation, p, "required property is missing")
			}
		case *kind.AdditionalProperties:
			for _, p := range k.Properties {
				add(e.InstanceLocation, p, "property is not allowed")
			}
		case *spanError:
			add(e.InstanceLocation, k.end, k.msg)
		case *kind.Minimum:
			add(e.InstanceLocation, "", boundRefusal("minimum", k.Got, k.Want))
		case *kind.Maximum:
			add(e.InstanceLocation, "", boundRefusal("maximum", k.Got, k.Want))
		case *kind.ExclusiveMinimum:
			add(e.InstanceLocation, "", boundRefusal("exclusiveMinimum", k.Got, k.Want))
		case *kind.ExclusiveMaximum:
			add(e.InstanceLocation, "", boundRefusal("exclusiveMaximum", k.Got, k.Want))
		case *kind.Pattern:
			// The library quotes the pattern like a Go string, doubling
			// its backslashes: '^[^\\x00-\\x1f]+$'. Show it as written.
			add(e.InstanceLocation, "", fmt.Sprintf("%q does not match the pattern %s", k.Got, showPattern(k.Want)))
		default:
			add(e.InstanceLocation, "", e.ErrorKind.LocalizedString(printer))
		}
	}
	sortViolations(vs)
	return slices.Compact(vs)
}

// showPattern renders a schema's pattern as written, unless it holds
// characters that would not print.
func showPattern(p string) string {
	if strconv.CanBackquote(p) {
		return p
	}
	return strconv.Quote(p)
}

// instanceField renders a JSON Schema instance location (plus an optional
// member name) as a request field path, looking at args to tell array
// indices from object keys.
func instanceField(i int, args map[string]any, loc []string, member string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "operations[%d].args", i)
	var cur any = args
	for _, tok := range loc {
		switch c := cur.(type) {
		case []any:
			appendPathToken(&b, tok, true)
			if j, err := strconv.Atoi(tok); err == nil && j >= 0 && j < len(c) {
				cur = c[j]
			} else {
				cur = nil
			}
		case map[string]any:
			appendPathToken(&b, tok, false)
			cur = c[tok]
		default:
			appendPathToken(&b, tok, false)
			cur = nil
		}
	}
	if member != "" {
		appendPathToken(&b, member, false)
	}
	return b.String()
}

// boundRefusal words a number's refusal as the library does, with the numbers as
// written (its printer writes 2000000 as 2×10⁰⁶).
func boundRefusal(keyword string, got, want *big.Rat) string {
	return fmt.Sprintf("%s: got %s, want %s", keyword, ratPlain(got), ratPlain(want))
}

func ratPlain(r *big.Rat) string {
	if r.IsInt() {
		return r.Num().String()
	}
	f, _ := r.Float64()
	return plain(f)
}
