package agentd

import "testing"

// TestDefaultMaxSessions: one Blender per GiB beyond the 2 GiB kept for
// the rest, at least one, at most 64.
func TestDefaultMaxSessions(t *testing.T) {
	for _, c := range []struct {
		memMiB int64
		want   int
	}{{0, 1}, {1024, 1}, {3071, 1}, {4096, 2}, {24 * 1024, 22}, {1 << 20, 64}} {
		if got := DefaultMaxSessions(c.memMiB); got != c.want {
			t.Errorf("DefaultMaxSessions(%d MiB) = %d, want %d", c.memMiB, got, c.want)
		}
	}
}
