package groupcommit

import (
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"testing"

	bolt "go.etcd.io/bbolt"
)

func open(t *testing.T) (*bolt.DB, *DB) {
	t.Helper()
	db, err := bolt.Open(filepath.Join(t.TempDir(), "g.db"), 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	if err := db.Update(func(tx *bolt.Tx) error {
		_, err := tx.CreateBucket([]byte("b"))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return db, New(db)
}

func put(key string) func(*bolt.Tx) error {
	return func(tx *bolt.Tx) error { return tx.Bucket([]byte("b")).Put([]byte(key), []byte("v")) }
}

func keys(t *testing.T, db *bolt.DB) map[string]bool {
	t.Helper()
	got := map[string]bool{}
	db.View(func(tx *bolt.Tx) error {
		return tx.Bucket([]byte("b")).ForEach(func(k, _ []byte) error {
			got[string(k)] = true
			return nil
		})
	})
	return got
}

// hold runs an update that keeps its transaction open until release is
// closed, so that the updates started meanwhile queue behind it.
func hold(g *DB) (release chan struct{}, done chan error) {
	release, done, started := make(chan struct{}), make(chan error, 1), make(chan struct{})
	go func() {
		done <- g.Update(func(tx *bolt.Tx) error {
			close(started)
			<-release
			return put("first")(tx)
		})
	}()
	<-started
	return release, done
}

// queued waits until n updates wait behind the running group.
func queued(g *DB, n int) {
	for {
		g.mu.Lock()
		k := len(g.queue)
		g.mu.Unlock()
		if k >= n {
			return
		}
	}
}

// TestUpdatesThatWaitShareOneTransaction: updates that arrive while a group
// commits run together in the next transaction, and each is durable when
// its Update returns.
func TestUpdatesThatWaitShareOneTransaction(t *testing.T) {
	db, g := open(t)
	release, first := hold(g)
	const n = 10
	var wg sync.WaitGroup
	var mu sync.Mutex
	txs := map[int]bool{}
	for i := range n {
		wg.Go(func() {
			err := g.Update(func(tx *bolt.Tx) error {
				mu.Lock()
				txs[tx.ID()] = true
				mu.Unlock()
				return put(fmt.Sprint("k", i))(tx)
			})
			if err != nil {
				t.Error(err)
			}
		})
	}
	queued(g, n)
	close(release)
	wg.Wait()
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	if len(txs) != 1 {
		t.Errorf("%d updates that waited together ran in %d transactions, want 1", n, len(txs))
	}
	if got := keys(t, db); len(got) != n+1 {
		t.Errorf("keys %v, want first and k0..k%d", got, n-1)
	}
	// Alone, an update commits at once, and the lead was given back.
	if err := g.Update(put("alone")); err != nil || !keys(t, db)["alone"] {
		t.Fatalf("a lone update: %v", err)
	}
}

// TestFailedUpdateLeavesTheOthers: an update that fails (or panics) gets its
// error and leaves nothing; the others of its group run again without it
// and commit once.
func TestFailedUpdateLeavesTheOthers(t *testing.T) {
	db, g := open(t)
	release, first := hold(g)
	refused := errors.New("refused")
	runs := map[string]int{}
	var mu sync.Mutex
	updates := map[string]func(*bolt.Tx) error{}
	for _, k := range []string{"a", "bad", "b", "boom", "c"} {
		updates[k] = func(tx *bolt.Tx) error {
			mu.Lock()
			runs[k]++
			mu.Unlock()
			if err := put(k)(tx); err != nil {
				return err
			}
			switch k {
			case "bad":
				return refused
			case "boom":
				panic("bug")
			}
			return nil
		}
	}
	errs := map[string]error{}
	var wg sync.WaitGroup
	for _, k := range []string{"a", "bad", "b", "boom", "c"} {
		queued(g, len(errs))
		mu.Lock()
		errs[k] = nil
		mu.Unlock()
		wg.Go(func() {
			err := g.Update(updates[k])
			mu.Lock()
			errs[k] = err
			mu.Unlock()
		})
	}
	queued(g, 5)
	close(release)
	wg.Wait()
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	if !errors.Is(errs["bad"], refused) || errs["boom"] == nil || errs["a"] != nil || errs["b"] != nil || errs["c"] != nil {
		t.Fatalf("errors %v", errs)
	}
	got := keys(t, db)
	if !got["a"] || !got["b"] || !got["c"] || got["bad"] || got["boom"] {
		t.Fatalf("keys %v: want a, b and c only (and first)", got)
	}
	if runs["a"] != 3 || runs["b"] != 2 || runs["c"] != 1 || runs["bad"] != 2 || runs["boom"] != 2 {
		t.Errorf("runs %v: a before both failures runs three times, b twice, c once; bad and boom once more alone", runs)
	}
}

// TestFailureFromTheGroupIsRetriedAlone: an update that failed only because
// of a write of its group (here: a key another update put) runs again alone
// after the group, and answers from what is committed.
func TestFailureFromTheGroupIsRetriedAlone(t *testing.T) {
	_, g := open(t)
	exists := errors.New("exists")
	putOnce := func(tx *bolt.Tx) error {
		b := tx.Bucket([]byte("b"))
		if b.Get([]byte("k")) != nil {
			return exists
		}
		return b.Put([]byte("k"), []byte("v"))
	}
	release, first := hold(g)
	errs := make(chan error, 2)
	go func() { errs <- g.Update(putOnce) }()
	queued(g, 1)
	go func() { errs <- g.Update(putOnce) }()
	queued(g, 2)
	close(release)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	e1, e2 := <-errs, <-errs
	if (e1 == nil) == (e2 == nil) || !(errors.Is(e1, exists) || errors.Is(e2, exists)) {
		t.Fatalf("two puts of one key: %v and %v, want one success and one %v", e1, e2, exists)
	}
}
