package store

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	bolt "go.etcd.io/bbolt"
	"google.golang.org/protobuf/types/known/timestamppb"

	cpv1 "github.com/blendplane/blendplane/gen/blendplane/controlplane/v1"
)

var (
	// ErrApprovalNotFound: no approval with that id.
	ErrApprovalNotFound = errors.New("approval not found")
	// ErrApprovalResolved: the approval was resolved (or its plan
	// cancelled) already.
	ErrApprovalResolved = errors.New("approval already resolved")
	// ErrRuleNotFound: no persisted policy rule with that id.
	ErrRuleNotFound = errors.New("policy rule not found")
)

// ErrorApprovalRejected is the error code of a plan whose approval was
// rejected.
const ErrorApprovalRejected = "APPROVAL_REJECTED"

// OpPolicy is what the policy decided for one operation, kept with its plan
// for the operation's audit record.
type OpPolicy struct {
	Decision  string // allow, require_approval
	InputHash string
	Rule      string // the rule that decided (policy.Decision.Rule)
}

// approvalKey is the key of approval "apr-<n>" (n its sequence).
func approvalKey(id string) ([]byte, bool) {
	n, err := strconv.ParseUint(strings.TrimPrefix(id, "apr-"), 10, 64)
	if err != nil || !strings.HasPrefix(id, "apr-") || n == 0 {
		return nil, false
	}
	return u64(n), true
}

// putApproval gives a new approval its id and stores it.
func putApproval(tx *bolt.Tx, a *cpv1.Approval) error {
	b := tx.Bucket(bucketApprovals)
	seq, err := b.NextSequence()
	if err != nil {
		return err
	}
	a.ApprovalId = fmt.Sprintf("apr-%d", seq)
	return putProto(b, u64(seq), a)
}

func readApproval(tx *bolt.Tx, id string) (*cpv1.Approval, []byte, error) {
	key, ok := approvalKey(id)
	if !ok || tx.Bucket(bucketApprovals).Get(key) == nil {
		return nil, nil, fmt.Errorf("approval %q: %w", id, ErrApprovalNotFound)
	}
	a := &cpv1.Approval{}
	return a, key, getProto(tx.Bucket(bucketApprovals), key, a)
}

// Approval returns an approval by id.
func (s *Store) Approval(id string) (*cpv1.Approval, error) {
	var a *cpv1.Approval
	err := s.db.View(func(tx *bolt.Tx) (err error) {
		a, _, err = readApproval(tx, id)
		return err
	})
	return a, err
}

// SetPreview stores the preview of an approval, whatever its state.
func (s *Store) SetPreview(id string, p *cpv1.Preview) error {
	var ref PlanRef
	err := s.update(func(tx *bolt.Tx) error {
		a, key, err := readApproval(tx, id)
		if err != nil {
			return err
		}
		a.Preview = p
		ref = PlanRef{a.GetRequestedBy(), a.GetRequestId()}
		return putProto(tx.Bucket(bucketApprovals), key, a)
	})
	if err == nil {
		s.wake(ref)
	}
	return err
}

// ApprovalFilter selects approvals: of one owner's plans (Owner; "" all),
// in one state (0 all), of one plan (RequestID, with Owner).
type ApprovalFilter struct {
	Owner     string
	State     cpv1.Approval_State
	RequestID string
}

// Approvals returns up to limit approvals with sequence < before (0: from
// the newest), newest first. next is the sequence to pass as before for
// the next page, 0 on the last.
func (s *Store) Approvals(f ApprovalFilter, before uint64, limit int) (out []*cpv1.Approval, next uint64, err error) {
	err = s.db.View(func(tx *bolt.Tx) error {
		c := tx.Bucket(bucketApprovals).Cursor()
		var k, v []byte
		if before == 0 {
			k, v = c.Last()
		} else {
			c.Seek(u64(before))
			k, v = c.Prev()
		}
		for ; k != nil; k, v = c.Prev() {
			a := &cpv1.Approval{}
			if err := unmarshal(v, a); err != nil {
				return err
			}
			if f.Owner != "" && a.GetRequestedBy() != f.Owner || f.State != 0 && a.GetState() != f.State ||
				f.RequestID != "" && a.GetRequestId() != f.RequestID {
				continue
			}
			if len(out) == limit {
				next = u64val(out[len(out)-1].GetApprovalId())
				return nil
			}
			out = append(out, a)
		}
		return nil
	})
	return out, next, err
}

func u64val(approvalID string) uint64 {
	n, _ := strconv.ParseUint(strings.TrimPrefix(approvalID, "apr-"), 10, 64)
	return n
}

// Resolution is a decision on an approval.
type Resolution struct {
	ApprovalID string
	Decision   cpv1.Decision
	By         string // the principal deciding
	// Rules to persist (DECISION_APPROVE_AND_ALWAYS_ALLOW): their ids are
	// given here.
	Rules []*cpv1.PolicyRule
}

