// Package structwire writes a JSON object as a google.protobuf.Struct in
// wire form, and a Struct in wire form as JSON, without building either.
// agentd receives every tool's result from Blender as JSON and sends it on
// as a receipt's Struct: decoding the JSON into maps, converting those to
// structpb values and encoding them took a fifth of its CPU per operation.
// The MCP server writes results as JSON from the receipts' wire form.
package structwire

import (
	"bytes"
	"encoding/json"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"unicode/utf16"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
)

// FromJSON returns the JSON object obj as a google.protobuf.Struct in wire
// form: byte for byte what proto.MarshalOptions{Deterministic: true} makes
// of structpb.NewStruct of what encoding/json decodes obj to (fields sorted
// by key, the last of a repeated key kept, numbers as float64, invalid
// UTF-8 and lone surrogates as U+FFFD). JSON null is the empty Struct. What
// encoding/json refuses (not an object, a number beyond float64, bad JSON)
// is refused with its error.
func FromJSON(obj []byte) ([]byte, error) {
	if out, ok := transcode(obj); ok {
		return out, nil
	}
	// Anything unusual (and every error) takes encoding/json's way, which
	// says what is wrong.
	return viaMaps(obj)
}

// transcode is FromJSON's one pass; false: obj is not JSON it takes.
func transcode(obj []byte) ([]byte, bool) {
	p := parsers.Get().(*parser)
	defer p.release()
	p.b, p.i = obj, 0
	p.space()
	if p.literal("null") {
		p.space()
		return nil, p.i == len(p.b)
	}
	out, ok := p.object(p.out[:0], 0)
	p.space()
	if !ok || p.i != len(p.b) {
		return nil, false
	}
	p.out = out
	if len(out) == 0 {
		return nil, true // {}, as proto.Marshal writes an empty Struct
	}
	return bytes.Clone(out), true
}

// parsers keeps parsers with their buffers: agentd transcodes every tool's
// result, and growing fresh buffers (and a copy of every nested list and
// object) was most of its allocations. object.set_transform's result:
// 3.1 µs and 34 allocations → 1.5 µs and one (BenchmarkFromJSON).
var parsers = sync.Pool{New: func() any { return new(parser) }}

// A pooled parser keeps a buffer of at most maxKept bytes, and at most
// maxKeptEntries entries per depth: a large result's buffers go with it.
const (
	maxKept        = 64 << 10
	maxKeptEntries = 1 << 10
)

func (p *parser) release() {
	p.b = nil
	if cap(p.out) > maxKept {
		p.out = nil
	}
	for i := range p.scratch {
		if cap(p.scratch[i].values) > maxKept || cap(p.scratch[i].entries) > maxKeptEntries {
			p.scratch[i].values, p.scratch[i].entries = nil, nil
		}
		clear(p.scratch[i].entries[:cap(p.scratch[i].entries)]) // keys point into the JSON
	}
	parsers.Put(p)
}

func viaMaps(obj []byte) ([]byte, error) {
	var m map[string]any
	if err := json.Unmarshal(obj, &m); err != nil {
		return nil, err
	}
	s, err := structpb.NewStruct(m)
	if err != nil {
		return nil, err
	}
	return proto.MarshalOptions{Deterministic: true}.Marshal(s)
}

// Field numbers of google.protobuf.Struct (fields: map<string, Value>
// entries), Value and ListValue.
const (
	structFields    = 1
	entryKey        = 1
	entryValue      = 2
	valueNull       = 1
	valueNumber     = 2
	valueString     = 3
	valueBool       = 4
	valueStruct     = 5
	valueList       = 6
	listValues      = 1
	maxDepth        = 16 // deeper goes the slow way: each level copies what it holds, so depth × size must stay small
	replacementRune = "\uFFFD"
)

// parser reads JSON; a method returns false on anything it does not take
// (FromJSON then falls back), never a partial answer.
type parser struct {
	b   []byte
	i   int
	out []byte // the Struct being written
	// scratch holds, per depth, the entries of the object being read there
	// and their values, to be written out sorted by key: one object is read
	// per depth at a time, and its buffers serve the next one.
	scratch [maxDepth + 1]struct {
		entries []entry
		values  []byte
	}
}

func (p *parser) space() {
	for p.i < len(p.b) {
		switch p.b[p.i] {
		case ' ', '\t', '\n', '\r':
			p.i++
		default:
			return
		}
	}
}

func (p *parser) literal(s string) bool {
	if strings.HasPrefix(string(p.b[p.i:min(len(p.b), p.i+len(s))]), s) {
		p.i += len(s)
		return true
	}
	return false
}

