// Package store keeps the control plane's durable state in one bbolt file:
// sessions, plans, their receipts, and the queue of plans still to finish.
//
// Bucket tree (every key is a named variable below):
//
//	meta/
//	  schema_version        → uint64, big endian (currently 2)
//	sessions/
//	  <session_id>/
//	    contract            → SessionContract (proto)
//	    agent_address       → host:port the session's agent serves on
//	    runtime_id          → the agent runtime the session runs in
//	    registry            → ToolRegistry (proto), what plans are checked against
//	plans/
//	  <request_id>/
//	    plan                → Plan (proto) without its schedule
//	    request             → SubmitPlanRequest (proto) as accepted
//	    schedule            → operation indices in execution order, uint32 big endian each
//	    digest              → content digest, to tell a resubmission from a conflict
//	    receipts/
//	      <sequence>        → Receipt (proto), key uint64 big endian
//	active/
//	  <order>               → request_id of a plan that is not terminal yet, in submission order
//	audit/                  (schema 2)
//	  <sequence>            → AuditRecord (proto), append-only, key uint64 big endian
//	audit_by_plan/          (schema 2)
//	  <request_id>/
//	    <sequence>          → empty: index of the plan's audit records
//
// Receipts are committed before anyone can read them; Watch lets a stream
// wait for the next commit of a plan without polling.
package store

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"time"

	bolt "go.etcd.io/bbolt"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	cpv1 "github.com/blendplane/blendplane/gen/blendplane/controlplane/v1"
)

const schemaVersion = 2

var (
	bucketMeta     = []byte("meta")
	bucketSessions = []byte("sessions")
	bucketPlans    = []byte("plans")
	bucketActive   = []byte("active")
	bucketReceipts = []byte("receipts")
	bucketAudit    = []byte("audit")
	bucketAuditIdx = []byte("audit_by_plan")

	keySchemaVersion = []byte("schema_version")
	keyContract      = []byte("contract")
	keyAgentAddress  = []byte("agent_address")
	keyRuntimeID     = []byte("runtime_id")
	keyRegistry      = []byte("registry")
	keyPlan          = []byte("plan")
	keyRequest       = []byte("request")
	keySchedule      = []byte("schedule")
	keyDigest        = []byte("digest")
)

var (
	// ErrSessionNotFound: no session with that id.
	ErrSessionNotFound = errors.New("session not found")
	// ErrPlanNotFound: no plan with that request id.
	ErrPlanNotFound = errors.New("plan not found")
	// ErrPlanExists: a plan with that request id was already accepted.
	ErrPlanExists = errors.New("plan already exists")
	// ErrRuntimeNotFound: no registered agent offers that runtime.
	ErrRuntimeNotFound = errors.New("runtime not found")
)

// Session is a negotiated session and where it runs.
type Session struct {
	Contract     *cpv1.SessionContract
	AgentAddress string
	RuntimeID    string
	Registry     *cpv1.ToolRegistry
}

// NewPlan is everything stored when a plan is accepted.
type NewPlan struct {
	Plan     *cpv1.Plan // without schedule
	Request  *cpv1.SubmitPlanRequest
	Schedule []int
	Digest   string
}

// Store is the control plane's bbolt database.
type Store struct {
	db *bolt.DB

	mu       sync.Mutex
	watchers map[string]chan struct{}
	progress map[string]*cpv1.Progress // live only, by request id
}

// Open opens (creating if needed) the database at path and migrates it.
func Open(path string) (*Store, error) {
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: 5 * time.Second})
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	s := &Store{db: db, watchers: map[string]chan struct{}{}, progress: map[string]*cpv1.Progress{}}
	if err := s.migrate(); err != nil {
		db.Close()
		return nil, err
	}
	return s, nil
}

// Close closes the database.
func (s *Store) Close() error { return s.db.Close() }

// migrations[i] upgrades a database from schema version i to i+1.
var migrations = []func(tx *bolt.Tx) error{
	// 0 → 1: the initial bucket tree.
	func(tx *bolt.Tx) error {
		for _, b := range [][]byte{bucketSessions, bucketPlans, bucketActive} {
			if _, err := tx.CreateBucketIfNotExists(b); err != nil {
				return err
			}
		}
		return nil
	},
	// 1 → 2: the audit log, recorded from now on.
	func(tx *bolt.Tx) error {
		for _, b := range [][]byte{bucketAudit, bucketAuditIdx} {
			if _, err := tx.CreateBucketIfNotExists(b); err != nil {
				return err
			}
		}
		return nil
	},
}