// Resolve records a decision on a pending approval and moves its plan on,
// in one transaction: approved plans become PENDING (the caller enqueues
// them), rejected ones FAILED with APPROVAL_REJECTED, leaving the active
// queue. The decision gets an audit record. A resolved approval, or one
// whose plan was cancelled, fails with ErrApprovalResolved.
func (s *Store) Resolve(r Resolution) (*cpv1.Approval, PlanRef, error) {
	var a *cpv1.Approval
	var ref PlanRef
	var rejected *cpv1.Plan // the plan, when a rejection ends it
	err := s.update(func(tx *bolt.Tx) error {
		var key []byte
		var err error
		if a, key, err = readApproval(tx, r.ApprovalID); err != nil {
			return err
		}
		if a.GetState() != cpv1.Approval_STATE_PENDING {
			return fmt.Errorf("approval %s is %s: %w", r.ApprovalID, stateName(a.GetState()), ErrApprovalResolved)
		}
		ref = PlanRef{a.GetRequestedBy(), a.GetRequestId()}
		b, p, err := readPlan(tx, ref)
		if err != nil {
			return err
		}
		now := timestamppb.Now()
		a.Decision, a.ResolvedBy, a.ResolveTime = r.Decision, r.By, now
		event := "approval.approved"
		p.State = cpv1.Plan_STATE_PENDING
		if r.Decision == cpv1.Decision_DECISION_REJECT {
			event = "approval.rejected"
			a.State = cpv1.Approval_STATE_REJECTED
			p.State = cpv1.Plan_STATE_FAILED
			p.Failure = &cpv1.Failure{ErrorCode: ErrorApprovalRejected, Recoverable: true,
				Message:   fmt.Sprintf("%s rejected the plan (approval %s); nothing of it ran", r.By, a.GetApprovalId()),
				RetryHint: "change the plan (see the approval's preview) and submit it under a new request_id"}
			if err := removeActive(tx, ref); err != nil {
				return err
			}
			if err := touchSession(tx, p.GetSessionId(), 0, -1, ""); err != nil {
				return err
			}
		} else {
			a.State = cpv1.Approval_STATE_APPROVED
		}
		for _, rule := range r.Rules {
			if err := putRule(tx, rule); err != nil {
				return err
			}
		}
		p.UpdateTime = now
		if err := putProto(b, keyPlan, p); err != nil {
			return err
		}
		if err := putProto(tx.Bucket(bucketApprovals), key, a); err != nil {
			return err
		}
		if p.GetState() == cpv1.Plan_STATE_FAILED {
			rejected = p
		}
		return appendDecisionAudit(tx, ref, a, event, r.By)
	})
	if err == nil {
		s.observe(rejected, nil, rejected != nil)
		s.wake(ref)
	}
	return a, ref, err
}

// CancelAwaiting cancels a plan that waits for approval: the plan ends
// CANCELLED, its approval CANCELLED (audited), nothing of it ran.
func (s *Store) CancelAwaiting(ref PlanRef, by string) (*cpv1.Plan, error) {
	var p *cpv1.Plan
	err := s.update(func(tx *bolt.Tx) error {
		var b *bolt.Bucket
		var err error
		if b, p, err = readPlan(tx, ref); err != nil {
			return err
		}
		if p.GetState() != cpv1.Plan_STATE_AWAITING_APPROVAL {
			return nil
		}
		a, key, err := readApproval(tx, p.GetApprovalId())
		if err != nil {
			return err
		}
		now := timestamppb.Now()
		a.State, a.ResolvedBy, a.ResolveTime = cpv1.Approval_STATE_CANCELLED, by, now
		if err := putProto(tx.Bucket(bucketApprovals), key, a); err != nil {
			return err
		}
		p.State, p.UpdateTime = cpv1.Plan_STATE_CANCELLED, now
		p.Failure = &cpv1.Failure{ErrorCode: "CANCELLED", Recoverable: true,
			Message:   fmt.Sprintf("cancelled by %s while it waited for approval %s: nothing of it ran", by, p.GetApprovalId()),
			RetryHint: "submit the plan again under a new request_id"}
		if err := putProto(b, keyPlan, p); err != nil {
			return err
		}
		if err := removeActive(tx, ref); err != nil {
			return err
		}
		if err := touchSession(tx, p.GetSessionId(), 0, -1, ""); err != nil {
			return err
		}
		return appendDecisionAudit(tx, ref, a, "approval.cancelled", by)
	})
	if err == nil {
		s.observe(p, nil, true)
		s.wake(ref)
	}
	return p, err
}

func stateName(st cpv1.Approval_State) string {
	return strings.ToLower(strings.TrimPrefix(st.String(), "STATE_"))
}

// ruleIndexKey is the key of a persisted rule in policy_rule_index.
func ruleIndexKey(principal, tool, target string) []byte {
	return []byte(principal + "\x00" + tool + "\x00" + target)
}

