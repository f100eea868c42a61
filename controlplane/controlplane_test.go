package controlplane

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestDiskFlagChecked: a --min-free-disk-mib whose bytes would not fit an
// int64 (or that is negative) is refused at start, before anything is
// opened: its bytes would wrap and turn the floor off.
func TestDiskFlagChecked(t *testing.T) {
	for _, mib := range []int64{-1, 1 << 41} {
		cfg := Defaults()
		cfg.DataDir = filepath.Join(t.TempDir(), "never")
		cfg.MinFreeDiskMiB = mib
		ctx, cancel := context.WithCancel(context.Background())
		cancel() // past the check, Run would stop at once rather than serve
		err := Run(ctx, cfg, slog.New(slog.DiscardHandler), nil)
		if err == nil || !strings.Contains(err.Error(), "--min-free-disk-mib") {
			t.Errorf("--min-free-disk-mib %d: %v", mib, err)
		}
		if _, serr := os.Stat(cfg.DataDir); serr == nil {
			t.Errorf("--min-free-disk-mib %d: the data dir was made", mib)
		}
	}
}
