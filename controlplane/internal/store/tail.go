package store

import cpv1 "github.com/blendplane/blendplane/gen/blendplane/controlplane/v1"

// The receipts of a plan's newest commit stay in memory, so that a live
// stream woken by that commit sends them without reading and decoding them
// again: decoding a large result (a scene summary) costs about as much as
// committing it. Only committed receipts go here, and only after their
// commit, so nothing is visible earlier than before. Memory is bounded; an
// evicted tail is read from the database as before.
const tailBudget = 8 << 20 // bytes of encoded receipts, all plans together

type tail struct {
	receipts []*cpv1.Receipt // consecutive sequences
	size     int
}

// keepTail records a plan's newest committed receipts. Call it after the
// commit and before waking the plan's watchers.
func (s *Store) keepTail(ref PlanRef, receipts []*cpv1.Receipt, size int) {
	if len(receipts) == 0 || size > tailBudget/8 {
		s.dropTail(ref)
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if old, ok := s.tails[ref]; ok {
		s.tailBytes -= old.size
		delete(s.tails, ref)
	}
	for k, t := range s.tails {
		if s.tailBytes+size <= tailBudget {
			break
		}
		s.tailBytes -= t.size
		delete(s.tails, k)
	}
	s.tails[ref] = tail{receipts: receipts, size: size}
	s.tailBytes += size
}

func (s *Store) dropTail(ref PlanRef) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if old, ok := s.tails[ref]; ok {
		s.tailBytes -= old.size
		delete(s.tails, ref)
	}
}

// fromTail returns up to limit receipts from sequence from on when the
// plan's newest commit holds from; ok is false otherwise (read the
// database).
func (s *Store) fromTail(ref PlanRef, from int64, limit int) (out []*cpv1.Receipt, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	t, found := s.tails[ref]
	if !found {
		return nil, false
	}
	first := t.receipts[0].GetSequence()
	if from < first || from >= first+int64(len(t.receipts)) {
		return nil, false
	}
	rest := t.receipts[from-first:]
	return rest[:min(limit, len(rest))], true
}
