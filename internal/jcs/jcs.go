// Package jcs is the JSON Canonicalization Scheme (RFC 8785) for the JSON
// values encoding/json decodes into any: equal values give equal bytes.
// Plans hash with it (package plan) and lesson signatures are made over it.
package jcs

import (
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Marshal encodes a JSON value (nil, bool, float64, string, []any,
// map[string]any; also json.Number and Go integers) canonically: object
// keys sorted by their UTF-16 code units, no insignificant whitespace,
// minimal string escapes, and numbers written as ECMAScript does: 1.0 → 1,
// -0 → 0, 1e21 → 1e+21, 1e-7 → 1e-7. Go integers are written exactly, even
// beyond 2^53. It fails on NaN, infinities, invalid UTF-8 and any other Go
// type.
func Marshal(v any) ([]byte, error) { return Append(nil, v, true) }

// canonItem is one entry of the encoder's work stack: a value to encode,
// an object's key to write (with the comma before it unless it is the
// first), or a literal.
type canonItem struct {
	kind itemKind
	s    string // the key or the literal
	val  any
}

type itemKind uint8

const (
	itemValue itemKind = iota
	itemLit
	itemKey      // "key":
	itemNextKey  // ,"key":
	itemNextItem // , before an array's next element
)

// Append appends v's canonical encoding to dst (Marshal), with an explicit stack instead of recursion. In
// lenient mode it writes what strict mode refuses: NaN and ±Infinity as
// bare words, invalid UTF-8 as raw bytes, other Go types with %#v.
func Append(dst []byte, v any, strict bool) ([]byte, error) {
	stack := make([]canonItem, 1, 32)
	stack[0] = canonItem{val: v}
	for len(stack) > 0 {
		it := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		switch it.kind {
		case itemLit:
			dst = append(dst, it.s...)
			continue
		case itemNextItem:
			dst = append(dst, ',')
			continue
		case itemNextKey, itemKey:
			if it.kind == itemNextKey {
				dst = append(dst, ',')
			}
			var err error
			if dst, err = appendString(dst, it.s, strict); err != nil {
				return nil, err
			}
			dst = append(dst, ':')
			continue
		}
		switch x := it.val.(type) {
		case nil:
			dst = append(dst, "null"...)
		case bool:
			dst = strconv.AppendBool(dst, x)
		case string:
			var err error
			if dst, err = appendString(dst, x, strict); err != nil {
				return nil, err
			}
		case float64:
			var err error
			if dst, err = appendFloat(dst, x, strict); err != nil {
				return nil, err
			}
		case float32:
			var err error
			if dst, err = appendFloat(dst, float64(x), strict); err != nil {
				return nil, err
			}
		case json.Number:
			f, err := strconv.ParseFloat(string(x), 64)
			if err != nil {
				if strict {
					return nil, fmt.Errorf("plan: canonical JSON: number %q: %w", string(x), err)
				}
				dst = append(dst, string(x)...)
				continue
			}
			if dst, err = appendFloat(dst, f, strict); err != nil {
				return nil, err
			}
		case int:
			dst = strconv.AppendInt(dst, int64(x), 10)
		case int8:
			dst = strconv.AppendInt(dst, int64(x), 10)
		case int16:
			dst = strconv.AppendInt(dst, int64(x), 10)
		case int32:
			dst = strconv.AppendInt(dst, int64(x), 10)
		case int64:
			dst = strconv.AppendInt(dst, x, 10)
		case uint:
			dst = strconv.AppendUint(dst, uint64(x), 10)
		case uint8:
			dst = strconv.AppendUint(dst, uint64(x), 10)
		case uint16:
			dst = strconv.AppendUint(dst, uint64(x), 10)
		case uint32:
			dst = strconv.AppendUint(dst, uint64(x), 10)
		case uint64:
			dst = strconv.AppendUint(dst, x, 10)
		case []any:
			dst = append(dst, '[')
			stack = append(stack, canonItem{kind: itemLit, s: "]"})
			for i := len(x) - 1; i >= 0; i-- {
				stack = append(stack, canonItem{val: x[i]})
				if i > 0 {
					stack = append(stack, canonItem{kind: itemNextItem})
				}
			}
		case map[string]any:
			keys := make([]string, 0, len(x))
			for k := range x {
				keys = append(keys, k)
			}
			slices.SortFunc(keys, compareUTF16)
			dst = append(dst, '{')
			stack = append(stack, canonItem{kind: itemLit, s: "}"})
			for i := len(keys) - 1; i >= 0; i-- {
				k := keys[i]
				stack = append(stack, canonItem{val: x[k]})
				kind := itemNextKey
				if i == 0 {
					kind = itemKey
				}
				stack = append(stack, canonItem{kind: kind, s: k})
			}
		default:
			if strict {
				return nil, fmt.Errorf("plan: canonical JSON: unsupported type %T", x)
			}
			dst = fmt.Appendf(dst, "%#v", x)
		}
	}
	return dst, nil
}

// appendFloat writes f as ECMAScript's Number.prototype.toString does, the
// form RFC 8785 requires.
func appendFloat(dst []byte, f float64, strict bool) ([]byte, error) {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		if strict {
			return nil, fmt.Errorf("plan: canonical JSON: %v is not a JSON number", f)
		}
		return strconv.AppendFloat(dst, f, 'g', -1, 64), nil // NaN, +Inf, -Inf
	}
	if f == 0 {
		return append(dst, '0'), nil // also -0
	}
	abs := math.Abs(f)
	format := byte('f')
	if abs < 1e-6 || abs >= 1e21 {
		format = 'e'
	}
	n := len(dst)
	dst = strconv.AppendFloat(dst, f, format, -1, 64)
	if format == 'e' {
		// Go writes 1e-07 where ECMAScript writes 1e-7.
		if m := len(dst); m-n >= 4 && dst[m-4] == 'e' && dst[m-3] == '-' && dst[m-2] == '0' {
			dst[m-2] = dst[m-1]
			dst = dst[:m-1]
		} else if m-n >= 4 && dst[m-4] == 'e' && dst[m-3] == '+' && dst[m-2] == '0' {
			dst[m-2] = dst[m-1]
			dst = dst[:m-1]
		}
	}
	return dst, nil
}

const hexDigits = "0123456789abcdef"

// AppendString appends s as a canonical JSON string; it fails on invalid
// UTF-8.
func AppendString(dst []byte, s string) ([]byte, error) { return appendString(dst, s, true) }

// AppendFields appends `,"name":"value"` for each field whose value is not
// empty: the string fields of an object written by hand, as encoding/json
// writes those tagged omitempty (names are written as they are).
func AppendFields(dst []byte, fields ...[2]string) ([]byte, error) {
	var err error
	for _, f := range fields {
		if f[1] == "" {
			continue
		}
		dst = append(append(append(dst, `,"`...), f[0]...), `":`...)
		if dst, err = appendString(dst, f[1], true); err != nil {
			return nil, err
		}
	}
	return dst, nil
}

// appendString writes s with only the escapes RFC 8785 requires.
func appendString(dst []byte, s string, strict bool) ([]byte, error) {
	if strict && !utf8.ValidString(s) {
		return nil, fmt.Errorf("plan: canonical JSON: string %q is not valid UTF-8", s)
	}
	dst = append(dst, '"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"':
			dst = append(dst, '\\', '"')
		case c == '\\':
			dst = append(dst, '\\', '\\')
		case c >= 0x20:
			dst = append(dst, c)
		case c == '\b':
			dst = append(dst, '\\', 'b')
		case c == '\t':
			dst = append(dst, '\\', 't')
		case c == '\n':
			dst = append(dst, '\\', 'n')
		case c == '\f':
			dst = append(dst, '\\', 'f')
		case c == '\r':
			dst = append(dst, '\\', 'r')
		default:
			dst = append(dst, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
		}
	}
	return append(dst, '"'), nil
}

// compareUTF16 orders strings by their UTF-16 code units, as RFC 8785 sorts
// object keys. That is rune order, except that runes U+E000..U+FFFF sort
// after every rune beyond the BMP (whose surrogates are 0xD800..0xDFFF).
func compareUTF16(a, b string) int {
	i, j := 0, 0
	for i < len(a) && j < len(b) {
		if a[i] < utf8.RuneSelf && b[j] < utf8.RuneSelf {
			if a[i] != b[j] {
				return int(a[i]) - int(b[j])
			}
			i++
			j++
			continue
		}
		ra, na := utf8.DecodeRuneInString(a[i:])
		rb, nb := utf8.DecodeRuneInString(b[j:])
		if ka, kb := utf16Key(ra), utf16Key(rb); ka != kb {
			return ka - kb
		}
		i += na
		j += nb
	}
	if i < len(a) || j < len(b) {
		return (len(a) - i) - (len(b) - j)
	}
	// Equal as runes; only invalid UTF-8 (lenient mode) gets here unequal.
	return strings.Compare(a, b)
}

func utf16Key(r rune) int {
	if r >= 0xE000 && r <= 0xFFFF {
		return int(r) + 0x200000
	}
	return int(r)
}
