package blender

import (
	"bufio"
	"context"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/blendplane/blendplane/internal/structwire"
)

// bridgeFiles is the Python bridge package (bridge/main.py and its modules).
// "all:" is not used: __pycache__ and dot files stay out.
//
//go:embed bridge/*.py bridge/tools/*.py
var bridgeFiles embed.FS

// BridgeFS returns the embedded bridge package, rooted at its directory
// (main.py, registry.py, tools/..., see bridge/main.py).
func BridgeFS() fs.FS {
	sub, err := fs.Sub(bridgeFiles, "bridge")
	if err != nil {
		panic(err) // the embedded tree always has bridge/
	}
	return sub
}

// writeBridge replaces dir with the embedded bridge package and returns the
// path of its entry point, dir/main.py.
func writeBridge(dir string) (string, error) {
	if err := os.RemoveAll(dir); err != nil {
		return "", err
	}
	for path, data := range bridgeContents() {
		target := filepath.Join(dir, filepath.FromSlash(path))
		if err := os.MkdirAll(filepath.Dir(target), 0o700); err != nil {
			return "", err
		}
		if err := os.WriteFile(target, data, 0o600); err != nil {
			return "", err
		}
	}
	return filepath.Join(dir, "main.py"), nil
}

// Options configure Start.
type Options struct {
	// Logger receives supervisor events and, at debug level, Blender's own
	// stdout/stderr. Nil means slog.Default().
	Logger *slog.Logger
	// WorkDir is private to this process: the bridge package (WorkDir/bridge/,
	// rewritten at every Start, unless CacheDir is set), Blender's user config, temp files (WorkDir/tmp,
	// emptied at every Start) and home
	// directory (HOME and XDG_* point into WorkDir/home, so nothing of the
	// session lands in the user's caches) go here. Created if missing.
	// Required.
	WorkDir string
	// SandboxDir is the per-session output directory; file outputs of tools
	// (renders) must resolve inside it. Created if missing. Empty refuses
	// every file output.
	SandboxDir string
	// Faults are test hooks passed to the bridge; production code never
	// sets them (agentd takes them from its environment only when built
	// with the "faults" tag). Known faults:
	//
	//	"undo":   every Undo stops after part of its work and fails with
	//	          internal_error, keeping the partial work; the hash it
	//	          reports is the honest hash of that partial scene.
	//	"inject": the bridge honours the calls' injected failures and
	//	          progress (Call.injectFailure, Call.injectProgress), which
	//	          it ignores otherwise.
	Faults []string
	// CacheDir, when set, is shared by the agent's Blenders: the bridge
	// package, written once, and Python's compiled bytecode, kept instead of
	// compiled again at every start (cache.go).
	CacheDir string
	// RemoveWorkDir removes WorkDir once the process has exited: scratch of
	// a Blender started ahead of its session (a spare), which the session
	// does not keep.
	RemoveWorkDir bool
	// MemoryLimitMiB caps the memory of the Blender process (0: no cap).
	// Over it, Blender is stopped and the call fails with an error wrapping
	// ErrMemoryExceeded and ErrProcessExited.
	MemoryLimitMiB int64
	// StorageLimitMiB caps what the files in SandboxDir take on disk (0:
	// no cap): a call whose files would take them over it fails with
	// CodeQuotaExceeded and leaves none of its files.
	StorageLimitMiB int64
	// MinFreeDiskMiB is the disk the agent keeps free under SandboxDir for
	// its own records (0: none): a call whose files leave less free fails
	// with CodeQuotaExceeded and leaves none of its files.
	MinFreeDiskMiB int64
}

// Limits are a session's ceilings on its Blender (Options.MemoryLimitMiB,
// Options.StorageLimitMiB), which Adopt hands to a Blender started ahead.
type Limits struct {
	MemoryMiB  int64
	StorageMiB int64
}

// outputLines is how many lines of Blender output are kept for error messages.
const outputLines = 64

// Process is one supervised Blender subprocess. Its methods are safe for
// concurrent use; calls to Blender run one at a time.
type Process struct {
	rt   Runtime
	log  atomic.Pointer[slog.Logger] // Adopt changes it
	cmd  *exec.Cmd
	pgid int

	reqW  *os.File
	resps chan []byte // response lines from fd 4; closed at EOF

	done    chan struct{} // closed once the process has exited
	waitErr error
	output  *lineRing

	mu      sync.Mutex // serializes calls
	nextID  uint64
	broken  atomic.Bool // a call was abandoned; the process is being killed
	stopped atomic.Bool

	profile Profile
	tools   []Tool

	mem        *memCap     // nil: no memory ceiling
	overMemory atomic.Bool // Blender was stopped for going over mem
}

