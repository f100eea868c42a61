package sessions

import (
	"context"
	"fmt"
	"time"
)

// Blender slots. A session holds a slot while its Blender runs (or starts),
// and so does a preview's fork (preview.go): at most Config.MaxLive
// Blenders run. A batch for a session without a slot, or a preview, takes a
// free one, or parks the least recently used session that is not running a
// batch (checkpoint, stop its Blender), or waits until a batch ends. A
// session also parks itself after the idle timeout. Parking loses nothing:
// the next batch restores the session from its checkpoint and journal, on
// the same scene hash.
//
// Lock order: a session's mu before Manager.mu, never the reverse; slot
// decisions take other sessions' mu only with TryLock, so nothing waits in a
// cycle. A preview waits for its slot holding no session's mu: a batch of
// its session may hold that mu while it waits for a slot itself.

// acquire returns a session locked for one batch (the caller calls release),
// its Blender running and holding the journaled scene: started, restored
// from a park, or recovered after a crash.
func (m *Manager) acquire(ctx context.Context, id string) (*session, error) {
	m.mu.Lock()
	s, ok := m.sessions[id]
	if !ok {
		m.mu.Unlock()
		return nil, fmt.Errorf("%w: %q", ErrNotFound, id)
	}
	s.users++
	if s.park != nil {
		s.park.Stop()
	}
	m.mu.Unlock()

	s.mu.Lock()
	if err := m.ready(ctx, s); err != nil {
		m.release(s)
		return nil, err
	}
	if s.idle != nil {
		s.idle.Stop() // busy again: the idle checkpoint waits for the next quiet spell
	}
	return s, nil
}

// ready makes sure the session can run a batch. The caller holds s.mu.
func (m *Manager) ready(ctx context.Context, s *session) error {
	m.mu.Lock()
	closed := s.closed
	m.mu.Unlock()
	if closed {
		return fmt.Errorf("%w: %q was closed", ErrNotFound, s.id)
	}
	if s.broken != nil {
		return fmt.Errorf("%w: %v", ErrBroken, s.broken)
	}
	if s.alive() {
		return nil
	}
	if err := m.reserve(ctx, s); err != nil {
		return err
	}
	if err := m.recover(ctx, s); err != nil {
		s.broken = err
		s.stop()
		m.freeSlot(s)
		return fmt.Errorf("%w: %v", ErrBroken, err)
	}
	return nil
}

// release ends a batch (or a failed acquire) and unlocks the session; a
// runtime that wants a spare gets one once the agent is quiet.
func (m *Manager) release(s *session) {
	s.mu.Unlock()
	m.mu.Lock()
	s.users--
	s.lastUsed = time.Now()
	if s.users == 0 && s.live {
		m.armPark(s)
	}
	m.notify()
	m.mu.Unlock()
	m.refillWhenQuiet()
}

// reserve gives the session a Blender slot, parking another session or
// waiting if none is free. The caller holds s.mu.
func (m *Manager) reserve(ctx context.Context, s *session) error {
	return m.takeSlot(ctx, &s.live, "session "+s.id, s.runtime.Info.GetRuntimeId(), &s.spare)
}

// takeSlot gives holder a Blender slot and sets *held (guarded by m.mu).
// In order: the slot of a ready spare of runtime rtID, taken over with the
// spare (into *spare, for the start to adopt; spare nil: none wanted); a
// free slot; the slot of another spare, stopped first; the slot of a spare
// being started, waited for when it is of rtID, else cancelled; a slot
// freed by parking the least recently used session not running a batch;
// or the first slot freed while ctx allows.
func (m *Manager) takeSlot(ctx context.Context, held *bool, holder, rtID string, spare **spare) error {
	for {
		m.mu.Lock()
		if *held {
			m.mu.Unlock()
			return nil // a session kept its slot (its Blender died): restart it there
		}
		if spare != nil {
			if *spare = m.takeSpare(rtID); *spare != nil {
				*held = true // the spare's slot is the holder's now
				m.mu.Unlock()
				return nil
			}
		}
		if m.live < m.cfg.MaxLive {
			m.live++
			*held = true
			m.mu.Unlock()
			return nil
		}
		if other := m.anySpare(); other != nil {
			// Its slot is the holder's once its Blender has exited.
			m.mu.Unlock()
			other.proc.Stop(5 * time.Second)
			m.mu.Lock()
			*held = true
			m.notify()
			m.mu.Unlock()
			return nil
		}
		var victim *session
		switch {
		case spare != nil && m.spawning[rtID] != nil:
			// One of its runtime is starting: wait to take it over.
		case m.cancelSpareStart():
			// Its slot frees as soon as the start gives up.
		case m.cancelRefresh():
			// Likewise: a refresh is worth less than a session's start or
			// a preview.
		default:
			victim = m.leastRecentlyUsed()
		}
		wait := m.changed
		m.mu.Unlock()
		if victim != nil && victim.mu.TryLock() {
			m.parkLocked(victim, "to make room for "+holder)
			victim.mu.Unlock()
			continue
		}
		select {
		case <-wait:
		case <-time.After(slotRecheck):
			// The victim's lock was only briefly held (a preview reading its
			// journal, a park that found it busy): nothing signals its end.
		case <-ctx.Done():
			return fmt.Errorf("waiting for a Blender slot: %w", ctx.Err())
		}
	}
}

