package agentd

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

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

// TestDiskFlagsChecked: a disk flag whose bytes would not fit an int64 (or
// that is negative) is refused at start, before anything is opened: its
// bytes would wrap and turn the check it sets off.
func TestDiskFlagsChecked(t *testing.T) {
	for _, c := range []struct {
		flag string
		set  func(*Config)
	}{
		{"--min-free-disk-mib", func(c *Config) { c.MinFreeDiskMiB = 1 << 50 }},
		{"--min-free-disk-mib", func(c *Config) { c.MinFreeDiskMiB = -1 }},
		{"--session-storage-mib", func(c *Config) { c.SessionStorageMiB = 1 << 45 }},
	} {
		cfg := Defaults()
		cfg.DataDir = filepath.Join(t.TempDir(), "never")
		c.set(&cfg)
		ctx, cancel := context.WithCancel(context.Background())
		cancel() // past the check, Run would stop at once rather than serve
		err := Run(ctx, cfg, slog.New(slog.DiscardHandler))
		if err == nil || !strings.Contains(err.Error(), c.flag) {
			t.Errorf("%s out of range: %v", c.flag, err)
		}
		if _, serr := os.Stat(cfg.DataDir); serr == nil {
			t.Errorf("%s out of range: the data dir was made", c.flag)
		}
	}
}
