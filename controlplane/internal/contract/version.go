package contract

import (
	"fmt"
	"strconv"
	"strings"
)

// Range is a Blender version range: comparisons joined by commas, all of
// which must hold, e.g. ">=3.4,<5.0". The empty range holds every version.
type Range struct {
	terms []term
}

type term struct {
	op string
	v  [3]int
}

// ParseRange parses a range such as ">=4.2", "<4", ">=3.4,<4.0" or "==4.5.15".
func ParseRange(s string) (Range, error) {
	var r Range
	if strings.TrimSpace(s) == "" {
		return r, nil
	}
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		op := ""
		for _, candidate := range []string{">=", "<=", "==", ">", "<", "="} {
			if strings.HasPrefix(part, candidate) {
				op = candidate
				break
			}
		}
		if op == "" {
			return Range{}, fmt.Errorf("%q: start each comparison with >=, >, <=, < or ==", part)
		}
		v, err := parseVersion(strings.TrimSpace(part[len(op):]))
		if err != nil {
			return Range{}, err
		}
		if op == "=" {
			op = "=="
		}
		r.terms = append(r.terms, term{op, v})
	}
	return r, nil
}

// Contains reports whether a Blender version ("4.5.15", "3.4.1") is in range.
func (r Range) Contains(version string) bool {
	v, err := parseVersion(version)
	if err != nil {
		return len(r.terms) == 0
	}
	for _, t := range r.terms {
		c := compare(v, t.v)
		ok := map[string]bool{">=": c >= 0, ">": c > 0, "<=": c <= 0, "<": c < 0, "==": c == 0}[t.op]
		if !ok {
			return false
		}
	}
	return true
}

func parseVersion(s string) ([3]int, error) {
	var v [3]int
	parts := strings.Split(s, ".")
	if len(parts) == 0 || len(parts) > 3 {
		return v, fmt.Errorf("version %q: want MAJOR[.MINOR[.PATCH]]", s)
	}
	for i, p := range parts {
		n, err := strconv.Atoi(p)
		if err != nil || n < 0 {
			return v, fmt.Errorf("version %q: want MAJOR[.MINOR[.PATCH]]", s)
		}
		v[i] = n
	}
	return v, nil
}

func compare(a, b [3]int) int {
	for i := range a {
		if a[i] != b[i] {
			if a[i] < b[i] {
				return -1
			}
			return 1
		}
	}
	return 0
}
