package store

import (
	"fmt"

	bolt "go.etcd.io/bbolt"
	"google.golang.org/protobuf/proto"

	cpv1 "github.com/blendplane/blendplane/gen/blendplane/controlplane/v1"
)

// PutArtifact records a version of a session's file. A version equal to the
// name's newest one (same content, same receipt) is not recorded twice: the
// stored one is returned, so replays and retries add nothing.
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
		if seq := names.Get([]byte(a.GetName())); seq != nil {
			newest := &cpv1.Artifact{}
			if err := getProto(list, seq, newest); err != nil {
				return err
			}
			if newest.GetSha256() == a.GetSha256() && newest.GetRequestId() == a.GetRequestId() && newest.GetOperationId() == a.GetOperationId() {
				out = newest
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
		return names.Put([]byte(a.GetName()), u64(seq))
	})
	return out, err
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
		if sha256 == "" {
			out = &cpv1.Artifact{}
			return getProto(list, seq, out)
		}
		// Older versions: newest first, so the latest receipt wins.
		c := list.Cursor()
		for k, v := c.Seek(seq); k != nil; k, v = c.Prev() {
			a := &cpv1.Artifact{}
			if err := proto.Unmarshal(v, a); err != nil {
				return err
			}
			if a.GetName() == name && a.GetSha256() == sha256 {
				out = a
				return nil
			}
		}
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
			out = append(out, a)
			last = decodeU64(k)
		}
		return nil
	})
	return out, next, err
}
