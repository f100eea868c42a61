// Package flagenv gives every command-line flag an environment override,
// BLENDPLANE_<FLAG> with dashes as underscores (--data-dir → BLENDPLANE_DATA_DIR),
// and builds the process logger. Flags given on the command line win.
package flagenv

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"runtime/pprof"
	"strings"
	"syscall"

	"github.com/blendplane/blendplane/internal/heapfloor"
)

// Parse applies environment overrides to fs's defaults, then parses args.
func Parse(fs *flag.FlagSet, args []string) error {
	var err error
	fs.VisitAll(func(f *flag.Flag) {
		name := "BLENDPLANE_" + strings.ToUpper(strings.ReplaceAll(f.Name, "-", "_"))
		if v, ok := os.LookupEnv(name); ok && err == nil {
			if e := f.Value.Set(v); e != nil {
				err = fmt.Errorf("%s=%q: %w", name, v, e)
			}
		}
	})
	if err != nil {
		return err
	}
	return fs.Parse(args)
}

// Logger returns a text logger on stderr at the named level (debug, info,
// warn, error), tagged with the daemon's name.
func Logger(daemon, level string) (*slog.Logger, error) {
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("log level %q: %w", level, err)
	}
	h := slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: lvl})
	return slog.New(h).With("daemon", daemon), nil
}

// Strings is a repeatable string flag.
type Strings []string

func (s *Strings) String() string     { return strings.Join(*s, ",") }
func (s *Strings) Set(v string) error { *s = append(*s, v); return nil }

// heapFloor is the heap goal a daemon's collector keeps at least (package
// heapfloor): the daemons' live heaps are a few MiB to some 15, and at
// Go's default the control plane collected every ~130 ms under load, its
// mark workers taking CPU from the Blenders beside it.
const heapFloor = 64 << 20

// Daemon parses a daemon's flags (plus --log-level), builds its logger and
// runs serve until SIGINT or SIGTERM, exiting non-zero on error.
func Daemon(name string, fs *flag.FlagSet, serve func(ctx context.Context, log *slog.Logger) error) {
	logLevel := fs.String("log-level", "info", "debug, info, warn or error")
	cpuProfile := fs.String("cpu-profile", "", "write a CPU profile of the whole run to this file (go tool pprof), for performance work")
	err := Parse(fs, os.Args[1:])
	var log *slog.Logger
	if err == nil {
		log, err = Logger(name, *logLevel)
	}
	if err == nil {
		slog.SetDefault(log) // for code with no logger of its own (panicguard.Catch)
	}
	if err == nil && *cpuProfile != "" {
		var f *os.File
		if f, err = os.Create(*cpuProfile); err == nil {
			if err = pprof.StartCPUProfile(f); err == nil {
				defer func() { pprof.StopCPUProfile(); f.Close() }()
			}
		}
	}
	if err == nil {
		heapfloor.Keep(heapFloor) // for the process's life
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		err = serve(ctx, log)
		stop()
	}
	if err != nil {
		pprof.StopCPUProfile()
		fmt.Fprintf(os.Stderr, "%s: %v\n", name, err)
		os.Exit(1)
	}
}