// Start launches Blender with the bridge in its own process group (and with
// Pdeathsig SIGKILL, so it does not outlive agentd), performs the hello
// handshake, and returns once Blender is ready with the baseline scene loaded.
// If ctx ends before that, the process is killed.
func Start(ctx context.Context, rt Runtime, opts Options) (*Process, error) {
	logger := opts.Logger
	if logger == nil {
		logger = slog.Default()
	}
	logger = logger.With("component", "blender", "runtime", string(rt.Kind))
	if opts.WorkDir == "" {
		return nil, errors.New("blender: Options.WorkDir is required")
	}
	workDir, err := filepath.Abs(opts.WorkDir)
	if err != nil {
		return nil, fmt.Errorf("blender: work dir: %w", err)
	}
	// Temp files of an earlier Blender in workDir (killed, or exited
	// without its own cleanup, see bridge/main.py) are no one's now.
	if err := os.RemoveAll(filepath.Join(workDir, "tmp")); err != nil {
		return nil, fmt.Errorf("blender: work dir: %w", err)
	}
	for _, d := range []string{workDir, filepath.Join(workDir, "tmp"), filepath.Join(workDir, "user"), filepath.Join(workDir, "home")} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, fmt.Errorf("blender: work dir: %w", err)
		}
	}
	sandbox, err := sandboxPath(opts.SandboxDir)
	if err != nil {
		return nil, err
	}
	var script, pycache string
	if opts.CacheDir != "" {
		cacheDir, err := filepath.Abs(opts.CacheDir)
		if err == nil {
			script, err = sharedBridge(cacheDir)
		}
		if err != nil { // a start without the cache is slower, not wrong
			logger.Warn("the shared bridge cache is unusable; this Blender gets a bridge of its own", "cache_dir", opts.CacheDir, "err", err)
		} else {
			pycache = pycachePrefix(cacheDir)
		}
	}
	if script == "" {
		if script, err = writeBridge(filepath.Join(workDir, "bridge")); err != nil {
			return nil, fmt.Errorf("blender: write bridge: %w", err)
		}
	}

	var args []string
	switch rt.Kind {
	case RuntimeBinary:
		// --disable-autoexec: no .blend file runs its scripts or Python
		// drivers, whatever a preference says (the bridge also turns the
		// preference off, which is all the bpy module has).
		args = []string{"-b", "--factory-startup", "--disable-autoexec", "--python-exit-code", "1", "--python", script, "--", "--fd-in", "3", "--fd-out", "4"}
		if pycache != "" {
			args = append(args, "--pycache-prefix", pycache)
		}
	case RuntimeBPYModule:
		// -I: ignore PYTHON* variables and the user site directory.
		args = []string{"-I", script, "--fd-in", "3", "--fd-out", "4"}
		if pycache != "" {
			args = append(args, "--pycache-prefix", pycache)
		}
	default:
		return nil, fmt.Errorf("blender: unknown runtime kind %q", rt.Kind)
	}

	reqR, reqW, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("blender: pipe: %w", err)
	}
	respR, respW, err := os.Pipe()
	if err != nil {
		reqR.Close()
		reqW.Close()
		return nil, fmt.Errorf("blender: pipe: %w", err)
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		reqR.Close()
		reqW.Close()
		respR.Close()
		respW.Close()
		return nil, fmt.Errorf("blender: pipe: %w", err)
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		for _, f := range []*os.File{reqR, reqW, respR, respW, outR, outW} {
			f.Close()
		}
		return nil, fmt.Errorf("blender: pipe: %w", err)
	}

	cmd := exec.Command(rt.Path, args...)
	cmd.Dir = workDir
	cmd.Env = blenderEnv(os.Environ(), workDir, pycache)
	cmd.Stdin = nil
	cmd.Stdout = outW
	cmd.Stderr = errW
	cmd.ExtraFiles = []*os.File{reqR, respW} // fd 3, fd 4
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	var mem *memCap
	if opts.MemoryLimitMiB > 0 {
		if mem, err = newMemCap(opts.MemoryLimitMiB); err != nil {
			for _, f := range []*os.File{reqR, reqW, respR, respW, outR, outW, errR, errW} {
				f.Close()
			}
			return nil, fmt.Errorf("blender: memory limit: %w", err)
		}
		mem.prepare(cmd.SysProcAttr)
	}

	startErr := cmd.Start()
	for _, f := range []*os.File{reqR, respW, outW, errW} {
		f.Close() // the child holds its own copies
	}
	if startErr == nil && mem != nil {
		if err := mem.attach(cmd.Process.Pid); err != nil {
			syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			cmd.Wait()
			startErr = fmt.Errorf("memory limit: %w", err)
		}
	}
	if startErr != nil {
		for _, f := range []*os.File{reqW, respR, outR, errR} {
			f.Close()
		}
		if mem != nil {
			mem.release()
		}
		return nil, fmt.Errorf("blender: start %s: %w", rt.Path, startErr)
	}

	log := logger.With("pid", cmd.Process.Pid)
	p := &Process{
		rt:      rt,
		cmd:     cmd,
		pgid:    cmd.Process.Pid,
		reqW:    reqW,
		resps:   make(chan []byte),
		done:    make(chan struct{}),
		output:  newLineRing(outputLines),
		profile: Profile{Runtime: rt.Kind},
		mem:     mem,
	}
	if mem != nil {
		log = log.With("memory_limit_mib", opts.MemoryLimitMiB, "memory_cap", mem.kind)
	}
	p.log.Store(log)
	p.logger().Info("blender started", "path", rt.Path, "work_dir", workDir)

	var outputs sync.WaitGroup
	outputs.Add(2)
	go p.copyOutput(&outputs, outR, "stdout")
	go p.copyOutput(&outputs, errR, "stderr")
	go p.readResponses(respR)
	go func() {
		err := cmd.Wait()
		// Let the output readers drain so error messages carry the last
		// lines; grandchildren holding the pipes must not block us forever.
		drained := make(chan struct{})
		go func() { outputs.Wait(); close(drained) }()
		select {
		case <-drained:
		case <-time.After(2 * time.Second):
		}
		p.waitErr = err
		if mem != nil {
			if mem.oomKilled() {
				p.overMemory.Store(true)
			}
			mem.release()
		}
		reqW.Close()
		if opts.RemoveWorkDir {
			if err := os.RemoveAll(workDir); err != nil {
				p.logger().Warn("removing the work dir of an exited blender", "err", err)
			}
		}
		close(p.done)
		p.logger().Info("blender exited", "err", err)
	}()

	if len(opts.Faults) > 0 {
		p.logger().Warn("blender test faults enabled", "faults", opts.Faults)
	}
	var hello helloResult
	debug := logger.Enabled(ctx, slog.LevelDebug)
	params := helloParams{SandboxDir: sandbox, StorageLimitMiB: opts.StorageLimitMiB, MinFreeDiskMiB: opts.MinFreeDiskMiB,
		Runtime: rt.Kind, Faults: opts.Faults, Debug: debug}
	if err := p.call(ctx, "hello", params, &hello, nil); err != nil {
		p.killGroup()
		<-p.done
		if p.overMemory.Load() {
			if !errors.Is(err, ErrMemoryExceeded) {
				err = fmt.Errorf("%w: %w", ErrMemoryExceeded, err)
			}
			return nil, fmt.Errorf("blender: hello: a memory limit of %d MiB is too small to start Blender: %w", opts.MemoryLimitMiB, err)
		}
		if opts.MemoryLimitMiB > 0 {
			return nil, fmt.Errorf("blender: hello (under a memory limit of %d MiB, by %s): %w", opts.MemoryLimitMiB, mem.kind, err)
		}
		return nil, fmt.Errorf("blender: hello: %w", err)
	}
	if hello.ProtocolVersion != 1 {
		p.killGroup()
		<-p.done
		return nil, fmt.Errorf("blender: bridge speaks protocol %d, want 1", hello.ProtocolVersion)
	}
	if hello.ScriptAutoexec {
		p.killGroup()
		<-p.done
		return nil, errors.New("blender: the bridge reports script auto-execution on; .blend files could run code")
	}
	hello.Profile.Runtime = rt.Kind
	sort.Strings(hello.Profile.Features)
	sort.Slice(hello.Tools, func(i, j int) bool { return hello.Tools[i].Name < hello.Tools[j].Name })
	p.profile = hello.Profile
	p.tools = hello.Tools
	p.logger().Info("blender ready", "version", p.profile.Version, "python", p.profile.PythonVersion, "scene_hash", hello.SceneHash)
	return p, nil
}

