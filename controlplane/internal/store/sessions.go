package store

import (
	"fmt"
	"time"

	bolt "go.etcd.io/bbolt"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	cpv1 "github.com/blendplane/blendplane/gen/blendplane/controlplane/v1"
)

// Session is a negotiated session as stored.
type Session struct {
	// Owner is the principal that negotiated it.
	Owner string
	// Info is the session as the API shows it. Its state is OPEN or CLOSED
	// here; whether an open session's Blender runs (OPEN) or not (PARKED)
	// is its agent's to say. Its contract names the tool registry its plans
	// are checked against (Registry reads it).
	Info *cpv1.Session
	// Rebuilt is the epoch the session was last rebuilt for on its agent
	// (MarkRebuilt): below Info.Epoch, its new agent does not hold its
	// scene yet.
	Rebuilt int64
	// Checkpoint is the control plane's copy of its newest checkpoint (nil:
	// none), to rebuild it from on another agent.
	Checkpoint *SessionCheckpoint
}

// RegistryFingerprint is the fingerprint of the session's tool registry.
func (s Session) RegistryFingerprint() string {
	return s.Info.GetContract().GetToolRegistryRef().GetFingerprint()
}

// Closed reports whether the session was closed.
func (s Session) Closed() bool { return s.Info.GetState() == cpv1.Session_STATE_CLOSED }

// Broken reports whether the session lost its agent and could not be
// rebuilt exactly elsewhere.
func (s Session) Broken() bool { return s.Info.GetState() == cpv1.Session_STATE_BROKEN }

// PutSession stores a new session (Info.SessionId set, state OPEN) and, if
// the store does not hold it yet, the tool registry its contract names.
func (s *Store) PutSession(sess Session, registry *cpv1.ToolRegistry) error {
	if fp := registry.GetFingerprint(); fp != sess.RegistryFingerprint() {
		return fmt.Errorf("session %s: registry %s is not the contract's %s", sess.Info.GetSessionId(), fp, sess.RegistryFingerprint())
	}
	id := []byte(sess.Info.GetSessionId())
	return s.update(func(tx *bolt.Tx) error {
		b, err := tx.Bucket(bucketSessions).CreateBucket(id)
		if err != nil {
			return fmt.Errorf("session %s: %w", id, err)
		}
		order, err := tx.Bucket(bucketSessionOrder).CreateBucketIfNotExists([]byte(sess.Owner))
		if err != nil {
			return err
		}
		seq, err := order.NextSequence()
		if err != nil {
			return err
		}
		if err := order.Put(u64(seq), id); err != nil {
			return err
		}
		if err := markOpen(tx, sess.Owner, id); err != nil {
			return err
		}
		info := proto.Clone(sess.Info).(*cpv1.Session)
		hash, updated := info.GetSceneHash(), info.GetUpdateTime()
		if updated == nil {
			updated = info.GetCreateTime()
		}
		info.SceneHash, info.PlanCount, info.ActivePlanCount, info.UpdateTime = "", 0, 0, nil
		if err := putProto(b, keySession, info); err != nil {
			return err
		}
		if err := putRegistry(tx, registry); err != nil {
			return err
		}
		for _, kv := range [][2][]byte{{keyOwner, []byte(sess.Owner)}, {keyOrder, u64(seq)}} {
			if err := b.Put(kv[0], kv[1]); err != nil {
				return err
			}
		}
		state, err := tx.Bucket(bucketSessionState).CreateBucket(id)
		if err != nil {
			return err
		}
		if err := state.Put(keySceneHash, []byte(hash)); err != nil {
			return err
		}
		if err := state.Put(keyEpoch, u64(1)); err != nil {
			return err
		}
		return state.Put(keyUpdateTime, u64(uint64(updated.AsTime().UnixNano())))
	})
}

// Session returns a stored session.
func (s *Store) Session(id string) (Session, error) {
	var sess Session
	err := s.db.View(func(tx *bolt.Tx) error {
		var err error
		sess, err = readSession(tx, id)
		return err
	})
	return sess, err
}

func sessionBucket(tx *bolt.Tx, id string) (*bolt.Bucket, error) {
	b := tx.Bucket(bucketSessions).Bucket([]byte(id))
	if b == nil {
		return nil, fmt.Errorf("session %q: %w", id, ErrSessionNotFound)
	}
	return b, nil
}

// SessionOwner is the principal that negotiated session id.
func (s *Store) SessionOwner(id string) (string, error) {
	var owner string
	err := s.db.View(func(tx *bolt.Tx) error {
		b, err := sessionBucket(tx, id)
		if err == nil {
			owner = string(b.Get(keyOwner))
		}
		return err
	})
	return owner, err
}

