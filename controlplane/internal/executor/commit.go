package executor

import (
	"sync"

	"github.com/blendplane/blendplane/controlplane/internal/store"
	cpv1 "github.com/blendplane/blendplane/gen/blendplane/controlplane/v1"
	"github.com/blendplane/blendplane/internal/groupcommit"
)

// committer writes receipts, in order, in batches while the executor goes
// on. Each batch is one store transaction with the plan's state.
type committer struct {
	st  *store.Store
	ref store.PlanRef

	mu      sync.Mutex
	cond    *sync.Cond
	queue   []pending
	more    bool // the last item said more follow at once
	plan    *cpv1.Plan
	closing bool
	writing bool // a batch taken from the queue is being committed
	err     error
	done    chan struct{}
}

// pending is one receipt (nil: none) and, when it ends the plan, the plan's
// final state to commit with it.
type pending struct {
	receipt *cpv1.Receipt
	final   *cpv1.Plan
}

func newCommitter(st *store.Store, ref store.PlanRef, running *cpv1.Plan) *committer {
	c := &committer{st: st, ref: ref, plan: running, done: make(chan struct{})}
	c.cond = sync.NewCond(&c.mu)
	go c.loop()
	return c
}

// add queues a receipt and/or the plan's final state. more says that more
// receipts follow at once (the batch goes on), so a short wait pays.
func (c *committer) add(r *cpv1.Receipt, final *cpv1.Plan, more bool) {
	c.mu.Lock()
	c.queue = append(c.queue, pending{r, final})
	c.more = more
	if groupcommit.Wake(len(c.queue), more) {
		c.cond.Broadcast()
	}
	c.mu.Unlock()
}

func (c *committer) loop() {
	defer close(c.done)
	for {
		c.mu.Lock()
		for len(c.queue) == 0 && !c.closing {
			c.cond.Wait()
		}
		if len(c.queue) == 0 {
			c.mu.Unlock()
			return
		}
		// While more receipts are known to follow at once, wait a little for
		// them; otherwise commit at once, so an interactive one-operation
		// plan never waits for company.
		groupcommit.Gather(c.cond, groupcommit.GroupLinger, func() bool { return groupcommit.Waiting(len(c.queue), c.more) && !c.closing })
		batch := c.queue
		c.queue = nil
		failed := c.err != nil
		c.writing = true
		c.mu.Unlock()
		if failed {
			continue // nothing more is written after a failed commit
		}
		receipts := make([]*cpv1.Receipt, 0, len(batch))
		for _, p := range batch {
			if p.receipt != nil {
				receipts = append(receipts, p.receipt)
			}
			if p.final != nil {
				c.plan = p.final
			}
		}
		err := c.st.Commit(c.ref, c.plan, receipts)
		c.mu.Lock()
		if err != nil {
			c.err = err
		}
		c.writing = false
		c.cond.Broadcast() // for flush
		c.mu.Unlock()
	}
}

// flush waits until everything added so far is committed: what reads the
// store next (a distributed render's forks replay the session from it)
// sees the receipts before it.
func (c *committer) flush() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.more = false // nothing follows at once: commit without lingering
	c.cond.Broadcast()
	for (len(c.queue) > 0 || c.writing) && c.err == nil {
		c.cond.Wait()
	}
	return c.err
}

func (c *committer) failure() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// close waits until everything added is committed.
func (c *committer) close() error {
	c.mu.Lock()
	c.closing = true
	c.cond.Broadcast()
	c.mu.Unlock()
	<-c.done
	return c.failure()
}
