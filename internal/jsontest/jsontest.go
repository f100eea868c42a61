// Package jsontest makes random JSON values for tests that hold a hand-written
// encoder or decoder to encoding/json's: every kind of value, nested, with
// strings that need escapes and numbers of every size.
package jsontest

import (
	"math"
	"math/rand/v2"
)

// Strings are the strings values and keys are made of: empty, escapes,
// HTML, control and line-separator characters, multi-byte runes.
var Strings = []string{"", "a", "Cube.001", `quote " and \ back`, "<b>&amp;</b>", "line\nbreak\ttab\x01", "\u2028\u2029",
	"é ü 日本", "emoji 🎬", "\uffff"}

// Numbers are the numbers values are made of: signed zeros, fractions,
// the exponent boundaries of JSON's shortest forms, extremes.
var Numbers = []float64{0, math.Copysign(0, -1), 1, -7, 0.5, 0.1, 1.0 / 3, 1e-7, 1e-6, 1.5e-9, 123456789.125, 1e20, 1e21,
	1 << 53, 3.4e300, -2.5e-300, math.MaxFloat64}

// maxDepth is how deep objects and lists nest.
const maxDepth = 3

// Value is a random JSON value as encoding/json decodes one into an any:
// nil, bool, string, float64, []any or map[string]any, nested up to
// maxDepth levels below depth 0.
func Value(r *rand.Rand, depth int) any {
	switch k := r.IntN(7); {
	case k == 0:
		return nil
	case k == 1:
		return r.IntN(2) == 0
	case k == 2:
		return Strings[r.IntN(len(Strings))]
	case k == 3 || depth >= maxDepth:
		return Numbers[r.IntN(len(Numbers))]
	case k == 4:
		l := make([]any, r.IntN(4))
		for i := range l {
			l[i] = Value(r, depth+1)
		}
		return l
	default:
		return Object(r, depth)
	}
}

// Object is a random JSON object of up to four members, keys made of two
// Strings each.
func Object(r *rand.Rand, depth int) map[string]any {
	m := map[string]any{}
	for range r.IntN(5) {
		m[Strings[r.IntN(len(Strings))]+Strings[r.IntN(len(Strings))]] = Value(r, depth+1)
	}
	return m
}
