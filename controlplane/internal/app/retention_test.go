package app

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/blendplane/blendplane/controlplane/internal/blob"
	"github.com/blendplane/blendplane/controlplane/internal/store"
	cpv1 "github.com/blendplane/blendplane/gen/blendplane/controlplane/v1"
)

// TestSweep: a sweep forgets the artifacts of sessions closed longer than
// the retention ago and removes the content no artifact names once it was
// unused for blobIdle; content another session names stays, and so does
// content unused for less.
func TestSweep(t *testing.T) {
	a := newTestApp(t)
	dir := t.TempDir()
	blobs, err := blob.Open(dir, 0)
	if err != nil {
		t.Fatal(err)
	}
	a.blobs, a.cfg.ArtifactRetention = blobs, time.Hour
	put := func(session, name string, content []byte) string {
		t.Helper()
		sum, _, err := blobs.CopyFrom(bytes.NewReader(content), 1<<20)
		if err == nil {
			_, err = a.store.PutArtifact(&cpv1.Artifact{SessionId: session, Name: name, Sha256: sum})
		}
		if err != nil {
			t.Fatal(err)
		}
		return sum
	}
	for _, id := range []string{"a", "b"} {
		err := a.store.PutSession(store.Session{Owner: "alice", Info: &cpv1.Session{SessionId: id, State: cpv1.Session_STATE_OPEN,
			Contract: &cpv1.SessionContract{SessionId: id, ToolRegistryRef: &cpv1.ToolRegistryRef{Fingerprint: "f"}}}},
			&cpv1.ToolRegistry{Fingerprint: "f"})
		if err != nil {
			t.Fatal(err)
		}
	}
	own, shared := put("a", "own.png", []byte("own")), put("a", "shared.png", []byte("shared"))
	put("b", "shared.png", []byte("shared"))
	now := time.Now()
	if _, err := a.store.CloseSession("a", now.Add(-2*time.Hour)); err != nil {
		t.Fatal(err)
	}

	a.sweep(context.Background(), now)
	if _, err := a.store.Artifact("a", "own.png", ""); err == nil {
		t.Error("an artifact of a session closed longer than the retention ago is still there")
	}
	if !blobs.Has(own) || !blobs.Has(shared) {
		t.Fatal("content used a moment ago was removed")
	}
	long := now.Add(-blobIdle - time.Minute)
	for _, sum := range []string{own, shared} {
		if err := os.Chtimes(filepath.Join(dir, "sha256", sum[:2], sum), long, long); err != nil {
			t.Fatal(err)
		}
	}
	a.sweep(context.Background(), now)
	if _, err := os.Stat(filepath.Join(dir, "sha256", own[:2], own)); !os.IsNotExist(err) {
		t.Errorf("content no artifact names, unused for a day: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "sha256", shared[:2], shared)); err != nil {
		t.Errorf("content the open session's artifact names: %v", err)
	}
	if garbage, err := a.store.Garbage("", 10); err != nil || len(garbage) != 0 {
		t.Errorf("garbage left: %v %v", garbage, err)
	}
}
