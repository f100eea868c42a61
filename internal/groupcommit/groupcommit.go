// Package groupcommit coalesces concurrent bbolt write transactions: while
// one group commits, the updates that arrive wait, and then run together in
// the next transaction. A busy database pays one commit (its two
// fdatasyncs and the writing of shared pages) per group instead of one per
// caller, and its callers stop queueing behind each other's fsyncs; an idle
// one commits each update at once, with no added wait.
//
// bbolt's own DB.Batch coalesces too, but only by waiting (MaxBatchDelay)
// for company, which adds that delay to every lone update.
package groupcommit

import (
	"fmt"
	"sync"
	"sync/atomic"

	bolt "go.etcd.io/bbolt"
)

// DB runs updates of one bbolt database in groups.
type DB struct {
	db *bolt.DB

	mu      sync.Mutex
	queue   []*update
	busy    bool // a leader is running a group
	commits atomic.Uint64
}

type update struct {
	fn   func(*bolt.Tx) error
	err  error
	lead bool          // set when woken to run the next group
	wake chan struct{} // closed when err is set, or to make it lead
}

// New returns a group committer of db.
func New(db *bolt.DB) *DB { return &DB{db: db} }

// Commits counts the transactions committed so far (groups, not updates).
func (g *DB) Commits() uint64 { return g.commits.Load() }

// Update runs fn in a durable write transaction, as bolt.DB.Update does, and
// returns its error or the commit's. fn may share the transaction with
// other updates that run before or after it; it sees their writes, as it
// would if they had committed first. fn may run more than once: again
// without an update of its group that failed, and, when it fails itself,
// once more alone after the group; so fn must not keep state across calls
// (assign, do not accumulate), and its writes are durable only when Update
// returns nil. fn must not call Update.
func (g *DB) Update(fn func(*bolt.Tx) error) error {
	u := &update{fn: fn, wake: make(chan struct{})}
	g.mu.Lock()
	g.queue = append(g.queue, u)
	if g.busy {
		g.mu.Unlock()
		<-u.wake
		if !u.lead {
			return u.err
		}
		g.mu.Lock()
	}
	// Lead: take what is queued (u among it), commit it, and hand the lead
	// to the first of those that queued meanwhile.
	g.busy = true
	group := g.queue
	g.queue = nil
	g.mu.Unlock()

	g.commit(group)
	for _, o := range group {
		if o != u {
			close(o.wake)
		}
	}

	g.mu.Lock()
	if len(g.queue) > 0 {
		next := g.queue[0]
		next.lead = true
		close(next.wake)
	} else {
		g.busy = false
	}
	g.mu.Unlock()
	return u.err
}

// commit runs the group's updates in one transaction. An update that fails
// is taken out and the others run again without it; a failed commit is
// every remaining update's error. Then each update that failed runs again
// alone, after the others committed, so that its answer is its own: its
// first failure may have come from writes of the group that were never
// committed (bbolt's Batch does the same).
func (g *DB) commit(group []*update) {
	var alone []*update
	for len(group) > 0 {
		failed := -1
		err := g.db.Update(func(tx *bolt.Tx) error {
			for i, u := range group {
				if err := call(u.fn, tx); err != nil {
					failed = i
					return err
				}
			}
			return nil
		})
		if failed < 0 {
			g.done(group, err)
			break
		}
		alone = append(alone, group[failed])
		group = append(group[:failed:failed], group[failed+1:]...)
	}
	for _, u := range alone {
		g.done([]*update{u}, g.db.Update(func(tx *bolt.Tx) error { return call(u.fn, tx) }))
	}
}

// done records the outcome of a transaction of updates.
func (g *DB) done(updates []*update, err error) {
	if err == nil {
		g.commits.Add(1)
	}
	for _, u := range updates {
		u.err = err
	}
}

// call runs fn, turning a panic into its error: one update's bug must not
// take down the leader that runs the others' work.
func call(fn func(*bolt.Tx) error, tx *bolt.Tx) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("panic in a write transaction: %v", p)
		}
	}()
	return fn(tx)
}