func (p *Process) logger() *slog.Logger { return p.log.Load() }

// Adopt hands a Process started ahead of its use (a spare: the baseline
// scene, no sandbox, a generous memory ceiling) to the session that takes
// it: from now on its log lines carry log's attributes, its file outputs
// must resolve inside sandboxDir and take at most lim.StorageMiB there,
// and the memory ceiling it was started under is lowered in place to
// lim.MemoryMiB, so what it allocated before counts too (0, or no lower:
// it keeps its own; a ceiling is lowered, never raised, which an rlimit
// would not allow). It returns the scene hash.
func (p *Process) Adopt(ctx context.Context, log *slog.Logger, sandboxDir string, lim Limits) (string, error) {
	sandbox, err := sandboxPath(sandboxDir)
	if err != nil {
		return "", err
	}
	memoryLimitMiB := lim.MemoryMiB
	limit := memoryLimitMiB << 20
	switch {
	case limit <= 0:
	case p.mem == nil:
		err = errors.New("started without a memory ceiling")
	case limit < p.mem.limit:
		err = p.mem.setLimit(p.pgid, limit)
	}
	if err != nil {
		return "", fmt.Errorf("blender: memory limit of %d MiB: %w", memoryLimitMiB, err)
	}
	var out struct {
		SceneHash string `json:"scene_hash"`
	}
	if err := p.call(ctx, "adopt", adoptParams{SandboxDir: sandbox, StorageLimitMiB: lim.StorageMiB}, &out, nil); err != nil {
		return "", err
	}
	l := log.With("component", "blender", "runtime", string(p.rt.Kind), "pid", p.pgid)
	if p.mem != nil {
		l = l.With("memory_limit_mib", p.mem.limit>>20, "memory_cap", p.mem.kind)
	}
	p.log.Store(l)
	l.Info("blender adopted", "sandbox", sandbox, "storage_limit_mib", lim.StorageMiB, "scene_hash", out.SceneHash)
	return out.SceneHash, nil
}

