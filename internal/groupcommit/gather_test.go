package groupcommit

import (
	"sync"
	"testing"
	"time"
)

// A gathering group ends as soon as what it waits for changes (the group
// is full, or no more come): the linger is a bound, not a sleep. The
// linger here is an hour, so a Gather that missed a change hangs the test.
func TestGatherEndsWhenTheGroupDoes(t *testing.T) {
	var mu sync.Mutex
	cond := sync.NewCond(&mu)
	queued, more := 0, true
	gather := func() <-chan int {
		waiting, done := make(chan struct{}), make(chan int)
		go func() {
			mu.Lock()
			once := sync.OnceFunc(func() { close(waiting) })
			Gather(cond, time.Hour, func() bool { once(); return more && queued < GroupTarget })
			n := queued
			mu.Unlock()
			done <- n
		}()
		<-waiting // it holds mu until it waits on cond
		return done
	}

	done := gather()
	for i := 0; i < GroupTarget; i++ {
		mu.Lock()
		queued++
		cond.Broadcast()
		mu.Unlock()
	}
	if n := <-done; n != GroupTarget {
		t.Fatalf("gathered %d, want %d", n, GroupTarget)
	}

	queued = 1
	done = gather()
	mu.Lock()
	more = false // the last receipt of its plan came
	cond.Broadcast()
	mu.Unlock()
	if n := <-done; n != 1 {
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