func (s *Store) migrate() error {
	return s.db.Update(func(tx *bolt.Tx) error {
		meta, err := tx.CreateBucketIfNotExists(bucketMeta)
		if err != nil {
			return err
		}
		var version uint64
		if v := meta.Get(keySchemaVersion); v != nil {
			version = binary.BigEndian.Uint64(v)
		}
		if version > uint64(len(migrations)) {
			return fmt.Errorf("store schema version %d is newer than this binary's %d", version, len(migrations))
		}
		for ; version < uint64(len(migrations)); version++ {
			if err := migrations[version](tx); err != nil {
				return fmt.Errorf("migrate store to version %d: %w", version+1, err)
			}
		}
		return meta.Put(keySchemaVersion, u64(version))
	})
}

// PutSession stores a new session.
func (s *Store) PutSession(sess Session) error {
	return s.db.Update(func(tx *bolt.Tx) error {
		b, err := tx.Bucket(bucketSessions).CreateBucketIfNotExists([]byte(sess.Contract.GetSessionId()))
		if err != nil {
			return err
		}
		if err := putProto(b, keyContract, sess.Contract); err != nil {
			return err
		}
		if err := putProto(b, keyRegistry, sess.Registry); err != nil {
			return err
		}
		if err := b.Put(keyAgentAddress, []byte(sess.AgentAddress)); err != nil {
			return err
		}
		return b.Put(keyRuntimeID, []byte(sess.RuntimeID))
	})
}

// Session returns a stored session.
func (s *Store) Session(id string) (Session, error) {
	var sess Session
	err := s.db.View(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketSessions).Bucket([]byte(id))
		if b == nil {
			return fmt.Errorf("session %q: %w", id, ErrSessionNotFound)
		}
		sess.Contract = &cpv1.SessionContract{}
		sess.Registry = &cpv1.ToolRegistry{}
		if err := getProto(b, keyContract, sess.Contract); err != nil {
			return err
		}
		if err := getProto(b, keyRegistry, sess.Registry); err != nil {
			return err
		}
		sess.AgentAddress = string(b.Get(keyAgentAddress))
		sess.RuntimeID = string(b.Get(keyRuntimeID))
		return nil
	})
	return sess, err
}

// CreatePlan stores an accepted plan and queues it as active. It fails with
// ErrPlanExists when the request id is taken, returning the stored digest.
func (s *Store) CreatePlan(p NewPlan) (existingDigest string, err error) {
	id := []byte(p.Plan.GetRequestId())
	err = s.db.Update(func(tx *bolt.Tx) error {
		plans := tx.Bucket(bucketPlans)
		if b := plans.Bucket(id); b != nil {
			existingDigest = string(b.Get(keyDigest))
			return fmt.Errorf("plan %q: %w", id, ErrPlanExists)
		}
		b, err := plans.CreateBucket(id)
		if err != nil {
			return err
		}
		if _, err := b.CreateBucket(bucketReceipts); err != nil {
			return err
		}
		if err := putProto(b, keyPlan, p.Plan); err != nil {
			return err
		}
		if err := putProto(b, keyRequest, p.Request); err != nil {
			return err
		}
		sched := make([]byte, 4*len(p.Schedule))
		for i, idx := range p.Schedule {
			binary.BigEndian.PutUint32(sched[4*i:], uint32(idx))
		}
		if err := b.Put(keySchedule, sched); err != nil {
			return err
		}
		if err := b.Put(keyDigest, []byte(p.Digest)); err != nil {
			return err
		}
		active := tx.Bucket(bucketActive)
		order, err := active.NextSequence()
		if err != nil {
			return err
		}
		return active.Put(u64(order), id)
	})
	return existingDigest, err
}

// Plan returns a stored plan including its schedule as operation ids.
func (s *Store) Plan(requestID string) (*cpv1.Plan, error) {
	var plan *cpv1.Plan
	err := s.db.View(func(tx *bolt.Tx) error {
		b, err := planBucket(tx, requestID)
		if err != nil {
			return err
		}
		plan = &cpv1.Plan{}
		if err := getProto(b, keyPlan, plan); err != nil {
			return err
		}
		req := &cpv1.SubmitPlanRequest{}
		if err := getProto(b, keyRequest, req); err != nil {
			return err
		}
		for _, idx := range decodeSchedule(b.Get(keySchedule)) {
			plan.Schedule = append(plan.Schedule, req.GetOperations()[idx].GetOperationId())
		}
		return nil
	})
	return plan, err
}