// sandboxPath makes the sandbox directory dir (if not empty) and returns
// its absolute path with symlinks resolved, as the bridge checks outputs
// against it.
func sandboxPath(dir string) (string, error) {
	if dir == "" {
		return "", nil
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", fmt.Errorf("blender: sandbox dir: %w", err)
	}
	sandbox, err := filepath.EvalSymlinks(dir)
	if err == nil {
		sandbox, err = filepath.Abs(sandbox)
	}
	if err != nil {
		return "", fmt.Errorf("blender: sandbox dir: %w", err)
	}
	return sandbox, nil
}

// blenderEnv keeps the caller's environment minus anything that would load
// user configuration, add-ons or foreign Python paths into Blender, and
// points every directory Blender and its libraries write through (temp
// files, HOME, the XDG base directories: thumbnails, font caches, audio
// cookies) into workDir, so that nothing of a session is written elsewhere.
// Python's bytecode goes to pycache, or nowhere when it is empty: Debian's
// Blender 3.4 reads the variable and so caches its own startup scripts,
// which it ships uncompiled (Blender 4.x binaries ignore the environment
// without --python-use-system-env: only the bridge's modules are cached
// there, by the bridge itself, as on the bpy module, whose -I ignores the
// variable and whose own scripts were compiled when it was installed).
func blenderEnv(base []string, workDir, pycache string) []string {
	var env []string
	for _, kv := range base {
		k, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(k, "BLENDER_") || strings.HasPrefix(k, "PYTHON") || k == "TMPDIR" ||
			k == "HOME" || strings.HasPrefix(k, "XDG_") && strings.HasSuffix(k, "_HOME") {
			continue
		}
		env = append(env, kv)
	}
	user := filepath.Join(workDir, "user")
	home := filepath.Join(workDir, "home")
	if pycache != "" {
		env = append(env, "PYTHONPYCACHEPREFIX="+pycache)
	} else {
		env = append(env, "PYTHONDONTWRITEBYTECODE=1")
	}
	return append(env,
		"HOME="+home,
		"XDG_CACHE_HOME="+filepath.Join(home, ".cache"),
		"XDG_CONFIG_HOME="+filepath.Join(home, ".config"),
		"XDG_DATA_HOME="+filepath.Join(home, ".local", "share"),
		"XDG_STATE_HOME="+filepath.Join(home, ".local", "state"),
		"BLENDER_USER_RESOURCES="+user, // 4.2+: overrides all user dirs
		"BLENDER_USER_CONFIG="+filepath.Join(user, "config"),
		"BLENDER_USER_SCRIPTS="+filepath.Join(user, "scripts"),
		"BLENDER_USER_DATAFILES="+filepath.Join(user, "datafiles"),
		"BLENDER_USER_EXTENSIONS="+filepath.Join(user, "extensions"),
		"TMPDIR="+filepath.Join(workDir, "tmp"),
		"PYTHONNOUSERSITE=1",
		"PYTHONUNBUFFERED=1",
	)
}

func (p *Process) copyOutput(wg *sync.WaitGroup, r *os.File, stream string) {
	defer wg.Done()
	defer r.Close()
	br := bufio.NewReaderSize(r, 64<<10)
	for {
		line, err := br.ReadString('\n')
		if line = strings.TrimRight(line, "\r\n"); line != "" {
			p.output.add(stream + ": " + line)
			p.logger().Debug("blender output", "stream", stream, "line", line)
		}
		if err != nil {
			return
		}
	}
}

func (p *Process) readResponses(r *os.File) {
	defer r.Close()
	defer close(p.resps)
	br := bufio.NewReaderSize(r, 1<<20)
	for {
		line, err := br.ReadBytes('\n')
		if err != nil {
			return
		}
		select {
		case p.resps <- line:
		case <-p.done:
			return
		}
	}
}

// call sends one request and waits for its response. If ctx ends first, the
// process is killed (abandonment): the state of a Blender that is still
// working on an abandoned request is unknown, so the session must recover
// from its journal.
func (p *Process) call(ctx context.Context, method string, params, out any, errHash *string) error {
	return p.callProgress(ctx, method, params, out, errHash, nil)
}

