package store

import (
	"bytes"
	"fmt"
	"time"

	bolt "go.etcd.io/bbolt"
	"google.golang.org/protobuf/proto"

	cpv1 "github.com/blendplane/blendplane/gen/blendplane/controlplane/v1"
)

// PutArtifact records a version of a session's file. A version equal to the
// name's newest one (same content, same receipt) is not recorded twice: the
// stored one is returned, so replays and retries add nothing, with the
// later of the two landing times (the same upload sent again landed
// anew). It becomes the name's newest unless it landed before that one
// (Supersedes). A version recorded again while another is the newest (the
// same upload sent after an export, a receipt collected again) is a new
// record, listed where it landed, but its bytes count once toward its
// owner's quota: a version is a name and its content. They count once the
// control plane keeps the content: a version left on its agent
// (LeftOnAgent) counts when recorded kept, or at Keep.
func (s *Store) PutArtifact(a *cpv1.Artifact) (*cpv1.Artifact, error) {
	out := a
	err := s.update(func(tx *bolt.Tx) error {
		list, err := tx.Bucket(bucketArtifacts).CreateBucketIfNotExists([]byte(a.GetSessionId()))
		if err != nil {
			return err
		}
		names, err := tx.Bucket(bucketArtifactNames).CreateBucketIfNotExists([]byte(a.GetSessionId()))
		if err != nil {
			return err
		}
		versions, err := tx.Bucket(bucketArtifactVersion).CreateBucketIfNotExists([]byte(a.GetSessionId()))
		if err != nil {
			return err
		}
		var newest *cpv1.Artifact
		if seq := names.Get([]byte(a.GetName())); seq != nil {
			newest = &cpv1.Artifact{}
			if err := getProto(list, seq, newest); err != nil {
				return err
			}
			if newest.GetSha256() == a.GetSha256() && newest.GetRequestId() == a.GetRequestId() && newest.GetOperationId() == a.GetOperationId() {
				out = newest
				if v, ok := readVersion(versions, a.GetName(), a.GetSha256()); ok && !v.kept && !a.GetLeftOnAgent() { // kept this time
					if err := putVersion(tx, versions, a, v); err != nil {
						return err
					}
				}
				withKept(versions, newest)
				if newest.GetCreateTime() != nil && !Supersedes(newest, a) { // a landed later
					newest.CreateTime = a.GetCreateTime()
					return putProto(list, seq, newest)
				}
				return nil
			}
		}
		seq, err := list.NextSequence()
		if err != nil {
			return err
		}
		if err := putProto(list, u64(seq), a); err != nil {
			return err
		}
		if err := addRef(tx, a.GetSha256(), 1); err != nil {
			return err
		}
		if err := addVersion(tx, versions, a, u64(seq)); err != nil {
			return err
		}
		if newest != nil && !Supersedes(a, newest) {
			return nil
		}
		return names.Put([]byte(a.GetName()), u64(seq))
	})
	return out, err
}

// Supersedes says whether version a of a file, recorded after version
// newest, is the newer: unless both say when they landed in the session's
// sandbox and a landed first. An upload's record can come first though it
// landed after a running call that wrote its name (it waits for the call),
// the receipt's file being recorded once fetched.
func Supersedes(a, newest *cpv1.Artifact) bool {
	at, nt := a.GetCreateTime(), newest.GetCreateTime()
	return at == nil || nt == nil || !at.AsTime().Before(nt.AsTime())
}

// versionKey names a version of a session's file in its versions bucket
// (file names hold no NUL).
func versionKey(name, sha256 string) []byte {
	return []byte(name + "\x00" + sha256)
}

// version is the index entry of a version of a session's file: the
// position of its last record, and whether the control plane keeps its
// content (its bytes count toward the owner's quota then).
type version struct {
	seq  []byte
	kept bool
}

func readVersion(versions *bolt.Bucket, name, sha256 string) (version, bool) {
	if versions == nil {
		return version{}, false
	}
	v := versions.Get(versionKey(name, sha256))
	if len(v) < 8 {
		return version{}, false
	}
	return version{seq: v[:8], kept: len(v) > 8 && v[8] == 1}, true
}

// putVersion stores v as the entry of a's version, kept (its bytes
// counted) when a's content is kept and v's was not yet.
func putVersion(tx *bolt.Tx, versions *bolt.Bucket, a *cpv1.Artifact, v version) error {
	if !v.kept && !a.GetLeftOnAgent() {
		if err := addOwnerBytes(tx, a.GetSessionId(), a.GetSizeBytes()); err != nil {
			return err
		}
		v.kept = true
	}
	flag := byte(0)
	if v.kept {
		flag = 1
	}
	return versions.Put(versionKey(a.GetName(), a.GetSha256()), append(bytes.Clone(v.seq[:8]), flag))
}

