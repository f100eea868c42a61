package boltfile

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestInUse: a file another process holds is refused with a message that
// says so. bbolt's lock is flock(2), per open file description, so a
// second Open in this process would take it too: the holder is a flock(1).
func TestInUse(t *testing.T) {
	flock, err := exec.LookPath("flock")
	if err != nil {
		t.Skip("no flock(1) here")
	}
	defer func(w time.Duration) { wait = w }(wait)
	wait = 200 * time.Millisecond
	path := filepath.Join(t.TempDir(), "x.db")
	db, err := Open(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	db.Close()
	holder := exec.Command(flock, "--exclusive", path, "sleep", "30")
	if err := holder.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { holder.Process.Kill(); holder.Wait() }()
	for deadline := time.Now().Add(10 * time.Second); exec.Command(flock, "--nonblock", path, "true").Run() == nil; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("flock(1) did not take the lock")
		}
	}
	_, err = Open(path, nil)
	if err == nil || !strings.Contains(err.Error(), "in use by another process (another daemon on the same --data-dir?)") {
		t.Fatalf("a file another process holds: %v", err)
	}
}
