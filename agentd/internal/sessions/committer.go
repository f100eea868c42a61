package sessions

import (
	"fmt"
	"sync"

	"github.com/blendplane/blendplane/agentd/internal/journal"
	cpv1 "github.com/blendplane/blendplane/gen/blendplane/controlplane/v1"
	"github.com/blendplane/blendplane/internal/groupcommit"
)

// committer journals receipts in groups while the next operation runs, and
// emits each receipt, in order, only after its group is durable.
type committer struct {
	journal *journal.Journal
	session string
	emit    Emit
	// intents delivers the result of the batch's intent write, which must
	// be written before anything is journaled: an intent may never outlive
	// the record that makes it void. intended: it was received.
	intents  <-chan error
	intended bool

	mu       sync.Mutex
	cond     *sync.Cond
	queue    []item
	pending  int // added but not yet emitted
	closed   bool
	flushing bool  // someone waits for everything: do not linger
	more     bool  // the last receipt added said more follow at once
	err      error // the first journal or emit error
	// journalErr is set when a group could not be journaled: the live scene
	// then holds effects the journal lacks, and the session must be rebuilt.
	journalErr error
	emitFailed bool
	done       chan struct{}
}

type item struct {
	receipt *cpv1.Receipt
	commit  *journal.Commit // nil: nothing to journal (a replayed key)
}

func newCommitter(j *journal.Journal, session string, emit Emit, intents <-chan error) *committer {
	c := &committer{journal: j, session: session, emit: emit, intents: intents, done: make(chan struct{})}
	c.cond = sync.NewCond(&c.mu)
	go c.loop()
	return c
}

// add queues a receipt (and what to journal of it); more says that more
// receipts follow at once, so a short wait for them pays.
func (c *committer) add(r *cpv1.Receipt, commit *journal.Commit, more bool) {
	c.mu.Lock()
	c.queue = append(c.queue, item{r, commit})
	c.more = more
	c.pending++
	if groupcommit.Wake(len(c.queue), more) {
		c.cond.Broadcast()
	}
	c.mu.Unlock()
}

func (c *committer) loop() {
	defer close(c.done)
	for {
		c.mu.Lock()
		for len(c.queue) == 0 && !c.closed {
			c.cond.Wait()
		}
		// While the batch goes on, let more receipts arrive: one fsync for
		// several costs less CPU than one each. After its last operation,
		// commit at once.
		groupcommit.Gather(c.cond, groupcommit.GroupLinger, func() bool { return groupcommit.Waiting(len(c.queue), c.more) && !c.closed && !c.flushing })
		batch := c.queue
		c.queue = nil
		closed := c.closed
		c.mu.Unlock()
		if len(batch) == 0 && closed {
			return
		}
		err := c.write(batch)
		c.mu.Lock()
		if err != nil && c.err == nil {
			c.err = err
		}
		c.pending -= len(batch)
		c.cond.Broadcast()
		c.mu.Unlock()
	}
}

// write journals a group, then emits it. After a failed emit (the stream
// is gone) groups are still journaled, because their operations ran; only
// the sends stop. After a failed journal write nothing more is written.
func (c *committer) write(batch []item) error {
	c.mu.Lock()
	journalErr, emitFailed := c.journalErr, c.emitFailed
	c.mu.Unlock()
	if journalErr != nil {
		return nil
	}
	var commits []journal.Commit
	for _, it := range batch {
		if it.commit != nil {
			commits = append(commits, *it.commit)
		}
	}
	if len(commits) > 0 && !c.intended {
		c.intended = true
		if err := <-c.intents; err != nil {
			c.mu.Lock()
			c.journalErr = fmt.Errorf("record intents: %w", err)
			c.mu.Unlock()
			return c.journalErr
		}
	}
	if len(commits) > 0 {
		if err := c.journal.Commit(c.session, commits); err != nil {
			c.mu.Lock()
			c.journalErr = err
			c.mu.Unlock()
			return err
		}
	}
	if emitFailed {
		return nil
	}
	for _, it := range batch {
		if err := c.emit(it.receipt); err != nil {
			c.mu.Lock()
			c.emitFailed = true
			c.mu.Unlock()
			return err
		}
	}
	return nil
}

// lostJournal reports whether a group could not be journaled.
func (c *committer) lostJournal() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.journalErr
}

// flush waits until everything added so far is committed and emitted.
func (c *committer) flush() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.flushing = true
	c.cond.Broadcast() // a group waiting for company: commit it now
	for c.pending > 0 {
		c.cond.Wait()
	}
	c.flushing = false
	return c.err
}

// failure returns the first commit or emit error.
func (c *committer) failure() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// close flushes and stops the committer.
func (c *committer) close() error {
	err := c.flush()
	c.mu.Lock()
	c.closed = true
	c.cond.Broadcast()
	c.mu.Unlock()
	<-c.done
	return err
}
