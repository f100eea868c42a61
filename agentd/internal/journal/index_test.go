package journal

import (
	"path/filepath"
	"testing"

	cpv1 "github.com/blendplane/blendplane/gen/blendplane/controlplane/v1"
)

// TestKeyIndexStaleEntries: entries a failed commit left behind never hide a
// committed key, and a collision is only a committed key of the same hash.
func TestKeyIndexStaleEntries(t *testing.T) {
	defer func(h func(string) uint64) { hashKey = h }(hashKey)
	hashes := map[string]uint64{"A": 7, "B": 7, "C": 7, "D": 9}
	hashKey = func(k string) uint64 { return hashes[k] }
	stored := map[uint64]string{} // the records committed: sequence → key
	keyAt := func(seq uint64) string { return stored[seq] }
	commit := func(x *keyIndex, key string, seq uint64) {
		stored[seq] = key
		x.set(key, seq, keyAt)
	}

	x := newKeyIndex()
	commit(x, "A", 1)
	x.set("B", 2, keyAt) // a failed commit: B in overflow, record 2 never written
	commit(x, "B", 3)    // B again, alone, elsewhere
	if got := x.get("B"); got != 3 {
		t.Fatalf("B after its retry: %d, want 3", got)
	}
	if got := x.get("A"); got != 1 {
		t.Fatalf("A: %d, want 1", got)
	}

	// A group that failed had put A at 1 and B at 2 (B to overflow, behind
	// A); B then commits alone at 1.
	x = newKeyIndex()
	stored[1], stored[2] = "A", "B"
	x.set("A", 1, keyAt)
	x.set("B", 2, keyAt)
	delete(stored, 1) // rolled back
	delete(stored, 2)
	commit(x, "B", 1)
	if got := x.get("B"); got != 1 {
		t.Fatalf("B committed at 1 after a failed group: the index says %d", got)
	}

	// A slot left pointing at the record of a key of another hash is stale:
	// it is taken over, not a collision.
	x = newKeyIndex()
	commit(x, "D", 4)
	x.byHash[7] = 4 // as a failed commit of C at 4 left it, before D took 4
	commit(x, "C", 5)
	if x.overflow != nil || x.get("C") != 5 || x.get("D") != 4 {
		t.Fatalf("stale slot: C %d, D %d, overflow %v", x.get("C"), x.get("D"), x.overflow)
	}

	// Keys of one hash, both committed: both found.
	commit(x, "A", 6)
	if x.get("A") != 6 || x.get("C") != 5 {
		t.Fatalf("collision: A %d, C %d", x.get("A"), x.get("C"))
	}
}

// TestIndexRebuiltByACommit: a session whose index is gone (a close that
// failed after dropping it) gets it back whole from its next commit.
func TestIndexRebuiltByACommit(t *testing.T) {
	j := open(t, filepath.Join(t.TempDir(), "agentd.db"))
	defer j.Close()
	if err := j.OpenSession("s1", "rt", "h0", Limits{}, 0); err != nil {
		t.Fatal(err)
	}
	journalOps(t, j, "s1", 120)
	j.mu.Lock()
	delete(j.index, "s1")
	j.mu.Unlock()
	if err := j.Commit("s1", []Commit{{Receipt: &cpv1.Receipt{IdempotencyKey: "new"}}}); err != nil {
		t.Fatal(err)
	}
	recs, err := j.LookupAll("s1", []string{"k000000", "k000119", "new"})
	if err != nil || recs[0] == nil || recs[1] == nil || recs[2] == nil {
		t.Fatalf("after the rebuild: %v %v", recs, err)
	}
}
