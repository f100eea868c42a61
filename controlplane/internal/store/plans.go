package store

import (
	"encoding/binary"
	"fmt"
	"strings"

	bolt "go.etcd.io/bbolt"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	cpv1 "github.com/blendplane/blendplane/gen/blendplane/controlplane/v1"
	"github.com/blendplane/blendplane/internal/receiptwire"
)

// PlanRef names a plan: request ids are unique per owner, so one client's
// ids never collide with another's. Owner names never contain "/".
type PlanRef struct {
	Owner, RequestID string
}

func (r PlanRef) String() string { return r.Owner + "/" + r.RequestID }

func parsePlanRef(s string) PlanRef {
	owner, id, _ := strings.Cut(s, "/")
	return PlanRef{Owner: owner, RequestID: id}
}

// NewPlan is everything stored when a plan is accepted.
type NewPlan struct {
	Owner    string
	Plan     *cpv1.Plan // without schedule
	Request  *cpv1.SubmitPlanRequest
	Schedule []int
	Digest   string
	// Policy is what the policy decided per operation id (for the audit).
	Policy map[string]OpPolicy
	// Approval, when set, is the approval the plan waits for: it is stored
	// with the plan (given its id, also set as Plan.approval_id), and the
	// plan is stored STATE_AWAITING_APPROVAL.
	Approval *cpv1.Approval
}

// CreatePlan stores an accepted plan, queues it as active and counts it in
// its session. It fails with ErrPlanExists when the owner already used the
// request id, returning the stored digest.
func (s *Store) CreatePlan(p NewPlan) (existingDigest string, err error) {
	id := []byte(p.Plan.GetRequestId())
	err = s.update(func(tx *bolt.Tx) error {
		if at, err := readPlacement(tx, p.Plan.GetSessionId()); err == nil && at.Closed() {
			return fmt.Errorf("session %s: %w", p.Plan.GetSessionId(), ErrSessionClosed)
		}
		plans, err := tx.Bucket(bucketPlans).CreateBucketIfNotExists([]byte(p.Owner))
		if err != nil {
			return err
		}
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
		body, err := b.CreateBucket(bucketPlanBody)
		if err != nil {
			return err
		}
		if err := putProto(body, keyRequest, p.Request); err != nil {
			return err
		}
		sched := make([]byte, 4*len(p.Schedule))
		for i, idx := range p.Schedule {
			binary.BigEndian.PutUint32(sched[4*i:], uint32(idx))
		}
		if err := body.Put(keySchedule, sched); err != nil {
			return err
		}
		if err := b.Put(keyDigest, []byte(p.Digest)); err != nil {
			return err
		}
		if err := putOpPolicies(body, p.Policy); err != nil {
			return err
		}
		if p.Approval != nil {
			if err := putApproval(tx, p.Approval); err != nil {
				return err
			}
			p.Plan.ApprovalId, p.Plan.State = p.Approval.GetApprovalId(), cpv1.Plan_STATE_AWAITING_APPROVAL
		}
		if err := putProto(b, keyPlan, p.Plan); err != nil {
			return err
		}
		active := tx.Bucket(bucketActive)
		order, err := active.NextSequence()
		if err != nil {
			return err
		}
		if err := active.Put(u64(order), []byte(PlanRef{p.Owner, string(id)}.String())); err != nil {
			return err
		}
		if err := indexSessionPlan(tx, p.Plan.GetSessionId(), PlanRef{p.Owner, string(id)}); err != nil {
			return err
		}
		return touchSession(tx, p.Plan.GetSessionId(), 1, 1, "")
	})
	return existingDigest, err
}

// indexSessionPlan appends a plan to its session's plans.
func indexSessionPlan(tx *bolt.Tx, sessionID string, ref PlanRef) error {
	b, err := tx.Bucket(bucketSessionPlans).CreateBucketIfNotExists([]byte(sessionID))
	if err != nil {
		return err
	}
	seq, err := b.NextSequence()
	if err != nil {
		return err
	}
	return b.Put(u64(seq), []byte(ref.String()))
}

