package journal

import "hash/maphash"

// keyIndex finds a session's records by idempotency key: the sequence of
// each key's record under a 64-bit hash of the key, about 25 bytes a record
// (a key itself is 64; a map of them held 100 bytes a record). Readers
// check the key of the record they find (getRecord, hasRecord), so an entry
// may be stale. Two committed keys of one session with the same hash (odds
// about n²/2⁶⁵ in n records) cannot share an entry: the later goes to
// overflow, by its whole key.
type keyIndex struct {
	byHash   map[uint64]uint64
	overflow map[string]uint64
}

func newKeyIndex() *keyIndex { return &keyIndex{byHash: map[uint64]uint64{}} }

// hashKey is the index's hash, seeded once per process: the index is
// rebuilt from the records whenever the journal opens. (A variable: tests
// make every key collide.)
var hashKey = func() func(string) uint64 {
	seed := maphash.MakeSeed()
	return func(key string) uint64 { return maphash.String(seed, key) }
}()

// get returns the sequence of key's record as far as the index knows (0:
// none).
func (x *keyIndex) get(key string) uint64 {
	if seq, ok := x.overflow[key]; ok {
		return seq
	}
	return x.byHash[hashKey(key)]
}

// set says key's record is at seq. keyAt reads the key of the record at a
// sequence ("" if there is none): an entry that holds the record of
// another key of the same hash keeps it, and key goes to overflow; a stale
// one (no record there, or one of a key of another hash) is replaced.
func (x *keyIndex) set(key string, seq uint64, keyAt func(uint64) string) {
	if _, ok := x.overflow[key]; ok {
		x.overflow[key] = seq
		return
	}
	h := hashKey(key)
	if was, ok := x.byHash[h]; ok && was != seq {
		if other := keyAt(was); other != "" && other != key && hashKey(other) == h {
			if x.overflow == nil {
				x.overflow = map[string]uint64{}
			}
			x.overflow[key] = seq
			return
		}
	}
	x.byHash[h] = seq
}