// PlanState returns a plan without its schedule: cheap, for progress checks.
func (s *Store) PlanState(requestID string) (*cpv1.Plan, error) {
	plan := &cpv1.Plan{}
	err := s.db.View(func(tx *bolt.Tx) error {
		b, err := planBucket(tx, requestID)
		if err != nil {
			return err
		}
		return getProto(b, keyPlan, plan)
	})
	return plan, err
}

// PlanWork returns what the executor needs to run or resume a plan.
func (s *Store) PlanWork(requestID string) (*cpv1.Plan, *cpv1.SubmitPlanRequest, []int, error) {
	plan, req := &cpv1.Plan{}, &cpv1.SubmitPlanRequest{}
	var sched []int
	err := s.db.View(func(tx *bolt.Tx) error {
		b, err := planBucket(tx, requestID)
		if err != nil {
			return err
		}
		if err := getProto(b, keyPlan, plan); err != nil {
			return err
		}
		if err := getProto(b, keyRequest, req); err != nil {
			return err
		}
		sched = decodeSchedule(b.Get(keySchedule))
		return nil
	})
	return plan, req, sched, err
}

// ActivePlans lists the request ids of plans that are not terminal, in the
// order they were submitted.
func (s *Store) ActivePlans() ([]string, error) {
	var ids []string
	err := s.db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketActive).ForEach(func(_, v []byte) error {
			ids = append(ids, string(v))
			return nil
		})
	})
	return ids, err
}

// Commit appends receipts to a plan, with one audit record each, and stores
// its new state in one transaction. Receipts must continue the plan's
// sequence without a gap. A plan whose new state is terminal leaves the
// active queue. Watchers of the plan are woken after the commit.
func (s *Store) Commit(plan *cpv1.Plan, receipts []*cpv1.Receipt) error {
	requestID := plan.GetRequestId()
	err := s.db.Update(func(tx *bolt.Tx) error {
		b, err := planBucket(tx, requestID)
		if err != nil {
			return err
		}
		rb := b.Bucket(bucketReceipts)
		next := uint64(1)
		if k, _ := rb.Cursor().Last(); k != nil {
			next = binary.BigEndian.Uint64(k) + 1
		}
		for _, r := range receipts {
			if uint64(r.GetSequence()) != next {
				return fmt.Errorf("plan %q: receipt sequence %d, want %d", requestID, r.GetSequence(), next)
			}
			if err := putProto(rb, u64(next), r); err != nil {
				return err
			}
			if err := appendAudit(tx, plan.GetSessionId(), requestID, r); err != nil {
				return err
			}
			next++
		}
		stored := proto.Clone(plan).(*cpv1.Plan)
		stored.Schedule = nil
		stored.ReceiptCount = int64(next - 1)
		stored.UpdateTime = timestamppb.Now()
		if err := putProto(b, keyPlan, stored); err != nil {
			return err
		}
		if isTerminal(stored.GetState()) {
			return removeActive(tx, requestID)
		}
		return nil
	})
	if err == nil {
		s.wake(requestID)
	}
	return err
}

func appendAudit(tx *bolt.Tx, sessionID, requestID string, r *cpv1.Receipt) error {
	audit := tx.Bucket(bucketAudit)
	seq, err := audit.NextSequence()
	if err != nil {
		return err
	}
	ts := r.GetCompleteTime()
	if ts == nil {
		ts = timestamppb.Now()
	}
	rec := &cpv1.AuditRecord{
		Timestamp: ts, RequestId: requestID, OperationId: r.GetOperationId(),
		McpCallId: r.GetMcpCallId(), BlenderMutationId: r.GetBlenderMutationId(), ToolName: r.GetToolName(),
		SafetyLevel: r.GetSafetyLevel(), Status: r.GetStatus(), SceneHashBefore: r.GetSceneHashBefore(),
		SceneHashAfter: r.GetSceneHashAfter(), SessionId: sessionID, Sequence: int64(seq),
		ErrorCode: r.GetError().GetErrorCode(),
	}
	if err := putProto(audit, u64(seq), rec); err != nil {
		return err
	}
	idx, err := tx.Bucket(bucketAuditIdx).CreateBucketIfNotExists([]byte(requestID))
	if err != nil {
		return err
	}
	return idx.Put(u64(seq), nil)
}

