package auth

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
)

// A token's secret is secretPrefix followed by secretBytes random bytes in
// unpadded base64url. The prefix lets secret scanners and people recognise a
// leaked Blendplane token.
const (
	secretPrefix = "bpt_"
	secretBytes  = 32
	secretLen    = len(secretPrefix) + (secretBytes*8+5)/6 // 4 + 43
	bearerScheme = "bearer"
)

var (
	// ErrNoToken: the call carries no authorization header.
	ErrNoToken = errors.New("no bearer token")
	// ErrMalformedToken: an authorization header that is not exactly one
	// "Bearer bpt_…" token.
	ErrMalformedToken = errors.New("malformed bearer token")
)

// NewSecret returns a new token secret: "bpt_" and 256 random bits in
// unpadded base64url (47 characters).
func NewSecret() (string, error) {
	var b [secretBytes]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("token secret: %w", err)
	}
	return secretPrefix + base64.RawURLEncoding.EncodeToString(b[:]), nil
}

// HashSecret is what the control plane stores of a secret, and what it looks
// tokens up by: hex SHA-256. A lookup by hash may take time that depends on
// the hash (map or B+tree key comparisons), which is harmless: what it could
// leak is how much of a guess's hash matches a stored hash, and with
// 256-bit random secrets that does not help find a secret that hashes to
// it. So neither a slow password hash nor a constant-time compare is needed.
func HashSecret(secret string) string {
	sum := sha256.Sum256([]byte(secret))
	return hex.EncodeToString(sum[:])
}

// ParseBearer returns the secret of the "authorization" values of a gRPC
// call's metadata or an HTTP request's headers. It takes exactly one value
// of the form "Bearer <secret>": the scheme in any case, one space, then a
// secret in exactly the format of [NewSecret]. No values is [ErrNoToken];
// anything else, an empty value included, is [ErrMalformedToken]. Errors
// never repeat the value: it may be a secret sent by mistake.
func ParseBearer(values []string) (secret string, err error) {
	switch len(values) {
	case 0:
		return "", ErrNoToken
	case 1:
	default:
		return "", fmt.Errorf("%w: %d authorization values, want one", ErrMalformedToken, len(values))
	}
	v := values[0]
	n := len(bearerScheme)
	if len(v) <= n || !asciiEqualFold(v[:n], bearerScheme) || v[n] != ' ' {
		return "", fmt.Errorf(`%w: want "Bearer <token>"`, ErrMalformedToken)
	}
	secret = v[n+1:]
	if !validSecret(secret) {
		return "", fmt.Errorf("%w: not a Blendplane token (%s and %d base64url characters)", ErrMalformedToken, secretPrefix, secretLen-len(secretPrefix))
	}
	return secret, nil
}

// validSecret reports whether s is exactly what NewSecret makes: the
// prefix, then the canonical unpadded base64url encoding of 32 bytes.
func validSecret(s string) bool {
	if len(s) != secretLen || s[:len(secretPrefix)] != secretPrefix {
		return false
	}
	body := s[len(secretPrefix):]
	for i := 0; i < len(body); i++ {
		// The decoder below skips '\r' and '\n'; check the alphabet first.
		if c := body[i]; !('A' <= c && c <= 'Z' || 'a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	// Strict: the last character's unused low bits must be zero, so that
	// each secret has exactly one spelling.
	b, err := base64.RawURLEncoding.Strict().DecodeString(body)
	return err == nil && len(b) == secretBytes
}

// asciiEqualFold is strings.EqualFold for ASCII only: Unicode folding would
// let look-alike characters (such as U+212A, the Kelvin sign, for "k")
// through.
func asciiEqualFold(a, b string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := 0; i < len(a); i++ {
		if lower(a[i]) != lower(b[i]) {
			return false
		}
	}
	return true
}

func lower(c byte) byte {
	if 'A' <= c && c <= 'Z' {
		return c + 'a' - 'A'
	}
	return c
}
