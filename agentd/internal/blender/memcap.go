package blender

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// The memory ceiling of one Blender (Options.MemoryLimitMiB) is held by the
// first mechanism the host offers, in this order:
//
//	cgroup2  a child of agentd's own cgroup (unified hierarchy) with
//	         memory.max, memory.swap.max 0 and memory.oom.group 1; Blender is
//	         cloned straight into it. Needs the memory controller delegated to
//	         agentd's cgroup (systemd: Delegate=yes).
//	cgroup1  a child of agentd's own cgroup in the v1 memory hierarchy, with
//	         memory.limit_in_bytes (and memory.memsw.limit_in_bytes where swap
//	         is accounted); Blender joins it right after it starts.
//	rlimit   RLIMIT_DATA on the Blender process, where no cgroup can be made.
//
// Over a cgroup's limit the kernel's OOM killer stops Blender, which the
// cgroup's oom_kill counter records. Under the rlimit an allocation over it
// fails instead; the bridge turns Python's MemoryError into codeOutOfMemory
// and the Process stops Blender. Either way the call fails with an error
// wrapping ErrMemoryExceeded and ErrProcessExited.
const (
	capCgroup2 = "cgroup2"
	capCgroup1 = "cgroup1"
	capRlimit  = "rlimit"
)

// memCapKinds are the mechanisms tried, in order (tests narrow it).
var memCapKinds = []string{capCgroup2, capCgroup1, capRlimit}

// cgroupSeq numbers the cgroups this agentd makes.
var cgroupSeq atomic.Uint64

// memCap is the ceiling of one Blender process.
type memCap struct {
	kind  string
	limit int64    // bytes
	dir   string   // the cgroup's directory (cgroup kinds)
	fd    *os.File // cgroup2: the directory, for clone into the cgroup
}

// newMemCap makes the ceiling for one Blender, by the first mechanism of
// memCapKinds that works here.
func newMemCap(limitMiB int64) (*memCap, error) {
	limit := limitMiB << 20
	var tried []string
	for _, kind := range memCapKinds {
		var c *memCap
		var err error
		switch kind {
		case capCgroup2:
			c, err = newCgroup2(limit)
		case capCgroup1:
			c, err = newCgroup1(limit)
		case capRlimit:
			c = &memCap{kind: capRlimit, limit: limit}
		}
		if err == nil {
			return c, nil
		}
		tried = append(tried, kind+": "+err.Error())
	}
	return nil, fmt.Errorf("no way to cap memory here (%s)", strings.Join(tried, "; "))
}

// prepare sets up attr so that the process starts under the cap, where the
// mechanism can do that atomically.
func (c *memCap) prepare(attr *syscall.SysProcAttr) {
	if c.fd != nil {
		attr.UseCgroupFD = true
		attr.CgroupFD = int(c.fd.Fd())
	}
}

