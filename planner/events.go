package planner

import (
	"context"
	"sync"

	plannerv1 "github.com/blendplane/blendplane/gen/blendplane/planner/v1"
)

// subscriber follows one run's events. Its queue is unbounded so that a
// slow reader never holds the run up; a run emits a handful of events per
// model turn, and the subscriber is dropped when its reader goes.
type subscriber struct {
	mu     sync.Mutex
	queue  []*plannerv1.StreamRunResponse
	notify chan struct{}
}

func newSubscriber() *subscriber { return &subscriber{notify: make(chan struct{}, 1)} }

func (s *subscriber) push(ev *plannerv1.StreamRunResponse) {
	s.mu.Lock()
	s.queue = append(s.queue, ev)
	s.mu.Unlock()
	select {
	case s.notify <- struct{}{}:
	default:
	}
}

// next returns the next event, waiting for one.
func (s *subscriber) next(ctx context.Context) (*plannerv1.StreamRunResponse, error) {
	for {
		s.mu.Lock()
		if len(s.queue) > 0 {
			ev := s.queue[0]
			s.queue = s.queue[1:]
			s.mu.Unlock()
			return ev, nil
		}
		s.mu.Unlock()
		select {
		case <-s.notify:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

func (r *Runtime) subscribe(runID string) *subscriber {
	s := newSubscriber()
	r.mu.Lock()
	r.subs[runID] = append(r.subs[runID], s)
	r.mu.Unlock()
	return s
}

func (r *Runtime) unsubscribe(runID string, s *subscriber) {
	r.mu.Lock()
	defer r.mu.Unlock()
	subs := r.subs[runID]
	for i, x := range subs {
		if x == s {
			subs = append(subs[:i:i], subs[i+1:]...)
			break
		}
	}
	if len(subs) == 0 {
		delete(r.subs, runID)
	} else {
		r.subs[runID] = subs
	}
}

func (r *Runtime) emit(runID string, ev *plannerv1.StreamRunResponse) {
	r.mu.Lock()
	subs := r.subs[runID]
	r.mu.Unlock()
	for _, s := range subs {
		s.push(ev)
	}
}