// addVersion points a's version at its record at position seq, the last
// one recorded.
func addVersion(tx *bolt.Tx, versions *bolt.Bucket, a *cpv1.Artifact, seq []byte) error {
	v, _ := readVersion(versions, a.GetName(), a.GetSha256())
	v.seq = seq
	return putVersion(tx, versions, a, v)
}

// withKept sets a's LeftOnAgent from its version's entry: what its record
// said when it was recorded may have changed since (Keep).
func withKept(versions *bolt.Bucket, a *cpv1.Artifact) *cpv1.Artifact {
	v, ok := readVersion(versions, a.GetName(), a.GetSha256())
	a.LeftOnAgent = ok && !v.kept
	return a
}

// Keep records that the control plane now keeps the content of a version
// of a session's file that was left on its agent: its bytes count from
// now on.
func (s *Store) Keep(sessionID, name, sha256 string) error {
	return s.update(func(tx *bolt.Tx) error {
		list := tx.Bucket(bucketArtifacts).Bucket([]byte(sessionID))
		versions := tx.Bucket(bucketArtifactVersion).Bucket([]byte(sessionID))
		v, ok := readVersion(versions, name, sha256)
		if !ok || v.kept || list == nil {
			return nil
		}
		a := &cpv1.Artifact{}
		if err := getProto(list, v.seq, a); err != nil {
			return err
		}
		a.LeftOnAgent = false
		return putVersion(tx, versions, a, v)
	})
}

// addRef adds n to the count of artifact records naming blob sha256: a
// blob named again is no garbage; one no record names any more is.
func addRef(tx *bolt.Tx, sha256 string, n int) error {
	refs, garbage := tx.Bucket(bucketArtifactRefs), tx.Bucket(bucketBlobGarbage)
	count := int(getU64(refs, []byte(sha256))) + n
	if count <= 0 {
		if err := refs.Delete([]byte(sha256)); err != nil {
			return err
		}
		return garbage.Put([]byte(sha256), nil)
	}
	if err := garbage.Delete([]byte(sha256)); err != nil {
		return err
	}
	return refs.Put([]byte(sha256), u64(uint64(count)))
}

// addOwnerBytes adds n to the bytes of artifact versions of the principal
// that owns session sessionID.
func addOwnerBytes(tx *bolt.Tx, sessionID string, n int64) error {
	b, err := sessionBucket(tx, sessionID)
	if err != nil || n == 0 {
		return err
	}
	return addU64(tx.Bucket(bucketOwnerBytes), b.Get(keyOwner), n)
}

// ArtifactBytes is the sum of the sizes of the artifact versions of the
// sessions of principal owner (each once, as long as it is kept: an expiry
// takes them off).
func (s *Store) ArtifactBytes(owner string) (int64, error) {
	var n int64
	err := s.db.View(func(tx *bolt.Tx) error {
		n = int64(getU64(tx.Bucket(bucketOwnerBytes), []byte(owner)))
		return nil
	})
	return n, err
}

// Garbage returns up to most blobs after the one named after (in order;
// "": from the first) that no artifact names since an expiry
// (ExpireArtifacts), to remove; Collected forgets those removed.
func (s *Store) Garbage(after string, most int) ([]string, error) {
	var out []string
	err := s.db.View(func(tx *bolt.Tx) error {
		c := tx.Bucket(bucketBlobGarbage).Cursor()
		k, _ := c.Seek([]byte(after))
		if k != nil && string(k) == after {
			k, _ = c.Next()
		}
		for ; k != nil && len(out) < most; k, _ = c.Next() {
			out = append(out, string(k))
		}
		return nil
	})
	return out, err
}

// Named reports whether an artifact record names blob sha256.
func (s *Store) Named(sha256 string) (bool, error) {
	var yes bool
	err := s.db.View(func(tx *bolt.Tx) error {
		yes = getU64(tx.Bucket(bucketArtifactRefs), []byte(sha256)) > 0
		return nil
	})
	return yes, err
}

// IsGarbage reports whether no artifact names blob sha256 since an expiry.
func (s *Store) IsGarbage(sha256 string) (bool, error) {
	var yes bool
	err := s.db.View(func(tx *bolt.Tx) error {
		k, _ := tx.Bucket(bucketBlobGarbage).Cursor().Seek([]byte(sha256))
		yes = k != nil && string(k) == sha256
		return nil
	})
	return yes, err
}

// Collected forgets garbage blobs that were removed (one named again
// meanwhile is no garbage already).
func (s *Store) Collected(sha256s []string) error {
	return s.update(func(tx *bolt.Tx) error {
		for _, sum := range sha256s {
			if err := tx.Bucket(bucketBlobGarbage).Delete([]byte(sum)); err != nil {
				return err
			}
		}
		return nil
	})
}

// markClosed indexes a closed session by its close time, for ExpireArtifacts.
func markClosed(tx *bolt.Tx, id string, at time.Time) error {
	return tx.Bucket(bucketClosedSessions).Put(append(u64(uint64(at.UnixNano())), id...), nil)
}