// attach puts the started process pid under the cap.
func (c *memCap) attach(pid int) error {
	switch c.kind {
	case capCgroup1:
		return os.WriteFile(filepath.Join(c.dir, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0)
	case capRlimit:
		lim := uint64(c.limit)
		return unix.Prlimit(pid, unix.RLIMIT_DATA, &unix.Rlimit{Cur: lim, Max: lim}, nil)
	}
	return nil
}

// setLimit lowers the ceiling of the running process pid to limit bytes
// (an rlimit's hard limit cannot be raised without CAP_SYS_RESOURCE).
func (c *memCap) setLimit(pid int, limit int64) error {
	v := strconv.FormatInt(limit, 10)
	var err error
	switch c.kind {
	case capCgroup2:
		err = writeAll(c.dir, [][2]string{{"memory.max", v}}, "")
	case capCgroup1:
		// memsw (memory+swap) must never be below memory.limit_in_bytes:
		// lowered after it.
		err = writeAll(c.dir, [][2]string{{"memory.limit_in_bytes", v}, {"memory.memsw.limit_in_bytes", v}},
			"memory.memsw.limit_in_bytes")
	case capRlimit:
		was := c.limit
		c.limit = limit
		if err = c.attach(pid); err != nil {
			c.limit = was
		}
		return err
	}
	if err == nil {
		c.limit = limit
	}
	return err
}

// oomKilled reports whether the kernel killed a process of the cgroup for
// going over its limit.
func (c *memCap) oomKilled() bool {
	switch c.kind {
	case capCgroup2:
		return counter(filepath.Join(c.dir, "memory.events"), "oom_kill") > 0
	case capCgroup1:
		return counter(filepath.Join(c.dir, "memory.oom_control"), "oom_kill") > 0
	}
	return false
}

// release removes the cgroup once its processes are gone.
func (c *memCap) release() {
	if c.fd != nil {
		c.fd.Close()
	}
	if c.dir == "" {
		return
	}
	// The kernel may take a moment to let go of a killed process.
	for i := 0; i < 100; i++ {
		if err := os.Remove(c.dir); err == nil || errors.Is(err, os.ErrNotExist) {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func newCgroup2(limit int64) (*memCap, error) {
	own, err := ownCgroup("cgroup2", "")
	if err != nil {
		return nil, err
	}
	if !hasWord(filepath.Join(own, "cgroup.subtree_control"), "memory") {
		// Fails (EBUSY) while agentd's own cgroup holds processes, unless
		// it is the root: the memory controller must be delegated to us.
		if err := os.WriteFile(filepath.Join(own, "cgroup.subtree_control"), []byte("+memory"), 0); err != nil {
			return nil, fmt.Errorf("memory controller not delegated to %s: %w", own, err)
		}
	}
	dir, err := makeCgroup(own)
	if err != nil {
		return nil, err
	}
	c := &memCap{kind: capCgroup2, limit: limit, dir: dir}
	err = writeAll(dir, [][2]string{
		{"memory.max", strconv.FormatInt(limit, 10)},
		{"memory.swap.max", "0"},
		{"memory.oom.group", "1"},
	}, "memory.swap.max")
	if err == nil {
		c.fd, err = os.Open(dir)
	}
	if err != nil {
		c.release()
		return nil, err
	}
	return c, nil
}

func newCgroup1(limit int64) (*memCap, error) {
	own, err := ownCgroup("cgroup", "memory")
	if err != nil {
		return nil, err
	}
	dir, err := makeCgroup(own)
	if err != nil {
		return nil, err
	}
	c := &memCap{kind: capCgroup1, limit: limit, dir: dir}
	// memsw (memory+swap) must not be below memory.limit_in_bytes: set after it.
	err = writeAll(dir, [][2]string{
		{"memory.limit_in_bytes", strconv.FormatInt(limit, 10)},
		{"memory.memsw.limit_in_bytes", strconv.FormatInt(limit, 10)},
	}, "memory.memsw.limit_in_bytes")
	if err != nil {
		c.release()
		return nil, err
	}
	return c, nil
}

// writeAll writes each file of dir; optional is a file that may be absent
// (swap accounting off).
func writeAll(dir string, files [][2]string, optional string) error {
	for _, f := range files {
		err := os.WriteFile(filepath.Join(dir, f[0]), []byte(f[1]), 0)
		if err != nil && !(f[0] == optional && errors.Is(err, os.ErrNotExist)) {
			return fmt.Errorf("set %s: %w", f[0], err)
		}
	}
	return nil
}

// makeCgroup makes a new child of parent named for this agentd
// (blendplane-<pid>-<n>), after removing the empty leftovers of agentds
// that are gone.
func makeCgroup(parent string) (string, error) {
	pid := os.Getpid()
	if old, _ := filepath.Glob(filepath.Join(parent, "blendplane-*")); len(old) > 0 {
		for _, dir := range old {
			var owner, n int
			if _, err := fmt.Sscanf(filepath.Base(dir), "blendplane-%d-%d", &owner, &n); err == nil && owner != pid &&
				syscall.Kill(owner, 0) == syscall.ESRCH {
				os.Remove(dir) // fails harmlessly if it still holds a process
			}
		}
	}
	dir := filepath.Join(parent, fmt.Sprintf("blendplane-%d-%d", pid, cgroupSeq.Add(1)))
	if err := os.Mkdir(dir, 0o755); err != nil {
		return "", err
	}
	return dir, nil
}

// ownCgroup is the directory of this process's cgroup in the hierarchy
// mounted with file system type fstype ("cgroup2", or "cgroup" with the v1
// controller named).
func ownCgroup(fstype, controller string) (string, error) {
	var rel string
	found := false
	err := eachLine("/proc/self/cgroup", func(line string) bool {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			return true
		}
		if controller == "" && parts[0] == "0" && parts[1] == "" ||
			controller != "" && hasItem(parts[1], controller) {
			rel, found = parts[2], true
			return false
		}
		return true
	})
	if err != nil {
		return "", err
	}
	if !found {
		return "", fmt.Errorf("not in a %s hierarchy", fstype)
	}
	// mountinfo: id parent dev root mountpoint options [optional...] - fstype source superoptions
	var dir string
	err = eachLine("/proc/self/mountinfo", func(line string) bool {
		pre, post, ok := strings.Cut(line, " - ")
		f, g := strings.Fields(pre), strings.Fields(post)
		if !ok || len(f) < 5 || len(g) < 3 || g[0] != fstype || controller != "" && !hasItem(g[2], controller) {
			return true
		}
		root, mnt := unescapeMount(f[3]), unescapeMount(f[4])
		if r, ok := strings.CutPrefix(rel, root); ok && (root == "/" || r == "" || r[0] == '/') {
			dir = filepath.Join(mnt, r)
			return false
		}
		return true
	})
	if err != nil {
		return "", err
	}
	if dir == "" {
		return "", fmt.Errorf("no %s mount holds %s", fstype, rel)
	}
	return dir, nil
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	if u, err := strconv.Unquote(`"` + strings.ReplaceAll(s, `"`, `\"`) + `"`); err == nil {
		return u
	}
	return s
}

func hasItem(list, item string) bool {
	for _, s := range strings.Split(list, ",") {
		if s == item {
			return true
		}
	}
	return false
}

func hasWord(file, word string) bool {
	data, err := os.ReadFile(file)
	if err != nil {
		return false
	}
	for _, w := range strings.Fields(string(data)) {
		if w == word {
			return true
		}
	}
	return false
}

// counter reads key's value from a file of "key value" lines (0 if absent).
func counter(file, key string) int64 {
	var n int64
	eachLine(file, func(line string) bool {
		k, v, _ := strings.Cut(line, " ")
		if k == key {
			n, _ = strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			return false
		}
		return true
	})
	return n
}

// eachLine calls fn with each line of file until fn returns false.
func eachLine(file string, fn func(string) bool) error {
	f, err := os.Open(file)
	if err != nil {
		return err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() && fn(sc.Text()) {
	}
	return sc.Err()
}
