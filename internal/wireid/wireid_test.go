package wireid

import (
	"math/rand/v2"
	"regexp"
	"strings"
	"testing"
)

// TestAgreesWithPatterns holds Valid and ValidSession to the regular
// expressions the protos state, over ids built from good and bad parts.
func TestAgreesWithPatterns(t *testing.T) {
	id, session := regexp.MustCompile(Pattern), regexp.MustCompile(SessionPattern)
	parts := []string{"a", "Z", "0", "_", ".", "..", ":", "-", "/", "\\", " ", "é", "\x00", "\n", strings.Repeat("x", 60)}
	r := rand.New(rand.NewPCG(1, 2))
	cases := []string{"", ".", "..", ".a", "a.", "a..b", "s-0a1b", strings.Repeat("a", 128), strings.Repeat("a", 129)}
	for range 20000 {
		var b strings.Builder
		for range r.IntN(5) {
			b.WriteString(parts[r.IntN(len(parts))])
		}
		cases = append(cases, b.String())
	}
	for _, c := range cases {
		if Valid(c) != id.MatchString(c) {
			t.Errorf("Valid(%q) = %v, the pattern says %v", c, Valid(c), id.MatchString(c))
		}
		if ValidSession(c) != session.MatchString(c) {
			t.Errorf("ValidSession(%q) = %v, the pattern says %v", c, ValidSession(c), session.MatchString(c))
		}
	}
}