// AuditRecords returns up to limit audit records with sequence > after,
// oldest first, of one plan or (requestID empty) of all. next is the last
// sequence returned when more may follow, else 0.
func (s *Store) AuditRecords(requestID string, after uint64, limit int) (records []*cpv1.AuditRecord, next uint64, err error) {
	err = s.db.View(func(tx *bolt.Tx) error {
		audit := tx.Bucket(bucketAudit)
		var c *bolt.Cursor
		if requestID == "" {
			c = audit.Cursor()
		} else if idx := tx.Bucket(bucketAuditIdx).Bucket([]byte(requestID)); idx != nil {
			c = idx.Cursor()
		} else {
			return nil
		}
		for k, _ := c.Seek(u64(after + 1)); k != nil; k, _ = c.Next() {
			if len(records) == limit {
				next = uint64(records[len(records)-1].GetSequence())
				return nil
			}
			rec := &cpv1.AuditRecord{}
			if err := getProto(audit, k, rec); err != nil {
				return err
			}
			records = append(records, rec)
		}
		return nil
	})
	return records, next, err
}

// Receipts returns up to limit receipts of a plan with sequence ≥ from.
func (s *Store) Receipts(requestID string, from int64, limit int) ([]*cpv1.Receipt, error) {
	if from < 1 {
		from = 1
	}
	var out []*cpv1.Receipt
	err := s.db.View(func(tx *bolt.Tx) error {
		b, err := planBucket(tx, requestID)
		if err != nil {
			return err
		}
		c := b.Bucket(bucketReceipts).Cursor()
		for k, v := c.Seek(u64(uint64(from))); k != nil && len(out) < limit; k, v = c.Next() {
			r := &cpv1.Receipt{}
			if err := proto.Unmarshal(v, r); err != nil {
				return fmt.Errorf("decode receipt %d of %q: %w", binary.BigEndian.Uint64(k), requestID, err)
			}
			out = append(out, r)
		}
		return nil
	})
	return out, err
}

// Watch returns a channel that is closed at the next commit to the plan.
// Take the channel before reading, so no commit can slip between.
func (s *Store) Watch(requestID string) <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	ch, ok := s.watchers[requestID]
	if !ok {
		ch = make(chan struct{})
		s.watchers[requestID] = ch
	}
	return ch
}

// PublishProgress records the latest progress of a plan's running operation
// and wakes its watchers. Progress lives in memory only; a commit clears it.
func (s *Store) PublishProgress(requestID string, p *cpv1.Progress) {
	s.mu.Lock()
	s.progress[requestID] = p
	s.mu.Unlock()
	s.wakeOnly(requestID)
}

// Progress returns the latest progress of a plan, or nil.
func (s *Store) Progress(requestID string) *cpv1.Progress {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.progress[requestID]
}

func (s *Store) wake(requestID string) {
	s.mu.Lock()
	delete(s.progress, requestID)
	s.mu.Unlock()
	s.wakeOnly(requestID)
}

func (s *Store) wakeOnly(requestID string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if ch, ok := s.watchers[requestID]; ok {
		close(ch)
		delete(s.watchers, requestID)
	}
}

// IsTerminal reports whether a plan in this state will not change any more.
func IsTerminal(st cpv1.Plan_State) bool { return isTerminal(st) }

func isTerminal(st cpv1.Plan_State) bool {
	switch st {
	case cpv1.Plan_STATE_VALIDATED, cpv1.Plan_STATE_SUCCEEDED, cpv1.Plan_STATE_FAILED, cpv1.Plan_STATE_CANCELLED:
		return true
	}
	return false
}

func removeActive(tx *bolt.Tx, requestID string) error {
	active := tx.Bucket(bucketActive)
	c := active.Cursor()
	for k, v := c.First(); k != nil; k, v = c.Next() {
		if string(v) == requestID {
			return active.Delete(k)
		}
	}
	return nil
}

func planBucket(tx *bolt.Tx, requestID string) (*bolt.Bucket, error) {
	b := tx.Bucket(bucketPlans).Bucket([]byte(requestID))
	if b == nil {
		return nil, fmt.Errorf("plan %q: %w", requestID, ErrPlanNotFound)
	}
	return b, nil
}

func decodeSchedule(raw []byte) []int {
	out := make([]int, len(raw)/4)
	for i := range out {
		out[i] = int(binary.BigEndian.Uint32(raw[4*i:]))
	}
	return out
}

func putProto(b *bolt.Bucket, key []byte, m proto.Message) error {
	raw, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
	if err != nil {
		return fmt.Errorf("encode %s: %w", key, err)
	}
	return b.Put(key, raw)
}

func getProto(b *bolt.Bucket, key []byte, m proto.Message) error {
	raw := b.Get(key)
	if raw == nil {
		return fmt.Errorf("missing key %s", key)
	}
	if err := proto.Unmarshal(raw, m); err != nil {
		return fmt.Errorf("decode %s: %w", key, err)
	}
	return nil
}

func u64(v uint64) []byte {
	b := make([]byte, 8)
	binary.BigEndian.PutUint64(b, v)
	return b
}
