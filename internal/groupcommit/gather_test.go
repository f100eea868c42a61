package groupcommit

import (
	"sync"
	"testing"
	"time"
)

// A gathering group ends as soon as what it waits for changes (the group
// is full, or no more come), and not before: the linger is a bound, not a
// sleep. The linger here is an hour, so a Gather that missed a change
// never returns; the test fails after a minute instead of hanging.
func TestGatherEndsWhenTheGroupDoes(t *testing.T) {
	var mu sync.Mutex
	cond := sync.NewCond(&mu)
	queued, more := 0, true
	asked := make(chan struct{}, 1) // more() was called: the gatherer holds mu
	gather := func() <-chan int {
		done := make(chan int, 1)
		go func() {
			mu.Lock()
			Gather(cond, time.Hour, func() bool {
				select {
				case asked <- struct{}{}:
				default:
				}
				return more && queued < GroupTarget
			})
			n := queued
			mu.Unlock()
			done <- n
		}()
		return done
	}
	// add changes the group once the gatherer has looked at it (it then
	// waits on cond, having released mu), and wakes it, as the committers
	// do.
	add := func(done <-chan int, change func()) {
		t.Helper()
		select {
		case <-asked:
		case n := <-done:
			t.Fatalf("Gather returned early, with %d gathered", n)
		case <-time.After(time.Minute):
			t.Fatal("Gather never asked whether to wait")
		}
		mu.Lock()
		change()
		cond.Broadcast()
		mu.Unlock()
	}
	result := func(done <-chan int) int {
		t.Helper()
		select {
		case n := <-done:
			return n
		case <-time.After(time.Minute):
			t.Fatal("Gather did not return")
			return 0
		}
	}

	done := gather()
	for i := 0; i < GroupTarget; i++ {
		add(done, func() { queued++ })
	}
	if n := result(done); n != GroupTarget {
		t.Fatalf("gathered %d, want %d", n, GroupTarget)
	}

	queued = 1
	done = gather()
	add(done, func() { more = false }) // the last receipt of its plan came
	if n := result(done); n != 1 {
		t.Fatalf("gathered %d after the last, want 1", n)
	}
}

// With nothing arriving, the wait ends after linger; with nothing to wait
// for, at once.
func TestGatherLingerIsABound(t *testing.T) {
	var mu sync.Mutex
	cond := sync.NewCond(&mu)
	mu.Lock()
	defer mu.Unlock()
	calls := 0
	Gather(cond, time.Millisecond, func() bool { calls++; return true })
	if calls == 0 {
		t.Fatal("more was never asked")
	}
	Gather(cond, time.Hour, func() bool { return false })
}

// A group waits while more follow and it is not full; an add wakes the
// writer only when that can end its wait or its idleness.
func TestWake(t *testing.T) {
	for _, c := range []struct {
		queued        int
		more          bool
		waiting, wake bool
	}{{1, true, true, true}, {2, true, true, false}, {GroupTarget - 1, true, true, false}, {GroupTarget, true, false, true}, {5, false, false, true}} {
		if got := Waiting(c.queued, c.more); got != c.waiting {
			t.Errorf("Waiting(%d, %v) = %v", c.queued, c.more, got)
		}
		if got := Wake(c.queued, c.more); got != c.wake {
			t.Errorf("Wake(%d, %v) = %v", c.queued, c.more, got)
		}
	}
}