type entry struct {
	key        []byte
	start, end int // the Value's bytes in the object's buffer
}

// object appends the Struct of the object at p.i to out.
func (p *parser) object(out []byte, depth int) ([]byte, bool) {
	if depth > maxDepth || p.i >= len(p.b) || p.b[p.i] != '{' {
		return nil, false
	}
	p.i++
	p.space()
	if p.i < len(p.b) && p.b[p.i] == '}' {
		p.i++
		return out, true
	}
	scratch := &p.scratch[depth]
	entries, values := scratch.entries[:0], scratch.values[:0]
	for {
		p.space()
		key, ok := p.str()
		if !ok {
			return nil, false
		}
		p.space()
		if p.i >= len(p.b) || p.b[p.i] != ':' {
			return nil, false
		}
		p.i++
		p.space()
		start := len(values)
		if values, ok = p.value(values, depth+1); !ok {
			return nil, false
		}
		entries = append(entries, entry{key, start, len(values)})
		p.space()
		if p.i >= len(p.b) {
			return nil, false
		}
		if p.b[p.i] == '}' {
			p.i++
			break
		}
		if p.b[p.i] != ',' {
			return nil, false
		}
		p.i++
	}
	scratch.entries, scratch.values = entries, values // grown, for the next object at this depth
	// Sorted by key, the last of equal keys kept (a map's last assignment).
	slices.SortStableFunc(entries, func(a, b entry) int { return bytes.Compare(a.key, b.key) })
	for n, e := range entries {
		if n+1 < len(entries) && bytes.Equal(entries[n+1].key, e.key) {
			continue
		}
		v := values[e.start:e.end]
		size := protowire.SizeTag(entryKey) + protowire.SizeBytes(len(e.key)) + protowire.SizeTag(entryValue) + protowire.SizeBytes(len(v))
		out = protowire.AppendTag(out, structFields, protowire.BytesType)
		out = protowire.AppendVarint(out, uint64(size))
		out = protowire.AppendTag(out, entryKey, protowire.BytesType)
		out = protowire.AppendBytes(out, e.key)
		out = protowire.AppendTag(out, entryValue, protowire.BytesType)
		out = protowire.AppendBytes(out, v)
	}
	return out, true
}

// value appends the Value of the JSON value at p.i to out.
func (p *parser) value(out []byte, depth int) ([]byte, bool) {
	if p.i >= len(p.b) {
		return nil, false
	}
	switch c := p.b[p.i]; {
	case c == '{':
		out, at := openDelimited(out, valueStruct)
		out, ok := p.object(out, depth)
		return closeDelimited(out, at), ok
	case c == '[':
		out, at := openDelimited(out, valueList)
		out, ok := p.list(out, depth)
		return closeDelimited(out, at), ok
	case c == '"':
		s, ok := p.str()
		if !ok {
			return nil, false
		}
		return protowire.AppendBytes(protowire.AppendTag(out, valueString, protowire.BytesType), s), true
	case c == 't' && p.literal("true"), c == 'f' && p.literal("false"):
		return protowire.AppendVarint(protowire.AppendTag(out, valueBool, protowire.VarintType), protowire.EncodeBool(c == 't')), true
	case c == 'n' && p.literal("null"):
		return protowire.AppendVarint(protowire.AppendTag(out, valueNull, protowire.VarintType), 0), true
	case c == '-' || c >= '0' && c <= '9':
		f, ok := p.number()
		if !ok {
			return nil, false
		}
		return protowire.AppendFixed64(protowire.AppendTag(out, valueNumber, protowire.Fixed64Type), math.Float64bits(f)), true
	}
	return nil, false
}

// list appends the ListValue of the array at p.i to out.
func (p *parser) list(out []byte, depth int) ([]byte, bool) {
	if depth > maxDepth {
		return nil, false
	}
	p.i++ // '['
	p.space()
	if p.i < len(p.b) && p.b[p.i] == ']' {
		p.i++
		return out, true
	}
	for {
		p.space()
		var at int
		var ok bool
		out, at = openDelimited(out, listValues)
		if out, ok = p.value(out, depth+1); !ok {
			return nil, false
		}
		out = closeDelimited(out, at)
		p.space()
		if p.i >= len(p.b) {
			return nil, false
		}
		if p.b[p.i] == ']' {
			p.i++
			return out, true
		}
		if p.b[p.i] != ',' {
			return nil, false
		}
		p.i++
	}
}

// openDelimited appends the tag of a length-delimited field num and one
// byte for its length, at, which closeDelimited sets once the contents
// follow. Writing a nested message in place, instead of apart and then
// copied, spares the copy and the buffer, but for contents longer than 127
// bytes, whose length takes more room.
func openDelimited(out []byte, num protowire.Number) (_ []byte, at int) {
	out = protowire.AppendTag(out, num, protowire.BytesType)
	return append(out, 0), len(out)
}

