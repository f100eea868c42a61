package app

import (
	"sync"
	"sync/atomic"
	"testing"

	"github.com/blendplane/blendplane/controlplane/internal/store"
	cpv1 "github.com/blendplane/blendplane/gen/blendplane/controlplane/v1"
)

// TestReserve: calls at once cannot each take the same room under a
// principal's quota; room given back, or recorded, counts once.
func TestReserve(t *testing.T) {
	a := newTestApp(t)
	a.cfg.ArtifactQuotaMiB = 1
	err := a.store.PutSession(store.Session{Owner: "alice", Info: &cpv1.Session{SessionId: "s", State: cpv1.Session_STATE_OPEN,
		Contract: &cpv1.SessionContract{SessionId: "s", ToolRegistryRef: &cpv1.ToolRegistryRef{Fingerprint: "f"}}}},
		&cpv1.ToolRegistry{Fingerprint: "f"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.store.PutArtifact(&cpv1.Artifact{SessionId: "s", Name: "a", Sha256: "1", SizeBytes: 512 << 10}); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var took atomic.Int32
	for range 8 {
		wg.Go(func() {
			if ok, err := a.reserve("alice", 300<<10); err != nil {
				t.Error(err)
			} else if ok {
				took.Add(1)
			}
		})
	}
	wg.Wait()
	if took.Load() != 1 {
		t.Fatalf("%d of 8 reservations of 300 KiB fit in 512 KiB of room", took.Load())
	}
	if left, _ := a.quotaLeft("alice"); left != 212<<10 {
		t.Fatalf("left %d, want %d", left, 212<<10)
	}
	// Recorded, then given back: counted once.
	if _, err := a.store.PutArtifact(&cpv1.Artifact{SessionId: "s", Name: "b", Sha256: "2", SizeBytes: 300 << 10}); err != nil {
		t.Fatal(err)
	}
	a.unreserve("alice", 300<<10)
	if left, _ := a.quotaLeft("alice"); left != 212<<10 {
		t.Fatalf("after the record: left %d, want %d", left, 212<<10)
	}
	if ok, _ := a.reserve("alice", 213<<10); ok {
		t.Fatal("a reservation over the room fit")
	}
	if ok, _ := a.reserve("bob", 1<<20); !ok {
		t.Fatal("another principal's room was taken")
	}
}
