package store

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"iter"
	"slices"
	"sort"

	bolt "go.etcd.io/bbolt"
	"google.golang.org/protobuf/types/known/timestamppb"

	cpv1 "github.com/blendplane/blendplane/gen/blendplane/controlplane/v1"
)

func appendAudit(tx *bolt.Tx, ref PlanRef, sessionID string, r *cpv1.Receipt, pol opPolicies) error {
	ts := r.GetCompleteTime()
	if ts == nil {
		ts = timestamppb.Now()
	}
	rec := &cpv1.AuditRecord{
		Timestamp: ts, RequestId: ref.RequestID, OperationId: r.GetOperationId(),
		McpCallId: r.GetMcpCallId(), BlenderMutationId: r.GetBlenderMutationId(), ToolName: r.GetToolName(),
		SafetyLevel: r.GetSafetyLevel(), Status: r.GetStatus(), SceneHashBefore: r.GetSceneHashBefore(),
		SceneHashAfter: r.GetSceneHashAfter(), SessionId: sessionID,
		ErrorCode: r.GetError().GetErrorCode(), Principal: ref.Owner,
	}
	pol.apply(rec)
	return putAudit(tx, ref, rec)
}

// appendDecisionAudit records a decision on an approval (event) as an audit
// record of its plan, naming the principal who decided.
func appendDecisionAudit(tx *bolt.Tx, ref PlanRef, a *cpv1.Approval, event, by string) error {
	rec := &cpv1.AuditRecord{
		Timestamp: a.GetResolveTime(), RequestId: ref.RequestID, SessionId: a.GetSessionId(),
		Principal: by, ApprovalId: a.GetApprovalId(), Event: event,
	}
	if a.GetState() == cpv1.Approval_STATE_APPROVED {
		rec.ApprovedBy = by
	}
	return putAudit(tx, ref, rec)
}

// putEvent records an action of principal by on a token or a policy rule
// (subject): an audit record of no plan, listed with by's.
func putEvent(tx *bolt.Tx, by, event, subject string, at *timestamppb.Timestamp) error {
	return putAudit(tx, PlanRef{Owner: by}, &cpv1.AuditRecord{Timestamp: at, Principal: by, Event: event, Subject: subject})
}

// putAudit appends rec to the audit log, indexed by its plan, its plan's
// owner and its session.
func putAudit(tx *bolt.Tx, ref PlanRef, rec *cpv1.AuditRecord) error {
	audit := appending(tx.Bucket(bucketAudit))
	seq, err := audit.NextSequence()
	if err != nil {
		return err
	}
	rec.Sequence = int64(seq)
	if err := putProto(audit, u64(seq), rec); err != nil {
		return err
	}
	if ref.RequestID != "" { // an event of no plan (putEvent) is the actor's only
		owner, err := tx.Bucket(bucketAuditIdx).CreateBucketIfNotExists([]byte(ref.Owner))
		if err != nil {
			return err
		}
		idx, err := owner.CreateBucketIfNotExists([]byte(ref.RequestID))
		if err != nil {
			return err
		}
		if err := appending(idx).Put(u64(seq), nil); err != nil {
			return err
		}
	}
	byOwner, err := tx.Bucket(bucketAuditOwner).CreateBucketIfNotExists([]byte(ref.Owner))
	if err != nil {
		return err
	}
	if err := appending(byOwner).Put(u64(seq), nil); err != nil {
		return err
	}
	if err := indexMutation(tx, rec.GetBlenderMutationId(), u64(seq)); err != nil {
		return err
	}
	if rec.GetSessionId() == "" {
		return nil
	}
	bySession, err := tx.Bucket(bucketAuditSession).CreateBucketIfNotExists([]byte(rec.GetSessionId()))
	if err != nil {
		return err
	}
	return appending(bySession).Put(u64(seq), nil)
}

// The audit index by Blender mutation id. A mutation id is a hash, so a
// B-tree keyed by it takes each receipt's entry in a random leaf: every
// commit read, rebuilt and wrote back a leaf per receipt (a fifth of the
// control plane's allocations in durable runs). Entries are appended
// instead, to a tail keyed by audit sequence (its last leaf), and every
// mutationRun of them are folded into one run: entries of 8 bytes of the
// id's SHA-256 and the sequence, sorted, in one value. A lookup searches
// each run and scans the tail; the record itself then says whether it is
// the mutation's.
var mutationRun = 4096 // a variable: tests fold small runs

const mutationEntry = 16

func mutationKey(id string) []byte {
	sum := sha256.Sum256([]byte(id))
	return sum[:8]
}

