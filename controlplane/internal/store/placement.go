package store

import (
	"encoding/json"
	"errors"
	"fmt"

	bolt "go.etcd.io/bbolt"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	cpv1 "github.com/blendplane/blendplane/gen/blendplane/controlplane/v1"
	"github.com/blendplane/blendplane/internal/wirefields"
)

var (
	// ErrStaleEpoch: a report (a receipt) of an epoch older than the
	// session's: it comes from an agent the session has moved away from.
	ErrStaleEpoch = errors.New("stale epoch")
	// ErrSessionBroken: the session lost its agent and could not be rebuilt
	// exactly elsewhere.
	ErrSessionBroken = errors.New("session broken")
)

var (
	keyEpoch      = []byte("epoch")
	keyRebuilt    = []byte("rebuilt_epoch") // absent: 1 (the negotiated placement needs no rebuild)
	keyCheckpoint = []byte("checkpoint")    // SessionCheckpoint as JSON; absent: none
)

// SessionCheckpoint is the control plane's copy of a session's checkpoint:
// a blob, the scene it holds, and the audit sequence of the last record of
// the session's log it includes (replay goes on after it).
type SessionCheckpoint struct {
	SHA256    string `json:"sha256"`
	SceneHash string `json:"scene_hash"`
	After     uint64 `json:"after"`
}

// SetCheckpoint records the control plane's copy of a session's newest
// checkpoint and returns the one it replaces (nil: none), whose blob the
// caller may remove.
func (s *Store) SetCheckpoint(id string, cp SessionCheckpoint) (*SessionCheckpoint, error) {
	var old *SessionCheckpoint
	err := s.update(func(tx *bolt.Tx) error {
		st := tx.Bucket(bucketSessionState).Bucket([]byte(id))
		if st == nil {
			return fmt.Errorf("session %q: %w", id, ErrSessionNotFound)
		}
		old = readCheckpoint(st)
		raw, err := json.Marshal(cp)
		if err != nil {
			return err
		}
		return st.Put(keyCheckpoint, raw)
	})
	return old, err
}

// Checkpoint returns the control plane's copy of a session's newest
// checkpoint (nil: none), as Session's Checkpoint, without the rest.
func (s *Store) Checkpoint(id string) (*SessionCheckpoint, error) {
	var cp *SessionCheckpoint
	err := s.db.View(func(tx *bolt.Tx) error {
		if _, err := sessionBucket(tx, id); err != nil {
			return err
		}
		if st := tx.Bucket(bucketSessionState).Bucket([]byte(id)); st != nil {
			cp = readCheckpoint(st)
		}
		return nil
	})
	return cp, err
}

func readCheckpoint(st *bolt.Bucket) *SessionCheckpoint {
	raw := st.Get(keyCheckpoint)
	if raw == nil {
		return nil
	}
	cp := &SessionCheckpoint{}
	if json.Unmarshal(raw, cp) != nil {
		return nil
	}
	return cp
}

// Placement is where a session runs and whether it can: what dispatch
// reads for every plan and attempt.
type Placement struct {
	AgentID string
	// Epoch and Rebuilt are Session's Info.Epoch and Rebuilt.
	Epoch, Rebuilt int64
	State          cpv1.Session_State
}

// Broken is Session's Broken.
func (p Placement) Broken() bool { return p.State == cpv1.Session_STATE_BROKEN }

// Closed is Session's Closed.
func (p Placement) Closed() bool { return p.State == cpv1.Session_STATE_CLOSED }

// Fields of a stored cpv1.Session that Placement and Terms read.
var (
	fieldAgentID     = wirefields.FieldNumber(&cpv1.Session{}, "agent_id")
	fieldStateEnum   = wirefields.FieldNumber(&cpv1.Session{}, "state")
	fieldContract    = wirefields.FieldNumber(&cpv1.Session{}, "contract")
	fieldCaps        = wirefields.FieldNumber(&cpv1.SessionContract{}, "capabilities")
	fieldConstraints = wirefields.FieldNumber(&cpv1.SessionContract{}, "constraints")
	fieldFlags       = wirefields.FieldNumber(&cpv1.Capabilities{}, "feature_flags")
)

