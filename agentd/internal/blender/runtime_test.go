package blender

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

func TestDiscover(t *testing.T) {
	dir := t.TempDir()
	venv := filepath.Join(dir, ".blender", "venv", "bin")
	if err := os.MkdirAll(venv, 0o755); err != nil {
		t.Fatal(err)
	}
	py := filepath.Join(venv, "python")
	if err := os.WriteFile(py, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "blender")
	if err := os.WriteFile(bin, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	py3 := filepath.Join(dir, "python3.11")
	if err := os.WriteFile(py3, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}

	got, err := Discover([]string{bin, py3}, []string{dir})
	if err != nil {
		t.Fatal(err)
	}
	want := []Runtime{{RuntimeBinary, bin}, {RuntimeBPYModule, py3}}
	if len(got) != 2 || got[0] != want[0] || got[1] != want[1] {
		t.Errorf("explicit: got %v, want %v", got, want)
	}
	if _, err := Discover([]string{filepath.Join(dir, "missing")}, nil); err == nil {
		t.Error("missing explicit path accepted")
	}

	t.Setenv("PATH", dir)
	got, err = Discover(nil, []string{t.TempDir(), dir})
	if err != nil || len(got) != 1 || got[0] != (Runtime{RuntimeBPYModule, py}) {
		t.Errorf("venv: got %v, %v", got, err)
	}
	got, err = Discover(nil, []string{t.TempDir()})
	if err != nil || len(got) != 1 || got[0] != (Runtime{RuntimeBinary, bin}) {
		t.Errorf("PATH: got %v, %v", got, err)
	}
	t.Setenv("PATH", t.TempDir())
	if _, err := Discover(nil, []string{t.TempDir()}); !errors.Is(err, ErrNoRuntime) {
		t.Errorf("none: got %v, want ErrNoRuntime", err)
	}
}
