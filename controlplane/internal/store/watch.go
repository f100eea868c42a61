package store

import cpv1 "github.com/blendplane/blendplane/gen/blendplane/controlplane/v1"

// Watch returns a channel that is closed at the next commit to the plan (or
// its next progress report). Take the channel before reading, so no commit
// can slip between.
func (s *Store) Watch(ref PlanRef) <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	ch, ok := s.watchers[ref]
	if !ok {
		ch = make(chan struct{})
		s.watchers[ref] = ch
	}
	return ch
}

// PublishProgress records the latest progress of a plan's running operation
// (nil: none) and wakes its watchers. Progress lives in memory only; a
// commit clears it.
func (s *Store) PublishProgress(ref PlanRef, p *cpv1.Progress) {
	s.mu.Lock()
	if p == nil {
		delete(s.progress, ref)
	} else {
		s.progress[ref] = p
	}
	s.mu.Unlock()
	s.wakeOnly(ref)
}

// Progress returns the latest progress of a plan, or nil.
func (s *Store) Progress(ref PlanRef) *cpv1.Progress {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.progress[ref]
}

func (s *Store) wake(ref PlanRef) {
	s.mu.Lock()
	delete(s.progress, ref)
	s.mu.Unlock()
	s.wakeOnly(ref)
}

func (s *Store) wakeOnly(ref PlanRef) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if ch, ok := s.watchers[ref]; ok {
		close(ch)
		delete(s.watchers, ref)
	}
}
