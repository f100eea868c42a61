package blender

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
)

// RuntimeKind says how a Blender runtime is started.
type RuntimeKind string

const (
	// RuntimeBinary is a blender executable, run as
	// `blender -b --factory-startup --python bridge/main.py -- ...`.
	RuntimeBinary RuntimeKind = "binary"
	// RuntimeBPYModule is a Python interpreter that can `import bpy`
	// (Blender as a Python module), run as `python -I bridge/main.py ...`.
	RuntimeBPYModule RuntimeKind = "bpy_module"
)

// Runtime is one Blender installation agentd can start.
type Runtime struct {
	Kind RuntimeKind
	Path string
}

// ErrNoRuntime is returned by Discover when no Blender can be found.
var ErrNoRuntime = errors.New("no Blender runtime found")

// venvPython is where `make blender` installs the bpy wheel, relative to the repo root.
var venvPython = filepath.Join(".blender", "venv", "bin", "python")

var pythonName = regexp.MustCompile(`^python[0-9.]*$`)

// Discover finds Blender runtimes. Explicit paths (repeatable --blender flags)
// win and are all returned, each classified by its name: a python* executable
// is a bpy module runtime, anything else a blender binary. Without explicit
// paths, Discover returns the first of: the repo virtualenv
// .blender/venv/bin/python under each of searchDirs (in order), then `blender`
// on PATH.
func Discover(explicit []string, searchDirs []string) ([]Runtime, error) {
	if len(explicit) > 0 {
		var out []Runtime
		for _, p := range explicit {
			resolved, err := exec.LookPath(p)
			if err != nil {
				return nil, fmt.Errorf("blender runtime %q: %w", p, err)
			}
			if abs, err := filepath.Abs(resolved); err == nil {
				resolved = abs
			}
			kind := RuntimeBinary
			if pythonName.MatchString(filepath.Base(p)) {
				kind = RuntimeBPYModule
			}
			out = append(out, Runtime{Kind: kind, Path: resolved})
		}
		return out, nil
	}
	for _, dir := range searchDirs {
		if dir == "" {
			continue
		}
		cand := filepath.Join(dir, venvPython)
		if isExecutable(cand) {
			if abs, err := filepath.Abs(cand); err == nil {
				cand = abs
			}
			return []Runtime{{Kind: RuntimeBPYModule, Path: cand}}, nil
		}
	}
	if p, err := exec.LookPath("blender"); err == nil {
		if abs, err := filepath.Abs(p); err == nil {
			p = abs
		}
		return []Runtime{{Kind: RuntimeBinary, Path: p}}, nil
	}
	return nil, fmt.Errorf("%w: run `make blender` to install the bpy wheel into %s, or pass --blender PATH (a blender binary or a python that can import bpy)", ErrNoRuntime, venvPython)
}

func isExecutable(path string) bool {
	st, err := os.Stat(path)
	return err == nil && st.Mode().IsRegular() && st.Mode().Perm()&0o111 != 0
}