// callProgress is call with a progress callback: progress lines the bridge
// writes for this request before its response are passed to onProgress (nil
// drops them), in order, on the caller's goroutine.
func (p *Process) callProgress(ctx context.Context, method string, params, out any, errHash *string, onProgress func(map[string]any)) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := p.unusable(); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	p.nextID++
	id := p.nextID
	line, err := json.Marshal(request{ID: id, Method: method, Params: params})
	if err != nil {
		return fmt.Errorf("blender: encode %s: %w", method, err)
	}
	line = append(line, '\n')

	ab := p.abandoner("call abandoned; killing blender", "method", method)
	defer ab.watch(ctx)()

	if _, err := p.reqW.Write(line); err != nil {
		if ctx.Err() != nil {
			return ab.abandon(ctx)
		}
		return p.exitError(err)
	}
	for {
		select {
		case <-ctx.Done():
			return ab.abandon(ctx)
		case raw, ok := <-p.resps:
			if !ok {
				if ctx.Err() != nil {
					return ab.abandon(ctx)
				}
				return p.exitError(io.EOF)
			}
			var resp response[json.RawMessage]
			if err := json.Unmarshal(raw, &resp); err != nil {
				return fmt.Errorf("blender: %s: bad response: %w", method, err)
			}
			if resp.ID == nil || *resp.ID != id {
				p.logger().Warn("dropping stale bridge response", "method", method, "want_id", id)
				continue
			}
			if resp.Progress != nil {
				if onProgress != nil {
					onProgress(resp.Progress)
				}
				continue
			}
			ab.settle() // answered: nothing of the call runs any more
			if !resp.OK {
				if resp.Error == nil {
					return &ToolError{Code: CodeInternalError, Message: "bridge returned ok=false without an error"}
				}
				if resp.Error.Code == codeOutOfMemory {
					return p.stopOverMemory(resp.Error.Message)
				}
				if errHash != nil {
					*errHash = resp.Error.SceneHash
				}
				return &ToolError{Code: resp.Error.Code, Message: resp.Error.Message}
			}
			if out != nil {
				if err := json.Unmarshal(resp.Result, out); err != nil {
					return fmt.Errorf("blender: %s: decode result: %w", method, err)
				}
			}
			return nil
		}
	}
}

// abandonment ends a call (or batch) whose ctx ended while Blender may be
// running one of its requests: Blender's state is then unknown, so the
// process is marked broken and Blender killed (once); the session recovers
// from its journal. Once the call has its last answer, or the bridge
// reported a failure (it refuses the rest of a failed batch unrun), nothing
// of it can run any more: the call settles, and a ctx that ends after that
// (a caller that hangs up as soon as it sees the answer) leaves Blender
// alone.
type abandonment struct {
	p       *Process
	msg     string
	attrs   []any
	mu      sync.Mutex
	settled bool
	killed  bool
}

func (p *Process) abandoner(msg string, attrs ...any) *abandonment {
	return &abandonment{p: p, msg: msg, attrs: attrs}
}

// watch kills Blender when ctx ends before the call settles; the returned
// stop ends the watch.
func (a *abandonment) watch(ctx context.Context) (stop func() bool) {
	return context.AfterFunc(ctx, func() { a.abandonUnsettled(ctx) })
}

// abandonUnsettled kills Blender unless the call has settled.
func (a *abandonment) abandonUnsettled(ctx context.Context) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if !a.settled {
		a.kill(ctx)
	}
}

// abandon is for the call itself, seeing ctx end while it waits for
// Blender: it kills Blender, settled or not, and returns ctx.Err(). The
// call must kill on its own goroutine: ctx closes Done before it starts
// AfterFunc's functions, so the call can see the end and return first, and
// its deferred stop would then keep watch's kill from running at all.
func (a *abandonment) abandon(ctx context.Context) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.kill(ctx)
	return ctx.Err()
}

// settle says that no request of the call can run in Blender any more.
func (a *abandonment) settle() {
	a.mu.Lock()
	a.settled = true
	a.mu.Unlock()
}

// kill marks the process broken and kills Blender, once. The caller holds
// a.mu.
func (a *abandonment) kill(ctx context.Context) {
	if a.killed {
		return
	}
	a.killed = true
	a.p.broken.Store(true)
	a.p.logger().Warn(a.msg, append(a.attrs, "err", ctx.Err())...)
	a.p.killGroup()
}

// stopOverMemory stops a Blender that ran out of memory under its ceiling
// (the bridge said so: an allocation failed) and returns the call's error.
func (p *Process) stopOverMemory(msg string) error {
	p.overMemory.Store(true)
	p.broken.Store(true)
	p.logger().Warn("blender ran out of memory; killing it", "message", msg)
	p.killGroup()
	return fmt.Errorf("%w: %w: %s", ErrProcessExited, ErrMemoryExceeded, msg)
}