// slotRecheck is how often a wait for a slot looks again without a signal.
const slotRecheck = 250 * time.Millisecond

// leastRecentlyUsed is the session holding a slot that is not running a
// batch and was used the longest time ago, or nil. The caller holds m.mu.
func (m *Manager) leastRecentlyUsed() *session {
	var lru *session
	for _, v := range m.sessions {
		if v.live && v.users == 0 && (lru == nil || v.lastUsed.Before(lru.lastUsed)) {
			lru = v
		}
	}
	return lru
}

// parkLocked checkpoints a session's scene (if it changed) and stops its
// Blender, giving up its slot. The caller holds s.mu.
func (m *Manager) parkLocked(s *session, why string) {
	start := time.Now()
	if s.alive() && s.dirty > 0 && s.broken == nil {
		ctx, cancel := context.WithTimeout(context.Background(), checkpointTimeout)
		if err := m.checkpoint(ctx, s); err != nil {
			// Still park: the journal replays whatever the checkpoint lacks.
			m.log.Warn("checkpoint before parking failed", "session_id", s.id, "err", err)
		}
		cancel()
	}
	s.stop()
	m.freeSlot(s)
	m.log.Info("session parked", "session_id", s.id, "why", why, "took", time.Since(start).Round(time.Millisecond))
}

// freeSlot gives up a session's slot, if it holds one. The caller holds
// s.mu (or the session is gone).
func (m *Manager) freeSlot(s *session) { m.giveSlot(&s.live) }

// giveSlot gives up the slot takeSlot set *held for, if it is still held.
func (m *Manager) giveSlot(held *bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if *held {
		*held = false
		m.live--
		m.notify()
	}
}

// dropSlot gives up one slot held by no session flag: a spare's. The
// caller does not hold m.mu.
func (m *Manager) dropSlot() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.live--
	m.notify()
}

// parkRetry is how soon a park that found the session held by something
// other than a batch (its idle checkpoint, a refresh) tries again.
const parkRetry = 100 * time.Millisecond

// armPark (re)starts a session's idle park timer. The caller holds m.mu.
func (m *Manager) armPark(s *session) {
	if s.park != nil {
		s.park.Stop()
	}
	timeout := time.Duration(m.idleTimeout.Load())
	if timeout <= 0 {
		return
	}
	s.park = time.AfterFunc(timeout, func() { m.parkIdle(s, timeout) })
}

// parkIdle parks a session that stayed idle for timeout.
func (m *Manager) parkIdle(s *session, timeout time.Duration) {
	if !s.mu.TryLock() {
		// A batch re-arms the timer when it ends; the idle checkpoint and
		// a refresh do not (no batch holds or waits for the session): try
		// again once they are done.
		m.mu.Lock()
		if s.users == 0 && s.live && !s.closed {
			s.park = time.AfterFunc(parkRetry, func() { m.parkIdle(s, timeout) })
		}
		m.mu.Unlock()
		return
	}
	defer s.mu.Unlock()
	m.mu.Lock()
	idle := s.live && s.users == 0 && !s.closed && time.Since(s.lastUsed) >= timeout
	m.mu.Unlock()
	if idle {
		m.parkLocked(s, fmt.Sprintf("idle for %s", timeout))
	}
}

// notify wakes batches waiting for a slot. The caller holds m.mu.
func (m *Manager) notify() {
	close(m.changed)
	m.changed = make(chan struct{})
}
