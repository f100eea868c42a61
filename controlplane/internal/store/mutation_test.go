package store

import (
	"fmt"
	"path/filepath"
	"slices"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	cpv1 "github.com/blendplane/blendplane/gen/blendplane/controlplane/v1"
)

// TestMutationIndexRuns: the index by mutation id, folded into sorted runs
// of mutationRun entries and a tail, finds every record of a mutation in
// order, across runs and the tail, a page at a time; and a schema 7
// database (a bucket per mutation) is migrated to it.
func TestMutationIndexRuns(t *testing.T) {
	defer func(n int) { mutationRun = n }(mutationRun)
	mutationRun = 4
	path := filepath.Join(t.TempDir(), "cp.db")
	s, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][]uint64{}
	ids := []string{"mut-a", "mut-b", "", "mut-c", "mut-a", "mut-d", "mut-a"}
	for i := 0; i < 22; i++ {
		id := ids[i%len(ids)]
		rec := &cpv1.AuditRecord{RequestId: "r", OperationId: fmt.Sprint("op", i), BlenderMutationId: id}
		if err := s.db.Update(func(tx *bolt.Tx) error { return putAudit(tx, PlanRef{Owner: "o", RequestID: "r"}, rec) }); err != nil {
			t.Fatal(err)
		}
		if id != "" {
			want[id] = append(want[id], uint64(rec.GetSequence()))
		}
	}
	check := func(s *Store, when string) {
		t.Helper()
		for id, seqs := range want {
			var got []uint64
			for after := uint64(0); ; {
				page, next, err := s.AuditRecords(AuditFilter{MutationID: id}, after, 2)
				if err != nil {
					t.Fatal(err)
				}
				for _, r := range page {
					if r.GetBlenderMutationId() != id {
						t.Fatalf("%s: %s found %v", when, id, r)
					}
					got = append(got, uint64(r.GetSequence()))
				}
				if after = next; next == 0 {
					break
				}
			}
			if !slices.Equal(got, seqs) {
				t.Errorf("%s: %s: records %v, want %v", when, id, got, seqs)
			}
		}
	}
	check(s, "runs and tail")
	var runs, tail int
	s.db.View(func(tx *bolt.Tx) error {
		runs, tail = tx.Bucket(bucketMutationRuns).Stats().KeyN, tx.Bucket(bucketMutationTail).Stats().KeyN
		return nil
	})
	if runs != 4 || tail != 3 { // 19 entries: 4 runs of 4, 3 in the tail
		t.Errorf("%d runs, %d in the tail; want 4 and 3", runs, tail)
	}

	// Schema 7: a bucket per mutation id, holding its records' sequences.
	if err := s.db.Update(func(tx *bolt.Tx) error {
		for _, b := range [][]byte{bucketMutationRuns, bucketMutationTail} {
			if err := tx.DeleteBucket(b); err != nil {
				return err
			}
		}
		old, err := tx.CreateBucket(bucketAuditMutation)
		if err != nil {
			return err
		}
		for id, seqs := range want {
			b, err := old.CreateBucket([]byte(id))
			if err != nil {
				return err
			}
			for _, seq := range seqs {
				b.Put(u64(seq), nil)
			}
		}
		return tx.Bucket(bucketMeta).Put(keySchemaVersion, u64(7))
	}); err != nil {
		t.Fatal(err)
	}
	s.Close()
	if s, err = Open(path); err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	check(s, "migrated from schema 7")
	s.db.View(func(tx *bolt.Tx) error {
		if tx.Bucket(bucketAuditMutation) != nil {
			t.Error("schema 7's index is still there")
		}
		return nil
	})
}

// TestOpenSessions: what a principal holds open is counted from its own
// index, kept by PutSession, CloseSession and MarkBroken, and built for a
// schema 8 database by the migration.
func TestOpenSessions(t *testing.T) {
	s, path := openTest(t)
	for i := range 3 {
		if err := s.PutSession(testSession("alice", fmt.Sprint("a", i)), testRegistry); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.PutSession(testSession("bob", "b0"), testRegistry); err != nil {
		t.Fatal(err)
	}
	if _, err := s.CloseSession("a1", time.Now()); err != nil {
		t.Fatal(err)
	}
	if err := s.PutSession(testSession("alice", "a3"), testRegistry); err != nil {
		t.Fatal(err)
	}
	if err := s.MarkBroken("a3"); err != nil { // it holds nothing on any agent
		t.Fatal(err)
	}
	count := func(s *Store, owner string) int {
		n, err := s.OpenSessions(owner, 10)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	if a, b, c := count(s, "alice"), count(s, "bob"), count(s, "carol"); a != 2 || b != 1 || c != 0 {
		t.Fatalf("open: alice %d, bob %d, carol %d; want 2, 1, 0", a, b, c)
	}
	if n, _ := s.OpenSessions("alice", 1); n != 1 {
		t.Fatalf("counted past the most asked: %d", n)
	}
	// Schema 8 had no such index: the migration builds it.
	s2 := reopenAt(t, s, path, 8, bucketOpenSessions, bucketArtifactRefs, bucketClosedSessions, bucketBlobGarbage)
	if a, b := count(s2, "alice"), count(s2, "bob"); a != 2 || b != 1 {
		t.Fatalf("after the migration: alice %d, bob %d; want 2, 1", a, b)
	}
}