// Usable reports whether Blender can take calls: false once it exited, was
// stopped, or was killed (an abandoned or over-budget call, out of memory),
// even before its exit is seen.
func (p *Process) Usable() bool { return p.unusable() == nil }

func (p *Process) unusable() error {
	if p.overMemory.Load() {
		return fmt.Errorf("%w: %w", ErrProcessExited, ErrMemoryExceeded)
	}
	select {
	case <-p.done:
		return p.exitError(nil)
	default:
	}
	if p.stopped.Load() {
		return fmt.Errorf("%w: stopped", ErrProcessExited)
	}
	if p.broken.Load() {
		return fmt.Errorf("%w: killed after an abandoned call", ErrProcessExited)
	}
	return nil
}

// exitError describes a dead process: its exit status and last output lines.
func (p *Process) exitError(cause error) error {
	select {
	case <-p.done:
	case <-time.After(5 * time.Second):
		return fmt.Errorf("%w: transport failed: %v", ErrProcessExited, cause)
	}
	msg := "exit status unknown"
	if p.waitErr != nil {
		msg = p.waitErr.Error()
	} else if p.cmd.ProcessState != nil {
		msg = p.cmd.ProcessState.String()
	}
	if tail := p.output.last(10); len(tail) > 0 {
		msg += "; last output:\n  " + strings.Join(tail, "\n  ")
	}
	if p.overMemory.Load() {
		return fmt.Errorf("%w: %w: %s", ErrProcessExited, ErrMemoryExceeded, msg)
	}
	return fmt.Errorf("%w: %s", ErrProcessExited, msg)
}

func (p *Process) killGroup() {
	// The group outlives its leader if Blender left children behind.
	if err := syscall.Kill(-p.pgid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		p.logger().Warn("kill process group", "err", err)
	}
}

// Profile describes the running Blender.
func (p *Process) Profile() Profile {
	pr := p.profile
	pr.Features = append([]string(nil), p.profile.Features...)
	return pr
}

// Tools returns the bridge's tool registry, sorted by name.
func (p *Process) Tools() []Tool { return append([]Tool(nil), p.tools...) }

// Pid returns the process id of Blender (also its process group id).
func (p *Process) Pid() int { return p.pgid }

// Reset loads the baseline scene (documented in bridge/baseline.py) and returns its hash.
func (p *Process) Reset(ctx context.Context) (string, error) {
	var r hashResult
	if err := p.call(ctx, "reset", struct{}{}, &r, nil); err != nil {
		return "", fmt.Errorf("blender: reset: %w", err)
	}
	return r.SceneHash, nil
}

// SceneHash returns the current scene_state_v1 hash (the bridge's running hash).
func (p *Process) SceneHash(ctx context.Context) (string, error) {
	var r hashResult
	if err := p.call(ctx, "scene_hash", struct{}{}, &r, nil); err != nil {
		return "", fmt.Errorf("blender: scene hash: %w", err)
	}
	return r.SceneHash, nil
}

// Snapshot returns the full canonical snapshot, hashed from scratch.
func (p *Process) Snapshot(ctx context.Context) (Snapshot, error) {
	var s Snapshot
	if err := p.call(ctx, "snapshot", struct{}{}, &s, nil); err != nil {
		return Snapshot{}, fmt.Errorf("blender: snapshot: %w", err)
	}
	return s, nil
}

// Execute runs one tool. Progress the tool reports while it runs is passed
// to c.OnProgress, in order, before Execute returns. A failure of the tool
// returns a *ToolError; Outcome then carries the scene's current hash as
// both before and after: the hash before the call, unless the bridge could
// not roll the failed call back (internal_error; python.exec has no
// rollback), so a caller that knows the hash before must compare. Args
// nested deeper than 64 levels fail at once with an invalid_input
// *ToolError and an empty Outcome, without a round trip to Blender. A result
// larger than the bridge's MAX_RESULT_BYTES (16 MiB, bridge/main.py) fails
// with invalid_input and is rolled back. A dead Blender returns an error
// wrapping ErrProcessExited. If ctx ends during the call, Execute returns
// ctx.Err() and kills Blender.
func (p *Process) Execute(ctx context.Context, c Call) (Outcome, error) {
	if err := checkArgsDepth(c.Args); err != nil {
		return Outcome{}, err
	}
	start := time.Now()
	var r executeResult
	var errHash string
	err := p.callProgress(ctx, "execute", c.params(""), &r, &errHash, c.OnProgress)
	return p.outcome(c, r, errHash, err, start)
}