// indexMutation notes audit record seq under its Blender mutation id.
func indexMutation(tx *bolt.Tx, mutationID string, seq []byte) error {
	if mutationID == "" {
		return nil
	}
	tail := appending(tx.Bucket(bucketMutationTail))
	if err := tail.Put(seq, []byte(mutationID)); err != nil {
		return err
	}
	n := tail.Sequence() + 1 // the tail's length
	if n < uint64(mutationRun) {
		return tail.SetSequence(n)
	}
	run := make([]byte, 0, n*mutationEntry)
	if err := tail.ForEach(func(k, v []byte) error {
		run = append(append(run, mutationKey(string(v))...), k...)
		return nil
	}); err != nil {
		return err
	}
	sortEntries(run)
	runs := tx.Bucket(bucketMutationRuns)
	id, err := runs.NextSequence()
	if err != nil {
		return err
	}
	if err := runs.Put(u64(id), run); err != nil {
		return err
	}
	// Emptied at once: its pages are freed, not rewritten key by key.
	if err := tx.DeleteBucket(bucketMutationTail); err != nil {
		return err
	}
	_, err = tx.CreateBucket(bucketMutationTail)
	return err
}

// sortEntries sorts a run's fixed-size entries in place.
func sortEntries(run []byte) {
	entries := make([][mutationEntry]byte, len(run)/mutationEntry)
	for i := range entries {
		copy(entries[i][:], run[i*mutationEntry:])
	}
	slices.SortFunc(entries, func(a, b [mutationEntry]byte) int { return bytes.Compare(a[:], b[:]) })
	for i := range entries {
		copy(run[i*mutationEntry:], entries[i][:])
	}
}

// mutationSeqs are the sequences of the audit records indexed under
// mutationID (and, rarely, of another id whose hash starts the same),
// ascending.
func mutationSeqs(tx *bolt.Tx, mutationID string) ([]uint64, error) {
	key := mutationKey(mutationID)
	var seqs []uint64
	err := tx.Bucket(bucketMutationRuns).ForEach(func(_, run []byte) error {
		n := len(run) / mutationEntry
		at := func(i int) []byte { return run[i*mutationEntry : i*mutationEntry+8] }
		for i := sort.Search(n, func(i int) bool { return bytes.Compare(at(i), key) >= 0 }); i < n && bytes.Equal(at(i), key); i++ {
			seqs = append(seqs, binary.BigEndian.Uint64(run[i*mutationEntry+8:]))
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	err = tx.Bucket(bucketMutationTail).ForEach(func(k, v []byte) error {
		if string(v) == mutationID {
			seqs = append(seqs, binary.BigEndian.Uint64(k))
		}
		return nil
	})
	slices.Sort(seqs)
	return seqs, err
}

// AuditFilter selects audit records: of one owner's plan (Owner and
// RequestID), of one owner (Owner), or all (neither); of those, the ones of
// an operation id (OperationID) or a Blender mutation id (MutationID) only,
// when set.
type AuditFilter struct {
	Owner, RequestID, OperationID, MutationID string
}

func (f AuditFilter) keep(rec *cpv1.AuditRecord) bool {
	if f.MutationID != "" {
		// Read through the mutation index, not the owner's or the plan's:
		// a mutation's records are operation records, whose principal is
		// the plan's owner.
		return rec.GetBlenderMutationId() == f.MutationID &&
			(f.Owner == "" || rec.GetPrincipal() == f.Owner) &&
			(f.RequestID == "" || rec.GetRequestId() == f.RequestID) &&
			(f.OperationID == "" || rec.GetOperationId() == f.OperationID)
	}
	return f.OperationID == "" || rec.GetOperationId() == f.OperationID
}

// AuditRecords returns up to limit audit records with sequence > after,
// oldest first, that match f. next is the last sequence returned when more
// may follow, else 0.
func (s *Store) AuditRecords(f AuditFilter, after uint64, limit int) (records []*cpv1.AuditRecord, next uint64, err error) {
	err = s.db.View(func(tx *bolt.Tx) error {
		audit := tx.Bucket(bucketAudit)
		keys, err := auditKeys(tx, f, after)
		if err != nil {
			return err
		}
		for k := range keys {
			rec := &cpv1.AuditRecord{}
			if err := getProto(audit, k, rec); err != nil {
				return err
			}
			if !f.keep(rec) {
				continue
			}
			if len(records) == limit {
				next = uint64(records[len(records)-1].GetSequence())
				return nil
			}
			records = append(records, rec)
		}
		return nil
	})
	return records, next, err
}

// auditKeys are the keys (sequences) of the audit records after after that
// f's index holds, ascending.
func auditKeys(tx *bolt.Tx, f AuditFilter, after uint64) (iter.Seq[[]byte], error) {
	if f.MutationID != "" {
		seqs, err := mutationSeqs(tx, f.MutationID)
		return func(yield func([]byte) bool) {
			for _, seq := range seqs {
				if seq > after && !yield(u64(seq)) {
					return
				}
			}
		}, err
	}
	var idx *bolt.Bucket
	switch {
	case f.Owner == "":
		idx = tx.Bucket(bucketAudit)
	case f.RequestID == "":
		idx = tx.Bucket(bucketAuditOwner).Bucket([]byte(f.Owner))
	default:
		if owner := tx.Bucket(bucketAuditIdx).Bucket([]byte(f.Owner)); owner != nil {
			idx = owner.Bucket([]byte(f.RequestID))
		}
	}
	return func(yield func([]byte) bool) {
		if idx == nil {
			return
		}
		c := idx.Cursor()
		for k, _ := c.Seek(u64(after + 1)); k != nil && yield(k); k, _ = c.Next() {
		}
	}, nil
}
