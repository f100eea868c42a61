// Command agentd runs Blender sessions for the control plane on this machine.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"regexp"
	"strings"
	"syscall"

	"github.com/blendplane/blendplane/agentd"
	"github.com/blendplane/blendplane/cmd/internal/flagenv"
)

// labelKey is the pattern of a label key (as RegisterAgentRequest.labels).
var labelKey = regexp.MustCompile(`^[a-zA-Z0-9_.-]{1,63}$`)

// maxLabels is how many labels RegisterAgentRequest takes (its max_pairs).
const maxLabels = 32

func main() {
	cfg := agentd.Defaults()
	fs := flag.NewFlagSet("agentd", flag.ExitOnError)
	fs.StringVar(&cfg.Listen, "listen", cfg.Listen, "AgentService listen address")
	fs.StringVar(&cfg.Advertise, "advertise", cfg.Advertise, "address the control plane dials (default: the bound listen address)")
	fs.StringVar(&cfg.ControlPlane, "control-plane", cfg.ControlPlane, "control plane address")
	fs.StringVar(&cfg.TokenFile, "token-file", cfg.TokenFile, "file holding this agent's token (agent scope)")
	fs.StringVar(&cfg.CAFile, "ca-file", cfg.CAFile, "the control plane's CA certificate (<its data dir>/ca.pem), needed when it is not on loopback")
	fs.BoolVar(&cfg.AllowInsecureLocal, "allow-insecure-local", cfg.AllowInsecureLocal, "no authentication, no TLS: development on one machine (loopback only)")
	fs.StringVar(&cfg.DataDir, "data-dir", cfg.DataDir, "directory for agentd.db and session files")
	fs.IntVar(&cfg.MaxMessageBytes, "max-message-bytes", cfg.MaxMessageBytes, "largest gRPC message accepted or sent")
	fs.Int64Var(&cfg.SessionStorageMiB, "session-storage-mib", cfg.SessionStorageMiB, "most disk one session's files (uploads, renders, exports) may take, in MiB: the ceiling of every session placed here, and the most a session contract's temp_storage_mib may ask for (less when the disk has less free; 0: the free disk)")
	fs.Int64Var(&cfg.MinFreeDiskMiB, "min-free-disk-mib", cfg.MinFreeDiskMiB, "disk kept free under --data-dir for agentd's journal and checkpoints, in MiB: session files (uploads, renders, exports) that would leave less are refused, and it is not offered to sessions (0: none)")
	fs.IntVar(&cfg.MaxSessions, "max-sessions", cfg.MaxSessions, "most Blender processes run at once; idle sessions beyond it are parked (0: one per GiB of memory beyond 2 GiB)")
	fs.BoolVar(&cfg.SpareBlenders, "spare-blenders", cfg.SpareBlenders, "keep a Blender started ahead, in a free slot, for the next session start of each runtime in use (a start then takes milliseconds instead of 0.4-1.5 s)")
	fs.IntVar(&cfg.CheckpointEvery, "checkpoint-every", cfg.CheckpointEvery, "checkpoint a session after this many scene changes")
	fs.DurationVar(&cfg.CheckpointInterval, "checkpoint-interval", cfg.CheckpointInterval, "checkpoint a changed session at least this often")
	fs.DurationVar(&cfg.CheckpointIdle, "checkpoint-idle", cfg.CheckpointIdle, "checkpoint a changed session after this long without operations")
	fs.IntVar(&cfg.RefreshAfter, "refresh-after", cfg.RefreshAfter, "after its Blender changed this many of the scene's records (datablocks; a create changes 3), give a session a fresh Blender at its next checkpoint, when a spare is ready (it loads the checkpoint and catches up while the session goes on): frees and list walks get slower in a Blender that built a big scene itself (0: never)")
	fs.Func("label", "a label of this agent, key=value, that sessions may ask for at Negotiate (agent_selector), e.g. gpu=true (repeatable)", func(v string) error {
		k, val, ok := strings.Cut(v, "=")
		if !ok || !labelKey.MatchString(k) || len(val) > 63 {
			return fmt.Errorf("want key=value: a key of 1-63 letters, digits, '_', '.' or '-', a value of at most 63 characters; got %q", v)
		}
		if cfg.Labels == nil {
			cfg.Labels = map[string]string{}
		}
		if _, again := cfg.Labels[k]; !again && len(cfg.Labels) == maxLabels {
			return fmt.Errorf("at most %d labels (the control plane takes no more); %q is one more", maxLabels, v)
		}
		cfg.Labels[k] = val
		return nil
	})
	fs.StringVar(&cfg.MetricsListen, "metrics-listen", cfg.MetricsListen, "serve Prometheus metrics at http://ADDR/metrics, a loopback address (e.g. 127.0.0.1:7481); empty: none")
	var blenders flagenv.Strings
	fs.Var(&blenders, "blender", "Blender runtime: a blender binary or a python that can import bpy (repeatable; default: .blender/venv, then blender on PATH)")
	flagenv.Daemon("agentd", fs, func(ctx context.Context, log *slog.Logger) error {
		cfg.Blender = blenders
		// What agentd and its Blenders write (the sessions' scenes,
		// checkpoints, files) is theirs alone: other users of a shared host
		// read none of it.
		syscall.Umask(0o077)
		return agentd.Run(ctx, cfg, log)
	})
}