// params are the execute params of c, in batch (empty: none).
func (c *Call) params(batch string) executeParams {
	args := c.Args
	if args == nil {
		args = map[string]any{}
	}
	return executeParams{
		Tool: c.Tool, Args: args, MutationID: c.MutationID,
		RequestID: c.RequestID, OperationID: c.OperationID, MCPCallID: c.MCPCallID,
		InjectProgress: c.injectProgress, InjectFailure: c.injectFailure, Batch: batch,
	}
}

// outcome turns the result of an execute request into Execute's results.
func (p *Process) outcome(c Call, r executeResult, errHash string, err error, start time.Time) (Outcome, error) {
	if err != nil {
		var te *ToolError
		if errors.As(err, &te) {
			if p.logger().Enabled(context.Background(), slog.LevelDebug) {
				p.callLog(c).Debug("tool refused", "code", te.Code, "message", te.Message, "duration", time.Since(start))
			}
			return Outcome{SceneHashBefore: errHash, SceneHashAfter: errHash}, err
		}
		p.callLog(c).Warn("tool call failed", "err", err)
		return Outcome{}, err
	}
	if p.logger().Enabled(context.Background(), slog.LevelDebug) {
		p.callLog(c).Debug("tool done", "mutated", r.Mutated, "scene_hash_after", r.SceneHashAfter, "duration", time.Since(start))
	}
	result, rerr := structwire.FromJSON(r.Result)
	if rerr != nil {
		// python.exec's result may hold what a Struct cannot (a number
		// beyond float64). The call ran: it fails as a tool error with the
		// scene's hash after it, so the caller discards its effect.
		te := &ToolError{Code: CodeInternalError, Message: "blender: execute: decode result: " + rerr.Error()}
		p.callLog(c).Warn("tool call failed", "err", te)
		return Outcome{SceneHashBefore: r.SceneHashAfter, SceneHashAfter: r.SceneHashAfter}, te
	}
	var undo json.RawMessage
	if len(r.Undo) > 0 && string(r.Undo) != "null" {
		undo = r.Undo
	}
	if len(r.Files) == 0 {
		r.Files = nil // the bridge sends []
	}
	return Outcome{Result: result, SceneHashBefore: r.SceneHashBefore, SceneHashAfter: r.SceneHashAfter, Mutated: r.Mutated, Undo: undo, Files: r.Files, RecordsChanged: r.RecordsChanged}, nil
}

// callLog is the logger of one call, with its correlation ids (built only
// when a line is written: With costs more than the call's other Go work).
func (p *Process) callLog(c Call) *slog.Logger {
	return p.logger().With("tool", c.Tool, "request_id", c.RequestID, "operation_id", c.OperationID, "mcp_call_id", c.MCPCallID, "mutation_id", c.MutationID)
}

// Undo applies a compensation (an Outcome.Undo) and returns the scene hash
// after it. Applied right after the call that produced it, it returns that
// call's SceneHashBefore; compensations of several calls must be applied in
// reverse order. Its cost follows the size of the change, not of the scene.
// c only supplies correlation ids for logging (c.Tool and c.Args are unused).
//
// A compensation that no longer fits the scene (the object is gone, its
// name is taken again, ...) fails with a *ToolError (conflict, or
// invalid_input for a malformed record) and changes nothing. A failure
// midway is rolled back, so the scene is as it was before the Undo call.
// With any *ToolError the returned hash is the scene's current hash: equal to
// the hash before the call, except when the error is internal_error (the
// rollback itself failed, or the "undo" test fault of Options.Faults), in
// which case it honestly describes the partially undone scene.
func (p *Process) Undo(ctx context.Context, undo json.RawMessage, c Call) (sceneHash string, err error) {
	if len(undo) == 0 || string(undo) == "null" {
		return "", &ToolError{Code: CodeInvalidInput, Message: "empty undo record"}
	}
	if !json.Valid(undo) {
		return "", &ToolError{Code: CodeInvalidInput, Message: "undo record is not valid JSON"}
	}
	start := time.Now()
	log := p.logger().With("request_id", c.RequestID, "operation_id", c.OperationID, "mcp_call_id", c.MCPCallID, "mutation_id", c.MutationID)
	var r undoResult
	var errHash string
	err = p.call(ctx, "undo", undoParams{
		Undo: undo, MutationID: c.MutationID,
		RequestID: c.RequestID, OperationID: c.OperationID, MCPCallID: c.MCPCallID,
	}, &r, &errHash)
	if err != nil {
		var te *ToolError
		if errors.As(err, &te) {
			log.Warn("undo failed", "code", te.Code, "message", te.Message, "scene_hash", errHash)
			return errHash, err
		}
		log.Warn("undo call failed", "err", err)
		return "", err
	}
	log.Debug("undo done", "scene_hash_before", r.SceneHashBefore, "scene_hash_after", r.SceneHashAfter, "duration", time.Since(start))
	return r.SceneHashAfter, nil
}

