package store

import (
	"errors"
	"fmt"
	"slices"
	"time"

	bolt "go.etcd.io/bbolt"
	"google.golang.org/protobuf/types/known/timestamppb"

	cpv1 "github.com/blendplane/blendplane/gen/blendplane/controlplane/v1"
)

var (
	// ErrTokenExists: a token of that name exists (revoked ones too: a name
	// is never reused, so audit records name one principal).
	ErrTokenExists = errors.New("token exists")
	// ErrTokenNotFound: no token with that name or hash.
	ErrTokenNotFound = errors.New("token not found")
	// ErrLastAdmin: revoking the token would leave no usable admin token,
	// and so no one who could create tokens again.
	ErrLastAdmin = errors.New("the last admin token")
)

// PutToken stores a new token and the hash of its secret.
func (s *Store) PutToken(t *cpv1.Token, hash string) error {
	return s.update(func(tx *bolt.Tx) error {
		tokens := tx.Bucket(bucketTokens)
		if tokens.Get([]byte(t.GetName())) != nil {
			return fmt.Errorf("token %q: %w", t.GetName(), ErrTokenExists)
		}
		if err := putProto(tokens, []byte(t.GetName()), t); err != nil {
			return err
		}
		if by := t.GetCreatedBy(); by != "" { // the first admin token has no creator
			if err := putEvent(tx, by, "token.created", t.GetName(), t.GetCreateTime()); err != nil {
				return err
			}
		}
		return tx.Bucket(bucketTokenHashes).Put([]byte(hash), []byte(t.GetName()))
	})
}

// TokenByHash returns the token whose secret hashes to hash.
func (s *Store) TokenByHash(hash string) (*cpv1.Token, error) {
	t := &cpv1.Token{}
	err := s.db.View(func(tx *bolt.Tx) error {
		name := tx.Bucket(bucketTokenHashes).Get([]byte(hash))
		if name == nil {
			return ErrTokenNotFound
		}
		return getProto(tx.Bucket(bucketTokens), name, t)
	})
	return t, err
}

// Token returns a token by name.
func (s *Store) Token(name string) (*cpv1.Token, error) {
	t := &cpv1.Token{}
	err := s.db.View(func(tx *bolt.Tx) error {
		if tx.Bucket(bucketTokens).Get([]byte(name)) == nil {
			return fmt.Errorf("token %q: %w", name, ErrTokenNotFound)
		}
		return getProto(tx.Bucket(bucketTokens), []byte(name), t)
	})
	return t, err
}

// RevokeToken marks a token revoked (once: revoking again changes nothing)
// and returns it.
func (s *Store) RevokeToken(name, by string, now time.Time) (*cpv1.Token, error) {
	t := &cpv1.Token{}
	err := s.update(func(tx *bolt.Tx) error {
		tokens := tx.Bucket(bucketTokens)
		if tokens.Get([]byte(name)) == nil {
			return fmt.Errorf("token %q: %w", name, ErrTokenNotFound)
		}
		if err := getProto(tokens, []byte(name), t); err != nil {
			return err
		}
		if t.GetRevokeTime() != nil {
			return nil
		}
		if usableAdmin(t, now) && !otherAdmin(tokens, name, now) {
			return fmt.Errorf("token %q: %w: create another admin token first (blendctl token create --name NAME --scope admin)", name, ErrLastAdmin)
		}
		t.RevokeTime, t.RevokedBy = timestamppb.New(now), by
		if err := putEvent(tx, by, "token.revoked", name, t.RevokeTime); err != nil {
			return err
		}
		return putProto(tokens, []byte(name), t)
	})
	return t, err
}

// usableAdmin reports whether t is an admin token that can still be used.
func usableAdmin(t *cpv1.Token, now time.Time) bool {
	return slices.Contains(t.GetScopes(), "admin") && t.GetRevokeTime() == nil &&
		(t.GetExpireTime() == nil || now.Before(t.GetExpireTime().AsTime()))
}

// otherAdmin reports whether a usable admin token other than name exists.
func otherAdmin(tokens *bolt.Bucket, name string, now time.Time) bool {
	found := false
	tokens.ForEach(func(k, v []byte) error {
		t := &cpv1.Token{}
		if string(k) != name && unmarshal(v, t) == nil && usableAdmin(t, now) {
			found = true
		}
		return nil
	})
	return found
}

// ListTokens returns up to limit tokens with names after after, by name.
// next is the last name returned when more may follow, else "".
func (s *Store) ListTokens(after string, limit int) (out []*cpv1.Token, next string, err error) {
	err = s.db.View(func(tx *bolt.Tx) error {
		c := tx.Bucket(bucketTokens).Cursor()
		k, v := c.First()
		if after != "" {
			if k, v = c.Seek([]byte(after)); k != nil && string(k) == after {
				k, v = c.Next()
			}
		}
		for ; k != nil; k, v = c.Next() {
			if len(out) == limit {
				next = out[len(out)-1].GetName()
				return nil
			}
			t := &cpv1.Token{}
			if err := unmarshal(v, t); err != nil {
				return err
			}
			out = append(out, t)
		}
		return nil
	})
	return out, next, err
}

// BindAgent records that an agent id belongs to a principal, unless it
// belongs to one already, and returns its principal. A bound agent's
// heartbeat only reads: it costs no durable commit.
func (s *Store) BindAgent(agentID, principal string) (string, error) {
	var owner string
	if err := s.db.View(func(tx *bolt.Tx) error {
		owner = string(tx.Bucket(bucketAgentPrincipals).Get([]byte(agentID)))
		return nil
	}); err != nil || owner != "" {
		return owner, err
	}
	owner = principal
	err := s.update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketAgentPrincipals)
		if v := b.Get([]byte(agentID)); v != nil {
			owner = string(v)
			return nil
		}
		return b.Put([]byte(agentID), []byte(principal))
	})
	return owner, err
}