func closeDelimited(out []byte, at int) []byte {
	if out == nil {
		return nil // the contents failed
	}
	n := len(out) - at - 1
	if n < 0x80 {
		out[at] = byte(n)
		return out
	}
	w := protowire.SizeVarint(uint64(n))
	out = append(out, make([]byte, w-1)...)
	copy(out[at+w:], out[at+1:at+1+n])
	protowire.AppendVarint(out[at:at], uint64(n))
	return out
}

// number reads a JSON number as encoding/json's float64 does.
func (p *parser) number() (float64, bool) {
	start := p.i
	if p.b[p.i] == '-' {
		p.i++
	}
	switch {
	case p.i < len(p.b) && p.b[p.i] == '0':
		p.i++
	case p.digits() == 0:
		return 0, false
	}
	if p.i < len(p.b) && p.b[p.i] == '.' {
		p.i++
		if p.digits() == 0 {
			return 0, false
		}
	}
	if p.i < len(p.b) && (p.b[p.i] == 'e' || p.b[p.i] == 'E') {
		p.i++
		if p.i < len(p.b) && (p.b[p.i] == '+' || p.b[p.i] == '-') {
			p.i++
		}
		if p.digits() == 0 {
			return 0, false
		}
	}
	f, err := strconv.ParseFloat(string(p.b[start:p.i]), 64)
	return f, err == nil
}

func (p *parser) digits() int {
	start := p.i
	for p.i < len(p.b) && p.b[p.i] >= '0' && p.b[p.i] <= '9' {
		p.i++
	}
	return p.i - start
}

// str reads a JSON string as encoding/json unquotes it.
func (p *parser) str() ([]byte, bool) {
	if p.i >= len(p.b) || p.b[p.i] != '"' {
		return nil, false
	}
	p.i++
	start := p.i
	for p.i < len(p.b) {
		switch c := p.b[p.i]; {
		case c == '"':
			s := p.b[start:p.i:p.i]
			p.i++
			return s, true
		case c == '\\' || c < ' ' || c >= utf8.RuneSelf:
			return p.strSlow(start)
		}
		p.i++
	}
	return nil, false
}

// strSlow unquotes a string with escapes or non-ASCII bytes, from start (just
// after its opening quote), as encoding/json's unquote does.
func (p *parser) strSlow(start int) ([]byte, bool) {
	p.i = start
	var s []byte
	for p.i < len(p.b) {
		c := p.b[p.i]
		switch {
		case c == '"':
			p.i++
			return s, true
		case c < ' ':
			return nil, false
		case c == '\\':
			if p.i+1 >= len(p.b) {
				return nil, false
			}
			e := p.b[p.i+1]
			p.i += 2
			switch e {
			case '"', '\\', '/':
				s = append(s, e)
			case 'b':
				s = append(s, '\b')
			case 'f':
				s = append(s, '\f')
			case 'n':
				s = append(s, '\n')
			case 'r':
				s = append(s, '\r')
			case 't':
				s = append(s, '\t')
			case 'u':
				r, ok := p.hex4()
				if !ok {
					return nil, false
				}
				if utf16.IsSurrogate(r) {
					save := p.i
					if p.literal(`\u`) {
						if r2, ok := p.hex4(); ok {
							if d := utf16.DecodeRune(r, r2); d != utf8.RuneError {
								s = utf8.AppendRune(s, d)
								continue
							}
						}
					}
					p.i = save // not a pair: the second escape is read on its own
					r = utf8.RuneError
				}
				s = utf8.AppendRune(s, r)
			default:
				return nil, false
			}
		case c < utf8.RuneSelf:
			s = append(s, c)
			p.i++
		default:
			r, size := utf8.DecodeRune(p.b[p.i:])
			if r == utf8.RuneError && size == 1 {
				s = append(s, replacementRune...)
			} else {
				s = append(s, p.b[p.i:p.i+size]...)
			}
			p.i += size
		}
	}
	return nil, false
}

func (p *parser) hex4() (rune, bool) {
	if p.i+4 > len(p.b) {
		return 0, false
	}
	var r rune
	for _, c := range p.b[p.i : p.i+4] {
		switch {
		case c >= '0' && c <= '9':
			c -= '0'
		case c >= 'a' && c <= 'f':
			c = c - 'a' + 10
		case c >= 'A' && c <= 'F':
			c = c - 'A' + 10
		default:
			return 0, false
		}
		r = r*16 + rune(c)
	}
	p.i += 4
	return r, true
}