func readSession(tx *bolt.Tx, id string) (Session, error) {
	b, err := sessionBucket(tx, id)
	if err != nil {
		return Session{}, err
	}
	sess := Session{Owner: string(b.Get(keyOwner)), Info: &cpv1.Session{}}
	if err := getProto(b, keySession, sess.Info); err != nil {
		return Session{}, fmt.Errorf("session %s: %w", id, err)
	}
	if st := tx.Bucket(bucketSessionState).Bucket([]byte(id)); st != nil {
		sess.Info.SceneHash = string(st.Get(keySceneHash))
		sess.Info.PlanCount = int64(getU64(st, keyPlanCount))
		sess.Info.ActivePlanCount = int64(getU64(st, keyActiveCount))
		if ns := getU64(st, keyUpdateTime); ns > 0 {
			sess.Info.UpdateTime = timestamppb.New(time.Unix(0, int64(ns)))
		}
	}
	sess.Info.Epoch, sess.Rebuilt = sessionEpoch(tx, id), rebuiltEpoch(tx, id)
	if st := tx.Bucket(bucketSessionState).Bucket([]byte(id)); st != nil {
		sess.Checkpoint = readCheckpoint(st)
	}
	return sess, nil
}

// putRegistry stores a tool registry under its fingerprint, once.
func putRegistry(tx *bolt.Tx, r *cpv1.ToolRegistry) error {
	regs := tx.Bucket(bucketRegistries)
	if regs.Get([]byte(r.GetFingerprint())) != nil {
		return nil
	}
	return putProto(regs, []byte(r.GetFingerprint()), r)
}

// Registry returns a stored tool registry by its fingerprint.
func (s *Store) Registry(fingerprint string) (*cpv1.ToolRegistry, error) {
	r := &cpv1.ToolRegistry{}
	err := s.db.View(func(tx *bolt.Tx) error {
		return getProto(tx.Bucket(bucketRegistries), []byte(fingerprint), r)
	})
	if err != nil {
		return nil, fmt.Errorf("tool registry %s: %w", fingerprint, err)
	}
	return r, nil
}

// CloseSession marks a session closed and queues its release on its agent
// (see Releasing). It returns the session as closed; closing a closed
// session changes nothing.
func (s *Store) CloseSession(id string, now time.Time) (Session, error) {
	var sess Session
	err := s.update(func(tx *bolt.Tx) error {
		var err error
		if sess, err = readSession(tx, id); err != nil || sess.Closed() {
			return err
		}
		b, _ := sessionBucket(tx, id)
		stored := &cpv1.Session{}
		if err := getProto(b, keySession, stored); err != nil {
			return err
		}
		stored.State, stored.CloseTime = cpv1.Session_STATE_CLOSED, timestamppb.New(now)
		if err := putProto(b, keySession, stored); err != nil {
			return err
		}
		if st := tx.Bucket(bucketSessionState).Bucket([]byte(id)); st != nil {
			if err := st.Put(keyUpdateTime, u64(uint64(now.UnixNano()))); err != nil {
				return err
			}
		}
		if err := tx.Bucket(bucketReleasing).Put([]byte(id), nil); err != nil {
			return err
		}
		if err := markClosed(tx, id, now); err != nil {
			return err
		}
		if err := markNotOpen(tx, b, id); err != nil {
			return err
		}
		sess, err = readSession(tx, id)
		return err
	})
	return sess, err
}

// markOpen notes a session that is not closed under its owner.
func markOpen(tx *bolt.Tx, owner string, id []byte) error {
	open, err := tx.Bucket(bucketOpenSessions).CreateBucketIfNotExists([]byte(owner))
	if err != nil {
		return err
	}
	return open.Put(id, nil)
}

// markNotOpen drops a closed or broken session (its bucket b) from its
// owner's open sessions.
func markNotOpen(tx *bolt.Tx, b *bolt.Bucket, id string) error {
	if open := tx.Bucket(bucketOpenSessions).Bucket(b.Get(keyOwner)); open != nil {
		return open.Delete([]byte(id))
	}
	return nil
}

// OpenSessions counts owner's sessions that are neither closed nor broken,
// up to max (a quota needs no more).
func (s *Store) OpenSessions(owner string, max int) (int, error) {
	n := 0
	err := s.db.View(func(tx *bolt.Tx) error {
		open := tx.Bucket(bucketOpenSessions).Bucket([]byte(owner))
		if open == nil {
			return nil
		}
		c := open.Cursor()
		for k, _ := c.First(); k != nil && n < max; k, _ = c.Next() {
			n++
		}
		return nil
	})
	return n, err
}

