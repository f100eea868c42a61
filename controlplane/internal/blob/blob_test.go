package blob

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

func TestBlobs(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir, 0)
	if err != nil {
		t.Fatal(err)
	}
	content := bytes.Repeat([]byte("blendplane"), 1000)
	sum, size, err := s.CopyFrom(bytes.NewReader(content), 1<<20)
	want := sha256.Sum256(content)
	if err != nil || sum != hex.EncodeToString(want[:]) || size != int64(len(content)) {
		t.Fatalf("copy: %s %d %v", sum, size, err)
	}
	if !s.Has(sum) {
		t.Fatal("a stored blob is missing")
	}
	f, err := s.Open(sum)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(f)
	f.Close()
	if !bytes.Equal(got, content) {
		t.Fatal("content changed")
	}
	// Over the limit: refused, nothing stored, nothing left in tmp/.
	if _, _, err := s.CopyFrom(bytes.NewReader(content), 100); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("over the limit: %v", err)
	}
	// A write that never commits leaves nothing behind either.
	w, _ := s.Create(1 << 20)
	w.Write([]byte("partial"))
	w.Abort()
	if left, _ := os.ReadDir(filepath.Join(dir, "tmp")); len(left) != 0 {
		t.Fatalf("tmp/ holds %v", left)
	}
	if _, err := s.Open("nothex"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("a bad hash: %v", err)
	}
	if _, err := s.Open(hex.EncodeToString(make([]byte, 32))); !errors.Is(err, ErrNotFound) {
		t.Fatalf("an unknown hash: %v", err)
	}
	// A crash mid-write leaves a file in tmp/; the next Open clears it.
	os.WriteFile(filepath.Join(dir, "tmp", "blob-crashed"), []byte("x"), 0o600)
	if _, err := Open(dir, 0); err != nil {
		t.Fatal(err)
	}
	if left, _ := os.ReadDir(filepath.Join(dir, "tmp")); len(left) != 0 {
		t.Fatalf("tmp/ after reopening holds %v", left)
	}
	if !s.Has(sum) {
		t.Fatal("reopening lost a blob")
	}
}

// TestDiskFloor: a store keeps its floor of the disk free: no blob starts
// on a disk already under it, and a write stops with ErrDiskShort where
// the next chunk would go under it, keeping nothing.
func TestDiskFloor(t *testing.T) {
	dir := t.TempDir()
	full, err := Open(dir, 1<<62)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := full.Create(1 << 20); !errors.Is(err, ErrDiskShort) {
		t.Fatalf("a blob on a disk under the floor: %v, want ErrDiskShort", err)
	}
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		t.Fatal(err)
	}
	s, err := Open(dir, int64(st.Bavail)*st.Bsize-32<<20) // room for about 32 MiB
	if err != nil {
		t.Fatal(err)
	}
	w, err := s.Create(1 << 40)
	if errors.Is(err, ErrDiskShort) {
		return // others wrote 32 MiB to this disk meanwhile: the floor held all the same
	}
	if err != nil {
		t.Fatal(err)
	}
	chunk := make([]byte, 1<<20)
	for err == nil && w.Size() < 1<<30 { // the rest of the disk may change meanwhile: the floor is met long before 1 GiB
		_, err = w.Write(chunk)
	}
	if !errors.Is(err, ErrDiskShort) {
		t.Fatalf("after %d bytes: %v, want ErrDiskShort", w.Size(), err)
	}
	sum := w.Sum()
	w.Abort()
	if left, _ := os.ReadDir(filepath.Join(dir, "tmp")); len(left) != 0 || s.Has(sum) {
		t.Fatalf("a write stopped at the floor left tmp/ %v, kept %v", left, s.Has(sum))
	}
}

// TestRemoveIdle: a blob written or found (Has) within the idle time is
// kept, and so is one the caller wants again; one idle longer and
// unwanted is removed; an absent one counts as removed. A commit marks its
// blob written when it lands, however long ago its bytes were.
func TestRemoveIdle(t *testing.T) {
	s, err := Open(t.TempDir(), 0)
	if err != nil {
		t.Fatal(err)
	}
	yes := func() (bool, error) { return true, nil }
	no := func() (bool, error) { return false, nil }
	old := time.Now().Add(-2 * time.Hour)
	w, err := s.Create(100)
	if err != nil {
		t.Fatal(err)
	}
	w.Write([]byte("content"))
	if err := os.Chtimes(w.f.Name(), old, old); err != nil { // written long ago, pushed to an agent since
		t.Fatal(err)
	}
	sum, err := w.Commit()
	if err != nil {
		t.Fatal(err)
	}
	if removed, err := s.RemoveIdle(sum, time.Hour, yes); removed || err != nil || !s.Has(sum) {
		t.Fatalf("a blob just committed: removed %v, %v", removed, err)
	}
	ago := func() {
		t.Helper()
		if err := os.Chtimes(s.path(sum), old, old); err != nil {
			t.Fatal(err)
		}
	}
	ago()
	if !s.Has(sum) { // found: used now
		t.Fatal("Has lost the blob")
	}
	if removed, err := s.RemoveIdle(sum, time.Hour, yes); removed || err != nil {
		t.Fatalf("a blob just found: removed %v, %v", removed, err)
	}
	ago()
	if removed, err := s.RemoveIdle(sum, time.Hour, no); removed || err != nil || !s.Has(sum) {
		t.Fatalf("a blob wanted again: removed %v, %v", removed, err)
	}
	ago()
	if removed, err := s.RemoveIdle(sum, time.Hour, yes); !removed || err != nil || s.Has(sum) {
		t.Fatalf("an idle unwanted blob: removed %v, %v, still there %v", removed, err, s.Has(sum))
	}
	if removed, err := s.RemoveIdle(sum, time.Hour, yes); !removed || err != nil {
		t.Fatalf("an absent blob: removed %v, %v", removed, err)
	}
}
