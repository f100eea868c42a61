package auth

import (
	"errors"
	"regexp"
	"strings"
	"testing"
)

var secretFormat = regexp.MustCompile(`^bpt_[A-Za-z0-9_-]{43}$`)

func TestNewSecret(t *testing.T) {
	seen := map[string]bool{}
	for range 100 {
		s, err := NewSecret()
		if err != nil {
			t.Fatal(err)
		}
		if !secretFormat.MatchString(s) || !validSecret(s) {
			t.Fatalf("NewSecret() = %q, not the format", s)
		}
		if seen[s] {
			t.Fatalf("NewSecret() repeated %q", s)
		}
		seen[s] = true
		got, err := ParseBearer([]string{"Bearer " + s})
		if err != nil || got != s {
			t.Fatalf("ParseBearer(Bearer %s) = %q, %v", s, got, err)
		}
	}
}

func TestHashSecret(t *testing.T) {
	// printf bpt_test | sha256sum
	const want = "b53260201835e6d40e1be5ffb27dc5aa630ee38cded5b445dad6e6d328ded013"
	got := HashSecret("bpt_test")
	if len(got) != 64 || strings.ToLower(got) != got {
		t.Fatalf("HashSecret = %q, want 64 lower-case hex digits", got)
	}
	if got != want {
		t.Fatalf("HashSecret(bpt_test) = %s, want %s", got, want)
	}
	if HashSecret("bpt_test") != got || HashSecret("bpt_tesT") == got {
		t.Fatal("HashSecret is not a function of its input alone")
	}
}

func TestParseBearer(t *testing.T) {
	good, err := NewSecret()
	if err != nil {
		t.Fatal(err)
	}
	// All 32 bytes zero and all one: the extremes of the alphabet.
	zeros := "bpt_" + strings.Repeat("A", 43)
	ones := "bpt_" + strings.Repeat("_", 42) + "w"
	tests := []struct {
		name   string
		values []string
		want   string
		err    error
	}{
		{"bearer", []string{"Bearer " + good}, good, nil},
		{"scheme in any case", []string{"bEaReR " + good}, good, nil},
		{"lower-case scheme", []string{"bearer " + zeros}, zeros, nil},
		{"all ones", []string{"BEARER " + ones}, ones, nil},
		{"no header", nil, "", ErrNoToken},
		{"empty list", []string{}, "", ErrNoToken},
		{"empty value", []string{""}, "", ErrMalformedToken},
		{"two values", []string{"Bearer " + good, "Bearer " + good}, "", ErrMalformedToken},
		{"no scheme", []string{good}, "", ErrMalformedToken},
		{"basic scheme", []string{"Basic " + good}, "", ErrMalformedToken},
		{"scheme only", []string{"Bearer"}, "", ErrMalformedToken},
		{"scheme and space", []string{"Bearer "}, "", ErrMalformedToken},
		{"two spaces", []string{"Bearer  " + good}, "", ErrMalformedToken},
		{"tab", []string{"Bearer\t" + good}, "", ErrMalformedToken},
		{"leading space", []string{" Bearer " + good}, "", ErrMalformedToken},
		{"trailing space", []string{"Bearer " + good + " "}, "", ErrMalformedToken},
		{"trailing newline", []string{"Bearer " + good + "\n"}, "", ErrMalformedToken},
		{"Kelvin-sign look-alike scheme", []string{"Bearer\u212a " + good}, "", ErrMalformedToken},
		{"other prefix", []string{"Bearer xyz_" + good[4:]}, "", ErrMalformedToken},
		{"upper-case prefix", []string{"Bearer BPT_" + good[4:]}, "", ErrMalformedToken},
		{"short", []string{"Bearer " + good[:len(good)-1]}, "", ErrMalformedToken},
		{"long", []string{"Bearer " + good + "A"}, "", ErrMalformedToken},
		{"padded", []string{"Bearer " + good[:len(good)-1] + "="}, "", ErrMalformedToken},
		{"standard alphabet", []string{"Bearer bpt_" + strings.Repeat("+", 42) + "A"}, "", ErrMalformedToken},
		{"newline inside", []string{"Bearer bpt_" + strings.Repeat("A", 21) + "\n" + strings.Repeat("A", 21)}, "", ErrMalformedToken},
		// 43 characters carry 258 bits; the last 2 must be zero.
		{"non-canonical last character", []string{"Bearer bpt_" + strings.Repeat("A", 42) + "B"}, "", ErrMalformedToken},
		{"huge", []string{"Bearer " + strings.Repeat("A", 1<<20)}, "", ErrMalformedToken},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseBearer(tt.values)
			if !errors.Is(err, tt.err) || (err == nil) != (tt.err == nil) {
				t.Fatalf("ParseBearer = %q, %v; want error %v", got, err, tt.err)
			}
			if got != tt.want {
				t.Fatalf("ParseBearer = %q, want %q", got, tt.want)
			}
			if err != nil && (errors.Is(err, ErrNoToken) == errors.Is(err, ErrMalformedToken)) {
				t.Fatalf("%v is not exactly one of the sentinels", err)
			}
			if err != nil && strings.Contains(err.Error(), good[4:]) {
				t.Fatalf("error %q repeats the secret", err)
			}
		})
	}
}

func TestASCIIEqualFold(t *testing.T) {
	for _, tt := range []struct {
		a, b string
		want bool
	}{
		{"bearer", "bearer", true},
		{"BeArEr", "bearer", true},
		{"bearer", "bearers", false},
		{"bearez", "bearer", false},
		{"[", "{", false}, // 0x5b and 0x7b differ by 0x20 but are not letters
		{"", "", true},
	} {
		if got := asciiEqualFold(tt.a, tt.b); got != tt.want {
			t.Errorf("asciiEqualFold(%q, %q) = %v", tt.a, tt.b, got)
		}
	}
}
