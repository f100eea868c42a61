package diskfree

import (
	"os"
	"testing"
)

// TestBytes: a directory's disk has some room; a missing one is an error.
func TestBytes(t *testing.T) {
	if n, err := Bytes(t.TempDir()); err != nil || n <= 0 {
		t.Fatalf("Bytes(a temp dir) = %d, %v", n, err)
	}
	if _, err := Bytes(os.DevNull + "/nowhere"); err == nil {
		t.Fatal("Bytes of a path that is not there: no error")
	}
}