// SaveCheckpoint saves the scene, tombstones included, to the .blend file
// path, atomically: Blender writes path+".tmp" (uncompressed, as a copy, so
// the session's file path and state stay as they are), which is fsynced and
// renamed over path, and the directory is fsynced. The bridge state needed
// later (the tombstone counter) and the scene hash travel inside the file.
// It returns the scene hash, which saving does not change.
func (p *Process) SaveCheckpoint(ctx context.Context, path string) (sceneHash string, err error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return "", fmt.Errorf("blender: save checkpoint: %w", err)
	}
	tmp := abs + ".tmp"
	start := time.Now()
	var r checkpointResult
	if err := p.call(ctx, "save_checkpoint", checkpointParams{Path: tmp}, &r, nil); err != nil {
		return "", fmt.Errorf("blender: save checkpoint: %w", err)
	}
	if err := syncFile(tmp); err != nil {
		return "", fmt.Errorf("blender: save checkpoint: %w", err)
	}
	if err := os.Rename(tmp, abs); err != nil {
		return "", fmt.Errorf("blender: save checkpoint: %w", err)
	}
	if err := syncFile(filepath.Dir(abs)); err != nil {
		return "", fmt.Errorf("blender: save checkpoint: %w", err)
	}
	p.logger().Info("checkpoint saved", "path", abs, "bytes", r.Bytes, "blender_ms", r.Millis, "duration", time.Since(start), "scene_hash", r.SceneHash)
	return r.SceneHash, nil
}

// LoadCheckpoint replaces the scene with a checkpoint written by
// SaveCheckpoint, rebuilds the bridge's incremental hash from scratch and
// restores the bridge state saved with it (tombstones stay restorable, so
// compensations of calls made before the checkpoint still apply). It returns
// the scene hash, which equals the one SaveCheckpoint returned; if it does
// not, the scene is loaded anyway and LoadCheckpoint fails with an
// internal_error *ToolError. A missing file is a not_found *ToolError.
func (p *Process) LoadCheckpoint(ctx context.Context, path string) (sceneHash string, err error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return "", fmt.Errorf("blender: load checkpoint: %w", err)
	}
	start := time.Now()
	var r checkpointResult
	var errHash string
	if err := p.call(ctx, "load_checkpoint", checkpointParams{Path: abs}, &r, &errHash); err != nil {
		return errHash, fmt.Errorf("blender: load checkpoint: %w", err)
	}
	p.logger().Info("checkpoint loaded", "path", abs, "blender_ms", r.Millis, "duration", time.Since(start), "scene_hash", r.SceneHash)
	return r.SceneHash, nil
}

func syncFile(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// Stop asks the bridge to quit, waits up to grace for Blender to exit, then
// SIGKILLs the whole process group. It returns once the process is gone.
func (p *Process) Stop(grace time.Duration) error {
	p.stopped.Store(true)
	select {
	case <-p.done:
		p.killGroup()
		return nil
	default:
	}
	// A call in progress holds the lock; then there is nobody to ask politely.
	if p.mu.TryLock() {
		p.nextID++
		line, _ := json.Marshal(request{ID: p.nextID, Method: "shutdown", Params: struct{}{}})
		_ = p.reqW.SetWriteDeadline(time.Now().Add(grace))
		if _, err := p.reqW.Write(append(line, '\n')); err != nil {
			p.logger().Debug("shutdown request not delivered", "err", err)
		}
		p.mu.Unlock()
	}
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-p.done:
		p.killGroup()
		return nil
	case <-t.C:
	}
	p.logger().Warn("blender did not exit in time; killing its process group", "grace", grace)
	p.killGroup()
	select {
	case <-p.done:
		return nil
	case <-time.After(10 * time.Second):
		return fmt.Errorf("blender: process %d did not exit after SIGKILL", p.pgid)
	}
}

// Done is closed once the Blender process has exited.
func (p *Process) Done() <-chan struct{} { return p.done }

// Wait blocks until Blender has exited and returns its exit error (nil for a
// clean exit; an *exec.ExitError for a non-zero status or a signal).
func (p *Process) Wait() error {
	<-p.done
	return p.waitErr
}

// lineRing keeps the last n lines of Blender's output.
type lineRing struct {
	mu    sync.Mutex
	lines []string
	next  int
	full  bool
}

func newLineRing(n int) *lineRing { return &lineRing{lines: make([]string, n)} }

func (r *lineRing) add(s string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.lines[r.next] = s
	r.next = (r.next + 1) % len(r.lines)
	if r.next == 0 {
		r.full = true
	}
}

// last returns up to n of the newest lines, oldest first.
func (r *lineRing) last(n int) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var all []string
	if r.full {
		all = append(all, r.lines[r.next:]...)
	}
	all = append(all, r.lines[:r.next]...)
	if len(all) > n {
		all = all[len(all)-n:]
	}
	return all
}
