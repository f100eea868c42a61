package store

import (
	"errors"
	"slices"
	"testing"
	"time"

	cpv1 "github.com/blendplane/blendplane/gen/blendplane/controlplane/v1"
)

// TestExpireArtifacts: the artifacts of a session closed before the given
// time are forgotten, oldest closed first and at most so many sessions at a
// time; a blob becomes garbage once no artifact record of any session
// names it (a blob two sessions share outlives the first's expiry) and is
// no garbage once named again; open sessions and the sessions themselves
// are kept. A version recorded again after another counts its bytes once.
// A schema 9, 10 or 11 database gets its counts and indexes from the
// migrations, and expires the same.
func TestExpireArtifacts(t *testing.T) {
	t0 := time.Unix(2000, 0)
	build := func() (*Store, string) {
		s, path := openTest(t)
		for id, owner := range map[string]string{"a": "alice", "b": "alice", "c": "bob"} {
			if err := s.PutSession(testSession(owner, id), testRegistry); err != nil {
				t.Fatal(err)
			}
		}
		for _, a := range []struct {
			session, name, sha string
			size               int64
		}{
			{"a", "x.png", "s1", 1}, {"a", "y.png", "s2", 2}, {"a", "x.png", "s3", 4}, {"a", "x.png", "s3", 4}, // the last one a retry: one record
			{"a", "x.png", "s1", 1}, // a version again after another: a record, not more bytes
			{"b", "z.png", "s2", 2}, {"c", "w.png", "s4", 8},
		} {
			if _, err := s.PutArtifact(&cpv1.Artifact{SessionId: a.session, Name: a.name, Sha256: a.sha, SizeBytes: a.size}); err != nil {
				t.Fatal(err)
			}
		}
		for i, id := range []string{"a", "b"} {
			if _, err := s.CloseSession(id, t0.Add(time.Duration(i)*time.Minute)); err != nil {
				t.Fatal(err)
			}
		}
		return s, path
	}

	check := func(s *Store, what string) {
		t.Helper()
		owned := func(alice, bob int64) {
			t.Helper()
			a, aerr := s.ArtifactBytes("alice")
			b, berr := s.ArtifactBytes("bob")
			if a != alice || b != bob || aerr != nil || berr != nil {
				t.Fatalf("%s: artifact bytes of alice %d (%v), bob %d (%v); want %d, %d", what, a, aerr, b, berr, alice, bob)
			}
		}
		owned(9, 8)
		expire := func(before time.Time, most int, wantGarbage []string, wantN int) {
			t.Helper()
			n, err := s.ExpireArtifacts(before, most)
			garbage, gerr := s.Garbage("", 100)
			if tail, _ := s.Garbage("s1", 100); len(garbage) > 0 && garbage[0] == "s1" && !slices.Equal(tail, garbage[1:]) {
				t.Errorf("%s: the garbage after s1: %v", what, tail)
			}
			if err != nil || gerr != nil || n != wantN || !slices.Equal(garbage, wantGarbage) {
				t.Fatalf("%s: ExpireArtifacts(%v, %d) = %d, %v, garbage %v (%v); want %d, garbage %v",
					what, before, most, n, err, garbage, gerr, wantN, wantGarbage)
			}
		}
		expire(t0, 10, nil, 0)                                // none closed before t0
		expire(t0.Add(time.Hour), 1, []string{"s1", "s3"}, 1) // a first; s2 is b's too
		owned(2, 8)
		if _, err := s.Artifact("a", "x.png", ""); !errors.Is(err, ErrArtifactNotFound) {
			t.Errorf("%s: a's artifact after its expiry: %v", what, err)
		}
		if list, _, _ := s.ListArtifacts("a", "", 0, 10); len(list) != 0 {
			t.Errorf("%s: a lists %v after its expiry", what, list)
		}
		if _, err := s.Session("a"); err != nil {
			t.Errorf("%s: the expired session itself: %v", what, err)
		}
		if _, err := s.Artifact("b", "z.png", ""); err != nil {
			t.Errorf("%s: b's artifact before its expiry: %v", what, err)
		}
		// Named again before it was removed: no garbage any more.
		if _, err := s.PutArtifact(&cpv1.Artifact{SessionId: "c", Name: "again.png", Sha256: "s3", SizeBytes: 16}); err != nil {
			t.Fatal(err)
		}
		expire(t0.Add(time.Hour), 10, []string{"s1", "s2"}, 1)
		owned(0, 24)
		if err := s.Collected([]string{"s1", "s2"}); err != nil {
			t.Fatal(err)
		}
		expire(t0.Add(time.Hour), 10, nil, 0)
		if _, err := s.Artifact("c", "w.png", ""); err != nil { // open
			t.Errorf("%s: an open session's artifact: %v", what, err)
		}
	}

	s, path := build()
	check(s, "kept as they came")

	// The same data at schema 9, before this bookkeeping, migrated.
	s, path = build()
	check(reopenAt(t, s, path, 9, bucketArtifactRefs, bucketClosedSessions, bucketBlobGarbage, bucketOwnerBytes, bucketArtifactVersion), "migrated from schema 9")
	s, path = build()
	check(reopenAt(t, s, path, 10, bucketOwnerBytes, bucketArtifactVersion), "migrated from schema 10")
	s, path = build()
	check(reopenAt(t, s, path, 11, bucketArtifactVersion), "migrated from schema 11")
}