// putRule gives a new persisted rule its id and stores it; a rule for the
// same principal, tool and target already there is kept instead.
func putRule(tx *bolt.Tx, r *cpv1.PolicyRule) error {
	idx := tx.Bucket(bucketRuleIndex)
	ik := ruleIndexKey(r.GetPrincipal(), r.GetToolName(), r.GetTarget())
	if id := idx.Get(ik); id != nil {
		r.RuleId = string(id)
		return nil
	}
	b := tx.Bucket(bucketRules)
	seq, err := b.NextSequence()
	if err != nil {
		return err
	}
	r.RuleId = fmt.Sprintf("rule-%d", seq)
	if err := putProto(b, u64(seq), r); err != nil {
		return err
	}
	return idx.Put(ik, []byte(r.RuleId))
}

// RuleFor returns the id of the persisted rule for a principal, tool and
// target, or "".
func (s *Store) RuleFor(principal, tool, target string) (string, error) {
	var id string
	err := s.db.View(func(tx *bolt.Tx) error {
		id = string(tx.Bucket(bucketRuleIndex).Get(ruleIndexKey(principal, tool, target)))
		return nil
	})
	return id, err
}

// Rules returns up to limit persisted rules with sequence > after, oldest
// first; next is the last sequence returned when more may follow, else 0.
func (s *Store) Rules(after uint64, limit int) (out []*cpv1.PolicyRule, next uint64, err error) {
	err = s.db.View(func(tx *bolt.Tx) error {
		c := tx.Bucket(bucketRules).Cursor()
		for k, v := c.Seek(u64(after + 1)); k != nil; k, v = c.Next() {
			if len(out) == limit {
				n, _ := strconv.ParseUint(strings.TrimPrefix(out[len(out)-1].GetRuleId(), "rule-"), 10, 64)
				next = n
				return nil
			}
			r := &cpv1.PolicyRule{}
			if err := unmarshal(v, r); err != nil {
				return err
			}
			out = append(out, r)
		}
		return nil
	})
	return out, next, err
}

// DeleteRule removes a persisted rule.
func (s *Store) DeleteRule(id, by string) (*cpv1.PolicyRule, error) {
	r := &cpv1.PolicyRule{}
	err := s.update(func(tx *bolt.Tx) error {
		n, err := strconv.ParseUint(strings.TrimPrefix(id, "rule-"), 10, 64)
		b := tx.Bucket(bucketRules)
		if err != nil || !strings.HasPrefix(id, "rule-") || b.Get(u64(n)) == nil {
			return fmt.Errorf("rule %q: %w", id, ErrRuleNotFound)
		}
		if err := getProto(b, u64(n), r); err != nil {
			return err
		}
		if err := tx.Bucket(bucketRuleIndex).Delete(ruleIndexKey(r.GetPrincipal(), r.GetToolName(), r.GetTarget())); err != nil {
			return err
		}
		if err := putEvent(tx, by, "policy_rule.deleted", id, timestamppb.Now()); err != nil {
			return err
		}
		return b.Delete(u64(n))
	})
	return r, err
}

// putOpPolicies keeps what the policy decided for each operation of a new
// plan (body/policy/<operation_id> → "decision\x00input_hash").
func putOpPolicies(body *bolt.Bucket, ops map[string]OpPolicy) error {
	if len(ops) == 0 {
		return nil
	}
	b, err := body.CreateBucket(bucketOpPolicy)
	if err != nil {
		return err
	}
	// In key order, so each key is appended: bbolt keeps a node's keys
	// sorted in memory, and a map's random order moved half of the growing
	// node per key (quadratic in a large plan).
	b = appending(b)
	for _, id := range slices.Sorted(maps.Keys(ops)) {
		p := ops[id]
		if err := b.Put([]byte(id), []byte(p.Decision+"\x00"+p.InputHash+"\x00"+p.Rule)); err != nil {
			return err
		}
	}
	return nil
}

// opPolicies reads a plan's policy record for its audit: per operation,
// and the approval the plan ran under.
type opPolicies struct {
	ops        *bolt.Bucket // nil for plans stored before policies
	approvalID string
	approvedBy string
}

func readOpPolicies(tx *bolt.Tx, planB *bolt.Bucket, p *cpv1.Plan) opPolicies {
	var o opPolicies
	if body := planB.Bucket(bucketPlanBody); body != nil {
		o.ops = body.Bucket(bucketOpPolicy)
	}
	if id := p.GetApprovalId(); id != "" {
		o.approvalID = id
		if a, _, err := readApproval(tx, id); err == nil {
			o.approvedBy = a.GetResolvedBy()
		}
	}
	return o
}

func (o opPolicies) apply(rec *cpv1.AuditRecord) {
	if o.ops != nil {
		if v := o.ops.Get([]byte(rec.GetOperationId())); v != nil {
			decision, rest, _ := strings.Cut(string(v), "\x00")
			hash, rule, _ := strings.Cut(rest, "\x00") // no rule in plans stored before 2026-11-30
			rec.PolicyDecision, rec.InputHash, rec.PolicyRule = decision, hash, rule
			if decision == "require_approval" {
				rec.ApprovalId, rec.ApprovedBy = o.approvalID, o.approvedBy
			}
		}
	}
}