// SessionPlans returns up to limit plans of a session (without their
// schedules), newest first, accepted before position before (0: from the
// newest), those of owner only unless owner is empty. next is the position
// of the last one returned when more may follow, else 0.
func (s *Store) SessionPlans(sessionID, owner string, before uint64, limit int) (out []*cpv1.Plan, next uint64, err error) {
	err = s.db.View(func(tx *bolt.Tx) error {
		idx := tx.Bucket(bucketSessionPlans).Bucket([]byte(sessionID))
		if idx == nil {
			return nil
		}
		c := idx.Cursor()
		k, v := c.Last()
		if before != 0 {
			if k, _ = c.Seek(u64(before)); k != nil {
				k, v = c.Prev()
			} else {
				k, v = c.Last()
			}
		}
		var last []byte
		for ; k != nil; k, v = c.Prev() {
			ref := parsePlanRef(string(v))
			if owner != "" && ref.Owner != owner {
				continue
			}
			if len(out) == limit {
				next = binary.BigEndian.Uint64(last)
				return nil
			}
			_, p, err := readPlan(tx, ref)
			if err != nil {
				return err
			}
			out = append(out, p)
			last = k
		}
		return nil
	})
	return out, next, err
}

// Plan returns a stored plan including its schedule as operation ids.
func (s *Store) Plan(ref PlanRef) (*cpv1.Plan, error) {
	var plan *cpv1.Plan
	err := s.db.View(func(tx *bolt.Tx) error {
		b, p, err := readPlan(tx, ref)
		if err != nil {
			return err
		}
		plan = p
		req := &cpv1.SubmitPlanRequest{}
		body := b.Bucket(bucketPlanBody)
		if err := getProto(body, keyRequest, req); err != nil {
			return err
		}
		sched, err := checkedSchedule(ref, body.Get(keySchedule), req)
		for _, idx := range sched {
			plan.Schedule = append(plan.Schedule, req.GetOperations()[idx].GetOperationId())
		}
		return err
	})
	return plan, err
}

// PlanState returns a plan without its schedule: cheap, for progress checks.
func (s *Store) PlanState(ref PlanRef) (*cpv1.Plan, error) {
	var plan *cpv1.Plan
	err := s.db.View(func(tx *bolt.Tx) (err error) {
		_, plan, err = readPlan(tx, ref)
		return err
	})
	return plan, err
}

// PlanWork returns what the executor needs to run or resume a plan.
func (s *Store) PlanWork(ref PlanRef) (*cpv1.Plan, *cpv1.SubmitPlanRequest, []int, error) {
	var plan *cpv1.Plan
	req := &cpv1.SubmitPlanRequest{}
	var sched []int
	err := s.db.View(func(tx *bolt.Tx) error {
		b, p, err := readPlan(tx, ref)
		if err != nil {
			return err
		}
		plan = p
		body := b.Bucket(bucketPlanBody)
		if err := getProto(body, keyRequest, req); err != nil {
			return err
		}
		sched, err = checkedSchedule(ref, body.Get(keySchedule), req)
		return err
	})
	return plan, req, sched, err
}

// checkedSchedule decodes a plan's schedule: a position outside its
// operations (a damaged file) is an error, not a panic of the executor,
// which would then crash the control plane at every start.
func checkedSchedule(ref PlanRef, raw []byte, req *cpv1.SubmitPlanRequest) ([]int, error) {
	sched := decodeSchedule(raw)
	for _, idx := range sched {
		if idx < 0 || idx >= len(req.GetOperations()) {
			return nil, fmt.Errorf("plan %s is damaged: its schedule names operation %d of %d", ref, idx, len(req.GetOperations()))
		}
	}
	return sched, nil
}

// ActivePlans lists the plans that are not terminal, in the order they were
// submitted.
func (s *Store) ActivePlans() ([]PlanRef, error) {
	var refs []PlanRef
	err := s.db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketActive).ForEach(func(_, v []byte) error {
			refs = append(refs, parsePlanRef(string(v)))
			return nil
		})
	})
	return refs, err
}

