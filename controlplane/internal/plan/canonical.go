package plan

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"hash"

	"github.com/blendplane/blendplane/internal/jcs"
)

// CanonicalJSON encodes a JSON value (as encoding/json decodes into any:
// nil, bool, float64, string, []any, map[string]any; also json.Number and
// Go integers) so that equal values give equal bytes. It follows RFC 8785
// (JCS): object keys sorted by their UTF-16 code units, no insignificant
// whitespace, minimal string escapes, and numbers written as
// ECMAScript does: 1.0 → 1, -0 → 0, 1e21 → 1e+21, 1e-7 → 1e-7. Go integers
// are written exactly, even beyond 2^53.
//
// It fails on NaN, infinities, invalid UTF-8 and any other Go type.
func CanonicalJSON(v any) ([]byte, error) {
	return jcs.Marshal(v)
}

// IdempotencyKey is the key under which agents journal an operation:
//
//	hex(sha256(u64(len(requestID)) ‖ requestID ‖ u64(len(operationID)) ‖ operationID ‖ u64(len(c)) ‖ c))
//
// where c = CanonicalJSON(args), a nil args encodes as {}, and u64 is 8 bytes
// big-endian. The length prefixes make the framing unambiguous. Args that
// passed [Check] always canonicalize; others still get a stable key.
func IdempotencyKey(requestID, operationID string, args map[string]any) string {
	h := sha256.New()
	writeField(h, []byte(requestID))
	writeField(h, []byte(operationID))
	writeField(h, canonicalArgs(args))
	return hex.EncodeToString(h.Sum(nil))
}

// Digest is the hex SHA-256 of a whole plan's content: the atomic flag and
// every operation in the given order with all of its fields (depends_on in
// the given order too). A retried request_id whose Digest differs is a
// different plan under a reused id.
func Digest(ops []Operation, atomic bool) string {
	h := sha256.New()
	h.Write([]byte("blendplane.plan.v1\x00"))
	if atomic {
		h.Write([]byte{1})
	} else {
		h.Write([]byte{0})
	}
	writeUint(h, uint64(len(ops)))
	for _, op := range ops {
		writeField(h, []byte(op.ID))
		writeField(h, []byte(op.Tool))
		writeField(h, canonicalArgs(op.Args))
		writeUint(h, uint64(len(op.DependsOn)))
		for _, d := range op.DependsOn {
			writeField(h, []byte(d))
		}
		writeUint(h, uint64(int64(op.Safety)))
		if op.Verify {
			h.Write([]byte{1})
		} else {
			h.Write([]byte{0})
		}
	}
	return hex.EncodeToString(h.Sum(nil))
}

func writeUint(h hash.Hash, n uint64) {
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], n)
	h.Write(b[:])
}

func writeField(h hash.Hash, b []byte) {
	writeUint(h, uint64(len(b)))
	h.Write(b)
}

// canonicalArgs is CanonicalJSON for hashing: it never fails. Values that
// are not plain JSON (which Check refuses) are written in a lenient form that
// is still deterministic.
func canonicalArgs(args map[string]any) []byte {
	if args == nil {
		return []byte("{}")
	}
	b, _ := jcs.Append(nil, args, false)
	return b
}
