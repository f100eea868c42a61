package planner

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"

	bolt "go.etcd.io/bbolt"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	plannerv1 "github.com/blendplane/blendplane/gen/blendplane/planner/v1"
	"github.com/blendplane/blendplane/internal/boltfile"
)

// The planner's own bbolt file (planner.db in the control plane's data
// directory): threads, runs with the conversation of their model turns (so
// that a run waiting for approval resumes after a restart), the approval
// index and the audit of actions.
var (
	bucketThreads     = []byte("threads")
	bucketRuns        = []byte("runs")
	bucketTranscripts = []byte("transcripts")
	bucketApprovals   = []byte("approvals") // approval id → run id
	bucketAudit       = []byte("audit")     // sequence → ActionAudit, never rewritten
)

var errNotFound = errors.New("not found")

type store struct{ db *bolt.DB }

func openStore(path string) (*store, error) {
	db, err := boltfile.Open(path, nil)
	if err != nil {
		return nil, fmt.Errorf("planner store %s: %w", path, err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		for _, b := range [][]byte{bucketThreads, bucketRuns, bucketTranscripts, bucketApprovals, bucketAudit} {
			if _, err := tx.CreateBucketIfNotExists(b); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		db.Close()
		return nil, err
	}
	return &store{db: db}, nil
}

func (s *store) close() error { return s.db.Close() }

func get[M proto.Message](tx *bolt.Tx, bucket []byte, id string, m M) (M, error) {
	v := tx.Bucket(bucket).Get([]byte(id))
	if v == nil {
		return m, errNotFound
	}
	return m, proto.Unmarshal(v, m)
}

func put(tx *bolt.Tx, bucket []byte, id string, m proto.Message) error {
	b, err := proto.Marshal(m)
	if err != nil {
		return err
	}
	return tx.Bucket(bucket).Put([]byte(id), b)
}

func (s *store) thread(id string) (t *plannerv1.Thread, err error) {
	err = s.db.View(func(tx *bolt.Tx) error {
		t, err = get(tx, bucketThreads, id, &plannerv1.Thread{})
		return err
	})
	return t, err
}

func (s *store) putThread(t *plannerv1.Thread) error {
	return s.db.Update(func(tx *bolt.Tx) error { return put(tx, bucketThreads, t.GetThreadId(), t) })
}

// appendMessage adds a message to a thread.
func (s *store) appendMessage(threadID string, role plannerv1.ThreadMessage_Role, text, runID string) error {
	return s.db.Update(func(tx *bolt.Tx) error {
		t, err := get(tx, bucketThreads, threadID, &plannerv1.Thread{})
		if err != nil {
			return err
		}
		t.Messages = append(t.Messages, &plannerv1.ThreadMessage{Role: role, Text: text, RunId: runID, CreateTime: timestamppb.Now()})
		return put(tx, bucketThreads, threadID, t)
	})
}

// setSession records the session a thread's plans run in.
func (s *store) setSession(threadID, sessionID string) error {
	return s.db.Update(func(tx *bolt.Tx) error {
		t, err := get(tx, bucketThreads, threadID, &plannerv1.Thread{})
		if err != nil {
			return err
		}
		t.SessionId = sessionID
		return put(tx, bucketThreads, threadID, t)
	})
}

func (s *store) run(id string) (r *plannerv1.Run, transcript []Message, err error) {
	err = s.db.View(func(tx *bolt.Tx) error {
		if r, err = get(tx, bucketRuns, id, &plannerv1.Run{}); err != nil {
			return err
		}
		if v := tx.Bucket(bucketTranscripts).Get([]byte(id)); v != nil {
			return json.Unmarshal(v, &transcript)
		}
		return nil
	})
	return r, transcript, err
}

// putRun writes a run, its transcript, the index of its approvals and the
// audit entries of actions that changed, in one transaction.
func (s *store) putRun(r *plannerv1.Run, transcript []Message, audit []*plannerv1.ActionAudit) error {
	tb, err := json.Marshal(transcript)
	if err != nil {
		return err
	}
	return s.db.Update(func(tx *bolt.Tx) error {
		if err := put(tx, bucketRuns, r.GetRunId(), r); err != nil {
			return err
		}
		if err := tx.Bucket(bucketTranscripts).Put([]byte(r.GetRunId()), tb); err != nil {
			return err
		}
		for _, a := range r.GetActions() {
			if a.GetApprovalId() != "" {
				if err := tx.Bucket(bucketApprovals).Put([]byte(a.GetApprovalId()), []byte(r.GetRunId())); err != nil {
					return err
				}
			}
		}
		ab := tx.Bucket(bucketAudit)
		for _, e := range audit {
			seq, _ := ab.NextSequence()
			if err := put(tx, bucketAudit, string(binary.BigEndian.AppendUint64(nil, seq)), e); err != nil {
				return err
			}
		}
		return nil
	})
}

func (s *store) runOfApproval(approvalID string) (string, error) {
	var id string
	err := s.db.View(func(tx *bolt.Tx) error {
		v := tx.Bucket(bucketApprovals).Get([]byte(approvalID))
		if v == nil {
			return errNotFound
		}
		id = string(v)
		return nil
	})
	return id, err
}

// runs calls f for every run (for a restart, and the pending approvals).
func (s *store) runs(f func(*plannerv1.Run) error) error {
	return s.db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketRuns).ForEach(func(_, v []byte) error {
			r := &plannerv1.Run{}
			if err := proto.Unmarshal(v, r); err != nil {
				return err
			}
			return f(r)
		})
	})
}

// audit returns the audit entries that keep, oldest first.
func (s *store) audit(keep func(*plannerv1.ActionAudit) bool) ([]*plannerv1.ActionAudit, error) {
	var out []*plannerv1.ActionAudit
	err := s.db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketAudit).ForEach(func(_, v []byte) error {
			e := &plannerv1.ActionAudit{}
			if err := proto.Unmarshal(v, e); err != nil {
				return err
			}
			if keep(e) {
				out = append(out, e)
			}
			return nil
		})
	})
	return out, err
}