// OpenSessionsWhere returns every session, of any owner, that is neither
// closed nor broken and that keep accepts.
func (s *Store) OpenSessionsWhere(keep func(Session) bool) ([]Session, error) {
	var out []Session
	err := s.db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketOpenSessions).ForEachBucket(func(owner []byte) error {
			return tx.Bucket(bucketOpenSessions).Bucket(owner).ForEach(func(id, _ []byte) error {
				sess, err := readSession(tx, string(id))
				if err != nil {
					return err
				}
				if keep(sess) {
					out = append(out, sess)
				}
				return nil
			})
		})
	})
	return out, err
}

// Releasing lists closed sessions not yet released on their agent.
func (s *Store) Releasing() ([]string, error) {
	var ids []string
	err := s.db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketReleasing).ForEach(func(k, _ []byte) error {
			ids = append(ids, string(k))
			return nil
		})
	})
	return ids, err
}

// Released records that a closed session's agent let go of it.
func (s *Store) Released(id string) error {
	return s.update(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketReleasing).Delete([]byte(id))
	})
}

// ListSessions returns up to limit sessions of owner negotiated after
// position after (0: from the first), oldest first, that keep accepts. next
// is the position of the last one returned when more may follow, else 0.
func (s *Store) ListSessions(owner string, after uint64, limit int, keep func(Session) bool) (out []Session, next uint64, err error) {
	err = s.db.View(func(tx *bolt.Tx) error {
		order := tx.Bucket(bucketSessionOrder).Bucket([]byte(owner))
		if order == nil {
			return nil
		}
		c := order.Cursor()
		for k, v := c.Seek(u64(after + 1)); k != nil; k, v = c.Next() {
			sess, err := readSession(tx, string(v))
			if err != nil {
				return err
			}
			if !keep(sess) {
				continue
			}
			if len(out) == limit {
				next = getU64(tx.Bucket(bucketSessions).Bucket([]byte(out[len(out)-1].Info.GetSessionId())), keyOrder)
				return nil
			}
			out = append(out, sess)
		}
		return nil
	})
	return out, next, err
}

// touchSession updates a session's counters and update time as plans come
// and go, and its scene hash from committed receipts.
func touchSession(tx *bolt.Tx, id string, plans, active int64, sceneHash string) error {
	b := tx.Bucket(bucketSessionState).Bucket([]byte(id))
	if b == nil {
		return nil // plans of sessions the store never had (tests)
	}
	if plans != 0 {
		if err := addU64(b, keyPlanCount, plans); err != nil {
			return err
		}
	}
	if active != 0 {
		if err := addU64(b, keyActiveCount, active); err != nil {
			return err
		}
		if err := b.Put(keyUpdateTime, u64(uint64(time.Now().UnixNano()))); err != nil {
			return err
		}
	}
	if sceneHash != "" {
		return b.Put(keySceneHash, []byte(sceneHash))
	}
	return nil
}

// AllSessions returns up to limit sessions of every owner with ids after
// after (by id), that keep accepts. next is the last id returned when more
// may follow, else "".
func (s *Store) AllSessions(after string, limit int, keep func(Session) bool) (out []Session, next string, err error) {
	err = s.db.View(func(tx *bolt.Tx) error {
		c := tx.Bucket(bucketSessions).Cursor()
		k, _ := c.First()
		if after != "" {
			if k, _ = c.Seek([]byte(after)); k != nil && string(k) == after {
				k, _ = c.Next()
			}
		}
		for ; k != nil; k, _ = c.Next() {
			sess, err := readSession(tx, string(k))
			if err != nil {
				return err
			}
			if !keep(sess) {
				continue
			}
			if len(out) == limit {
				next = out[len(out)-1].Info.GetSessionId()
				return nil
			}
			out = append(out, sess)
		}
		return nil
	})
	return out, next, err
}

// SessionsByAgent returns the ids of the sessions that are not closed, by
// the agent they are placed on, each list sorted.
func (s *Store) SessionsByAgent() (map[string][]string, error) {
	out := map[string][]string{}
	err := s.db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketSessions).ForEach(func(k, _ []byte) error {
			sess, err := readSession(tx, string(k))
			if err != nil {
				return err
			}
			if !sess.Closed() {
				agent := sess.Info.GetAgentId()
				out[agent] = append(out[agent], sess.Info.GetSessionId())
			}
			return nil
		})
	})
	return out, err
}
