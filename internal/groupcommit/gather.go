package groupcommit

import (
	"sync"
	"time"
)

// A plan's receipts come from one writer, one after another, so Update has
// no concurrent company to group them with: the writer waits a little for
// the next ones instead, while it knows more follow at once. A commit's
// fixed cost (its fdatasyncs and page writes, about 0.23 ms of CPU on the
// benchmark machine) is then paid once per group: 11–12 µs of CPU per
// receipt in groups of 32 against 31–35 µs in groups of 8
// (store.BenchmarkCommitGroups).
const (
	// GroupTarget is the group size that ends a wait.
	GroupTarget = 32
	// GroupLinger is the longest a receipt waits for company.
	GroupLinger = 5 * time.Millisecond
)

// Gather waits on cond, whose lock the caller holds, while more() says the
// group should wait for company, for at most linger (GroupLinger, but for
// tests). Whoever adds to the group, or ends it, must Broadcast cond.
func Gather(cond *sync.Cond, linger time.Duration, more func() bool) {
	if !more() {
		return
	}
	expired := false
	t := time.AfterFunc(linger, func() {
		cond.L.Lock()
		expired = true
		cond.Broadcast()
		cond.L.Unlock()
	})
	defer t.Stop()
	for !expired && more() {
		cond.Wait()
	}
}

// Waiting says whether a group of queued receipts should wait for more:
// while more follow at once and it is not full.
func Waiting(queued int, more bool) bool { return more && queued < GroupTarget }

// Wake says whether an add that leaves queued receipts in a group's queue
// must wake its writer: the queue was empty (the writer waits for any), or
// the group no longer waits. Any other add would only wake it to wait again.
func Wake(queued int, more bool) bool { return queued == 1 || !Waiting(queued, more) }
