// Command agentd runs Blender sessions for the control plane on this machine.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/blendplane/blendplane/agentd"
	"github.com/blendplane/blendplane/cmd/internal/flagenv"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "agentd:", err)
		os.Exit(1)
	}
}

func run() error {
	cfg := agentd.Defaults()
	fs := flag.NewFlagSet("agentd", flag.ExitOnError)
	fs.StringVar(&cfg.Listen, "listen", cfg.Listen, "AgentService listen address")
	fs.StringVar(&cfg.Advertise, "advertise", cfg.Advertise, "address the control plane dials (default: the bound listen address)")
	fs.StringVar(&cfg.ControlPlane, "control-plane", cfg.ControlPlane, "control plane address")
	fs.StringVar(&cfg.DataDir, "data-dir", cfg.DataDir, "directory for agentd.db and session files")
	fs.IntVar(&cfg.MaxMessageBytes, "max-message-bytes", cfg.MaxMessageBytes, "largest gRPC message accepted or sent")
	fs.IntVar(&cfg.CheckpointEvery, "checkpoint-every", cfg.CheckpointEvery, "checkpoint a session after this many scene changes")
	fs.DurationVar(&cfg.CheckpointInterval, "checkpoint-interval", cfg.CheckpointInterval, "checkpoint a changed session at least this often")
	fs.DurationVar(&cfg.CheckpointIdle, "checkpoint-idle", cfg.CheckpointIdle, "checkpoint a changed session after this long without operations")
	var blenders flagenv.Strings
	fs.Var(&blenders, "blender", "Blender runtime: a blender binary or a python that can import bpy (repeatable; default: .blender/venv, then blender on PATH)")
	logLevel := fs.String("log-level", "info", "debug, info, warn or error")
	if err := flagenv.Parse(fs, os.Args[1:]); err != nil {
		return err
	}
	cfg.Blender = blenders
	log, err := flagenv.Logger("agentd", *logLevel)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return agentd.Run(ctx, cfg, log)
}