// Commit appends receipts to a plan, with one audit record each, and stores
// its new state, in one transaction. Receipts must continue the plan's
// sequence without a gap. A plan whose new state is terminal leaves the
// active queue. The session's scene hash follows the receipts. Watchers of
// the plan are woken after the commit.
func (s *Store) Commit(ref PlanRef, plan *cpv1.Plan, receipts []*cpv1.Receipt) error {
	size, ended := 0, false
	err := s.update(func(tx *bolt.Tx) error {
		size = 0
		b, err := planBucket(tx, ref)
		if err != nil {
			return err
		}
		was := &cpv1.Plan{}
		if err := getProto(b, keyPlan, was); err != nil {
			return err
		}
		if err := checkEpochs(tx, plan.GetSessionId(), receipts); err != nil {
			return err
		}
		pol := readOpPolicies(tx, b, was)
		rb := appending(b.Bucket(bucketReceipts))
		next := uint64(1)
		if k, _ := rb.Cursor().Last(); k != nil {
			next = binary.BigEndian.Uint64(k) + 1
		}
		sceneHash := ""
		for _, r := range receipts {
			if uint64(r.GetSequence()) != next {
				return fmt.Errorf("plan %s: receipt sequence %d, want %d", ref, r.GetSequence(), next)
			}
			raw, err := proto.MarshalOptions{Deterministic: true}.Marshal(r)
			if err != nil {
				return fmt.Errorf("encode receipt %d: %w", next, err)
			}
			if err := rb.Put(u64(next), raw); err != nil {
				return err
			}
			size += len(raw)
			if err := appendAudit(tx, ref, plan.GetSessionId(), r, pol); err != nil {
				return err
			}
			if h := r.GetSceneHashAfter(); h != "" {
				sceneHash = h
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
		ended = IsTerminal(stored.GetState()) && !IsTerminal(was.GetState())
		var active int64
		if ended {
			active = -1
			if err := removeActive(tx, ref); err != nil {
				return err
			}
		}
		return touchSession(tx, plan.GetSessionId(), 0, active, sceneHash)
	})
	if err == nil {
		if len(receipts) > 0 {
			s.keepTail(ref, receipts, size)
		}
		s.observe(plan, receipts, ended)
		s.wake(ref)
	}
	return err
}

// Receipts returns up to limit receipts of a plan with sequence ≥ from.
func (s *Store) Receipts(ref PlanRef, from int64, limit int) ([]*cpv1.Receipt, error) {
	if from < 1 {
		from = 1
	}
	if out, ok := s.fromTail(ref, from, limit); ok {
		return out, nil
	}
	return s.readReceipts(ref, from, limit)
}

func (s *Store) readReceipts(ref PlanRef, from int64, limit int) ([]*cpv1.Receipt, error) {
	var out []*cpv1.Receipt
	err := s.db.View(func(tx *bolt.Tx) error {
		b, err := planBucket(tx, ref)
		if err != nil {
			return err
		}
		c := b.Bucket(bucketReceipts).Cursor()
		for k, v := c.Seek(u64(uint64(from))); k != nil && len(out) < limit; k, v = c.Next() {
			r := &cpv1.Receipt{}
			if err := receiptwire.Unmarshal(v, r); err != nil { // results pass through
				return fmt.Errorf("decode receipt %d of %s: %w", binary.BigEndian.Uint64(k), ref, err)
			}
			out = append(out, r)
		}
		return nil
	})
	return out, err
}

// IsTerminal reports whether a plan in this state will not change any more.
func IsTerminal(st cpv1.Plan_State) bool {
	switch st {
	case cpv1.Plan_STATE_VALIDATED, cpv1.Plan_STATE_SUCCEEDED, cpv1.Plan_STATE_FAILED, cpv1.Plan_STATE_CANCELLED:
		return true
	}
	return false
}

func removeActive(tx *bolt.Tx, ref PlanRef) error {
	active := tx.Bucket(bucketActive)
	want := ref.String()
	c := active.Cursor()
	for k, v := c.First(); k != nil; k, v = c.Next() {
		if string(v) == want {
			return active.Delete(k)
		}
	}
	return nil
}

// readPlan returns a plan's bucket and its stored state (without its
// schedule), owner set.
func readPlan(tx *bolt.Tx, ref PlanRef) (*bolt.Bucket, *cpv1.Plan, error) {
	b, err := planBucket(tx, ref)
	if err != nil {
		return nil, nil, err
	}
	p := &cpv1.Plan{}
	if err := getProto(b, keyPlan, p); err != nil {
		return nil, nil, err
	}
	p.Owner = ref.Owner
	return b, p, nil
}

func planBucket(tx *bolt.Tx, ref PlanRef) (*bolt.Bucket, error) {
	if owner := tx.Bucket(bucketPlans).Bucket([]byte(ref.Owner)); owner != nil {
		if b := owner.Bucket([]byte(ref.RequestID)); b != nil {
			return b, nil
		}
	}
	return nil, fmt.Errorf("plan %q: %w", ref.RequestID, ErrPlanNotFound)
}

func decodeSchedule(raw []byte) []int {
	out := make([]int, len(raw)/4)
	for i := range out {
		out[i] = int(binary.BigEndian.Uint32(raw[4*i:]))
	}
	return out
}