// Placement reads a session's placement: the fields of Session that say
// where it runs, without decoding the rest of it (its contract, most of its
// bytes), which dispatch and heartbeats would otherwise do several times per
// plan and per report.
func (s *Store) Placement(id string) (Placement, error) {
	var p Placement
	err := s.db.View(func(tx *bolt.Tx) error {
		var err error
		p, err = readPlacement(tx, id)
		return err
	})
	return p, err
}

func readPlacement(tx *bolt.Tx, id string) (Placement, error) {
	var p Placement
	b, err := sessionBucket(tx, id)
	if err != nil {
		return p, err
	}
	// As proto.Unmarshal: the last occurrence of a field wins.
	err = wirefields.Each(b.Get(keySession), func(num protowire.Number, typ protowire.Type, _, v []byte) error {
		switch {
		case num == fieldAgentID && typ == protowire.BytesType:
			p.AgentID = string(v)
		case num == fieldStateEnum && typ == protowire.VarintType:
			n, _ := protowire.ConsumeVarint(v)
			p.State = cpv1.Session_State(int32(n))
		}
		return nil
	})
	if err != nil {
		return p, fmt.Errorf("session %s: %w", id, err)
	}
	p.Epoch, p.Rebuilt = sessionEpoch(tx, id), rebuiltEpoch(tx, id)
	return p, nil
}

// Terms are the parts of a session's contract that running its plans
// reads.
type Terms struct {
	Constraints  *cpv1.Constraints
	FeatureFlags []string
}

// Terms reads a session's Terms without decoding the rest of its contract
// (its tool list and profiles, most of its bytes).
func (s *Store) Terms(id string) (Terms, error) {
	t := Terms{Constraints: &cpv1.Constraints{}}
	merge := proto.UnmarshalOptions{Merge: true}
	err := s.db.View(func(tx *bolt.Tx) error {
		b, err := sessionBucket(tx, id)
		if err != nil {
			return err
		}
		// A message field may come in parts, which proto.Unmarshal merges
		// (a repeated field's values add up across them): so do these.
		err = wirefields.EachBytes(b.Get(keySession), fieldContract, func(contract []byte) error {
			err := wirefields.EachBytes(contract, fieldConstraints, func(v []byte) error { return merge.Unmarshal(v, t.Constraints) })
			if err != nil {
				return err
			}
			return wirefields.EachBytes(contract, fieldCaps, func(caps []byte) error {
				return wirefields.EachBytes(caps, fieldFlags, func(flag []byte) error {
					t.FeatureFlags = append(t.FeatureFlags, string(flag))
					return nil
				})
			})
		})
		if err != nil {
			return fmt.Errorf("session %s: %w", id, err)
		}
		return nil
	})
	return t, err
}

// rebuiltEpoch is the epoch a session was last rebuilt for (MarkRebuilt);
// 1 if never: the negotiated placement needs no rebuild.
func rebuiltEpoch(tx *bolt.Tx, id string) int64 {
	if st := tx.Bucket(bucketSessionState).Bucket([]byte(id)); st != nil {
		return max(1, int64(getU64(st, keyRebuilt)))
	}
	return 1
}

// sessionEpoch is a session's epoch: 1 from its negotiation (and for
// sessions stored before epochs existed), one more per move.
func sessionEpoch(tx *bolt.Tx, id string) int64 {
	if st := tx.Bucket(bucketSessionState).Bucket([]byte(id)); st != nil {
		if e := getU64(st, keyEpoch); e > 0 {
			return int64(e)
		}
	}
	return 1
}

// checkEpochs refuses receipts that carry an older epoch than the session's
// (0: not stamped, as the control plane's own receipts of a current run).
func checkEpochs(tx *bolt.Tx, sessionID string, receipts []*cpv1.Receipt) error {
	cur := sessionEpoch(tx, sessionID)
	for _, r := range receipts {
		if e := r.GetSessionEpoch(); e > 0 && e < cur {
			return fmt.Errorf("%w: receipt of %q under epoch %d; session %s is at epoch %d", ErrStaleEpoch, r.GetOperationId(), e, sessionID, cur)
		}
	}
	return nil
}

