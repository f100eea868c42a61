package controlplane

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestFlagRangesChecked: a disk size in MiB whose bytes would not fit an
// int64 (they would wrap and turn the floor or quota off) or a negative
// bound is refused at start, before anything is opened.
func TestFlagRangesChecked(t *testing.T) {
	for _, c := range []struct {
		flag string
		set  func(*Config)
	}{
		{"--min-free-disk-mib", func(c *Config) { c.MinFreeDiskMiB = -1 }},
		{"--min-free-disk-mib", func(c *Config) { c.MinFreeDiskMiB = 1 << 41 }},
		{"--artifact-quota-mib", func(c *Config) { c.ArtifactQuotaMiB = -1 }},
		{"--artifact-quota-mib", func(c *Config) { c.ArtifactQuotaMiB = 1 << 41 }},
		{"--max-agents-per-principal", func(c *Config) { c.MaxAgentsPerPrincipal = -1 }},
		{"--max-sessions-per-principal", func(c *Config) { c.MaxSessionsPerPrincipal = -1 }},
		{"--heartbeat", func(c *Config) { c.Heartbeat = 0 }},
	} {
		cfg := Defaults()
		cfg.DataDir = filepath.Join(t.TempDir(), "never")
		c.set(&cfg)
		ctx, cancel := context.WithCancel(context.Background())
		cancel() // past the check, Run would stop at once rather than serve
		err := Run(ctx, cfg, slog.New(slog.DiscardHandler), nil)
		if err == nil || !strings.Contains(err.Error(), c.flag) {
			t.Errorf("%s: %v", c.flag, err)
		}
		if _, serr := os.Stat(cfg.DataDir); serr == nil {
			t.Errorf("%s: the data dir was made", c.flag)
		}
	}
}