// TestArtifactLeftOnAgent: a version whose content the control plane did
// not keep counts nothing toward its owner's quota and is listed as left on
// its agent, until it is kept (Keep, or recorded again kept); then it
// counts, once, and an expiry takes it off.
func TestArtifactLeftOnAgent(t *testing.T) {
	s, _ := openTest(t)
	if err := s.PutSession(testSession("alice", "s1"), testRegistry); err != nil {
		t.Fatal(err)
	}
	put := func(name, sha string, size int64, left bool) {
		t.Helper()
		if _, err := s.PutArtifact(&cpv1.Artifact{SessionId: "s1", Name: name, Sha256: sha, SizeBytes: size, RequestId: "r", OperationId: "op", LeftOnAgent: left}); err != nil {
			t.Fatal(err)
		}
	}
	state := func(what string, bytes int64, left map[string]bool) {
		t.Helper()
		if n, err := s.ArtifactBytes("alice"); err != nil || n != bytes {
			t.Errorf("%s: alice's artifact bytes %d (%v), want %d", what, n, err, bytes)
		}
		list, _, err := s.ListArtifacts("s1", "", 0, 10)
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range list {
			if a.GetLeftOnAgent() != left[a.GetName()] {
				t.Errorf("%s: %s listed with left_on_agent %v", what, a.GetName(), a.GetLeftOnAgent())
			}
			if one, err := s.Artifact("s1", a.GetName(), a.GetSha256()); err != nil || one.GetLeftOnAgent() != left[a.GetName()] {
				t.Errorf("%s: %s read with left_on_agent %v (%v)", what, a.GetName(), one.GetLeftOnAgent(), err)
			}
		}
	}
	put("x.png", "a", 10, true)
	put("x.png", "a", 10, true) // collected again, left again
	put("y.png", "b", 5, true)
	state("left on the agent", 0, map[string]bool{"x.png": true, "y.png": true})
	for range 2 {
		if err := s.Keep("s1", "x.png", "a"); err != nil {
			t.Fatal(err)
		}
	}
	put("y.png", "b", 5, false) // collected again, kept this time
	state("kept", 15, nil)
	if _, err := s.CloseSession("s1", time.Unix(1, 0)); err != nil {
		t.Fatal(err)
	}
	if _, err := s.ExpireArtifacts(time.Unix(2, 0), 10); err != nil {
		t.Fatal(err)
	}
	state("expired", 0, nil)
}