// MoveSession places an open session on another agent and runtime: its
// epoch grows by one, so that reports of the old placement are refused from
// now on. It returns the new epoch.
func (s *Store) MoveSession(id, agentID, runtimeID string) (int64, error) {
	var epoch int64
	err := s.update(func(tx *bolt.Tx) error {
		sess, err := readSession(tx, id)
		if err != nil {
			return err
		}
		switch sess.Info.GetState() {
		case cpv1.Session_STATE_CLOSED:
			return fmt.Errorf("session %s: %w", id, ErrSessionClosed)
		case cpv1.Session_STATE_BROKEN:
			return fmt.Errorf("session %s: %w", id, ErrSessionBroken)
		}
		b, _ := sessionBucket(tx, id)
		stored := &cpv1.Session{}
		if err := getProto(b, keySession, stored); err != nil {
			return err
		}
		stored.AgentId, stored.RuntimeId = agentID, runtimeID
		if err := putProto(b, keySession, stored); err != nil {
			return err
		}
		epoch = sessionEpoch(tx, id) + 1
		st, err := tx.Bucket(bucketSessionState).CreateBucketIfNotExists([]byte(id))
		if err != nil {
			return err
		}
		return st.Put(keyEpoch, u64(uint64(epoch)))
	})
	return epoch, err
}

// MarkBroken records that a session cannot continue: its plans are
// refused, what it made is kept.
func (s *Store) MarkBroken(id string) error {
	return s.update(func(tx *bolt.Tx) error {
		b, err := sessionBucket(tx, id)
		if err != nil {
			return err
		}
		stored := &cpv1.Session{}
		if err := getProto(b, keySession, stored); err != nil {
			return err
		}
		if stored.GetState() == cpv1.Session_STATE_CLOSED {
			return nil
		}
		stored.State = cpv1.Session_STATE_BROKEN
		if err := putProto(b, keySession, stored); err != nil {
			return err
		}
		return markNotOpen(tx, b, id) // it holds nothing on any agent
	})
}

// SessionHistory returns a session's audit records in commit order, from
// sequence after on, up to limit: its redo log (the operations that
// changed its scene, their rollbacks) and everything else it did.
func (s *Store) SessionHistory(sessionID string, after uint64, limit int) ([]*cpv1.AuditRecord, error) {
	var out []*cpv1.AuditRecord
	err := s.db.View(func(tx *bolt.Tx) error {
		idx := tx.Bucket(bucketAuditSession).Bucket([]byte(sessionID))
		if idx == nil {
			return nil
		}
		audit := tx.Bucket(bucketAudit)
		c := idx.Cursor()
		for k, _ := c.Seek(u64(after + 1)); k != nil && len(out) < limit; k, _ = c.Next() {
			rec := &cpv1.AuditRecord{}
			if err := getProto(audit, k, rec); err != nil {
				return err
			}
			out = append(out, rec)
		}
		return nil
	})
	return out, err
}

// LastInHistory returns the newest of a session's audit records that match
// accepts (nil: none does), reading from the newest back, so that finding
// a recent record costs the same however long the session's history is. It
// reads in pages of historyPage records, each in its own read transaction,
// so that a search that finds nothing holds none open for long.
func (s *Store) LastInHistory(sessionID string, match func(*cpv1.AuditRecord) bool) (*cpv1.AuditRecord, error) {
	var found *cpv1.AuditRecord
	var read []byte // the oldest key read so far (nil: none yet)
	for done := false; !done; {
		err := s.db.View(func(tx *bolt.Tx) error {
			done = true
			idx := tx.Bucket(bucketAuditSession).Bucket([]byte(sessionID))
			if idx == nil {
				return nil
			}
			audit := tx.Bucket(bucketAudit)
			c := idx.Cursor()
			k, _ := c.Last()
			if read != nil {
				c.Seek(read)
				k, _ = c.Prev()
			}
			for n := 0; k != nil; k, _ = c.Prev() {
				if n == historyPage {
					done = false
					return nil
				}
				n++
				read = append(read[:0], k...)
				rec := &cpv1.AuditRecord{}
				if err := getProto(audit, k, rec); err != nil {
					return err
				}
				if match(rec) {
					found = rec
					return nil
				}
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	return found, nil
}

// historyPage is how many audit records LastInHistory reads per transaction.
var historyPage = 1000

// MarkRebuilt records that a session's agent holds its scene as committed
// for epoch.
func (s *Store) MarkRebuilt(id string, epoch int64) error {
	return s.update(func(tx *bolt.Tx) error {
		st, err := tx.Bucket(bucketSessionState).CreateBucketIfNotExists([]byte(id))
		if err != nil {
			return err
		}
		return st.Put(keyRebuilt, u64(uint64(epoch)))
	})
}