// ExpireArtifacts forgets the artifacts of up to most sessions closed
// before closedBefore, oldest first, and returns how many sessions it
// expired (fewer than most: none are left). Blobs no artifact record names
// any more become Garbage. The sessions themselves, their plans and audit
// records stay.
func (s *Store) ExpireArtifacts(closedBefore time.Time, most int) (expired int, err error) {
	err = s.update(func(tx *bolt.Tx) error {
		expired = 0
		closed := tx.Bucket(bucketClosedSessions)
		var done [][]byte // deleted after the walk: a cursor's Delete may skip the next key
		c := closed.Cursor()
		for k, _ := c.First(); k != nil && len(done) < most; k, _ = c.Next() {
			if len(k) < 8 { // not markClosed's: a damaged file
				continue
			}
			if int64(decodeU64(k[:8])) >= closedBefore.UnixNano() {
				break
			}
			k = bytes.Clone(k)
			done = append(done, k)
			id := k[8:]
			if list := tx.Bucket(bucketArtifacts).Bucket(id); list != nil {
				versions := tx.Bucket(bucketArtifactVersion).Bucket(id)
				err := list.ForEach(func(k, v []byte) error {
					a := &cpv1.Artifact{}
					if err := proto.Unmarshal(v, a); err != nil {
						return err
					}
					if v, ok := readVersion(versions, a.GetName(), a.GetSha256()); ok && v.kept && bytes.Equal(v.seq, k) { // once a version
						if err := addOwnerBytes(tx, string(id), -a.GetSizeBytes()); err != nil {
							return err
						}
					}
					return addRef(tx, a.GetSha256(), -1)
				})
				if err != nil {
					return err
				}
				if err := tx.Bucket(bucketArtifacts).DeleteBucket(id); err != nil {
					return err
				}
			}
			for _, b := range [][]byte{bucketArtifactNames, bucketArtifactVersion} {
				if tx.Bucket(b).Bucket(id) != nil {
					if err := tx.Bucket(b).DeleteBucket(id); err != nil {
						return err
					}
				}
			}
		}
		for _, k := range done {
			if err := closed.Delete(k); err != nil {
				return err
			}
		}
		expired = len(done)
		return nil
	})
	return expired, err
}

// Artifact returns the newest version of a session's file, or the version
// with the given SHA-256.
func (s *Store) Artifact(sessionID, name, sha256 string) (*cpv1.Artifact, error) {
	var out *cpv1.Artifact
	err := s.db.View(func(tx *bolt.Tx) error {
		list := tx.Bucket(bucketArtifacts).Bucket([]byte(sessionID))
		names := tx.Bucket(bucketArtifactNames).Bucket([]byte(sessionID))
		if list == nil || names == nil {
			return nil
		}
		seq := names.Get([]byte(name))
		if seq == nil {
			return nil
		}
		versions := tx.Bucket(bucketArtifactVersion).Bucket([]byte(sessionID))
		if sha256 != "" {
			// The version's last record, so the latest receipt wins (one
			// recorded after the newest may have landed before it).
			v, ok := readVersion(versions, name, sha256)
			if !ok {
				return nil
			}
			seq = v.seq
		}
		a := &cpv1.Artifact{}
		if err := getProto(list, seq, a); err != nil {
			return err
		}
		out = withKept(versions, a)
		return nil
	})
	if err == nil && out == nil {
		err = fmt.Errorf("%w: session %s has no file %q%s", ErrArtifactNotFound, sessionID, name, versionNote(sha256))
	}
	return out, err
}

func versionNote(sha256 string) string {
	if sha256 == "" {
		return ""
	}
	return " with sha256 " + sha256
}

// ListArtifacts returns up to limit artifacts of a session recorded after
// position after, oldest first, only those of plan requestID if it is set.
// next is the position of the last one returned when more may follow.
func (s *Store) ListArtifacts(sessionID, requestID string, after uint64, limit int) (out []*cpv1.Artifact, next uint64, err error) {
	err = s.db.View(func(tx *bolt.Tx) error {
		list := tx.Bucket(bucketArtifacts).Bucket([]byte(sessionID))
		if list == nil {
			return nil
		}
		versions := tx.Bucket(bucketArtifactVersion).Bucket([]byte(sessionID))
		var last uint64
		c := list.Cursor()
		for k, v := c.Seek(u64(after + 1)); k != nil; k, v = c.Next() {
			a := &cpv1.Artifact{}
			if err := proto.Unmarshal(v, a); err != nil {
				return err
			}
			if requestID != "" && a.GetRequestId() != requestID {
				continue
			}
			if len(out) == limit {
				next = last
				return nil
			}
			out = append(out, withKept(versions, a))
			last = decodeU64(k)
		}
		return nil
	})
	return out, next, err
}
