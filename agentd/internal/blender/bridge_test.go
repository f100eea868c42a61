package blender

import (
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// TestBridgeFSLayout checks that the embedded package has its entry point
// and the tools package (__init__.py starts with "_", which a plain
// directory embed would drop), and no byte-code.
func TestBridgeFSLayout(t *testing.T) {
	var files []string
	err := fs.WalkDir(BridgeFS(), ".", func(path string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			files = append(files, path)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"main.py", "common.py", "compat.py", "state.py", "schema.py", "registry.py", "sandbox.py", "tools/__init__.py", "tools/scene.py", "tools/objects.py", "tools/render.py"} {
		if !contains(files, want) {
			t.Errorf("embedded bridge lacks %s (has %v)", want, files)
		}
	}
	for _, f := range files {
		if !strings.HasSuffix(f, ".py") {
			t.Errorf("unexpected embedded file %s", f)
		}
	}
	dir := filepath.Join(t.TempDir(), "bridge")
	if err := os.MkdirAll(filepath.Join(dir, "tools", "stale"), 0o700); err != nil {
		t.Fatal(err)
	}
	main, err := writeBridge(dir)
	if err != nil || main != filepath.Join(dir, "main.py") {
		t.Fatalf("writeBridge = %q, %v", main, err)
	}
	if _, err := os.Stat(filepath.Join(dir, "tools", "stale")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("writeBridge kept a stale file: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "tools", "__init__.py")); err != nil {
		t.Error(err)
	}
}

// TestProgress: progress lines reach Call.OnProgress in order, before the
// result, on success and on failure, and are dropped without a callback.
func TestProgress(t *testing.T) {
	forEachRuntime(t, func(t *testing.T, rt Runtime) {
		p := startTestProcess(t, rt)
		var got []map[string]any
		out, err := p.Execute(callCtx(t), Call{
			Tool: "object.create", Args: map[string]any{"type": "cube"}, injectProgress: 3,
			OnProgress: func(m map[string]any) { got = append(got, m) },
		})
		if err != nil || out.Result["name"] != "Cube" {
			t.Fatalf("Execute = %+v, %v", out, err)
		}
		want := []map[string]any{{"injected": 1.0, "of": 3.0}, {"injected": 2.0, "of": 3.0}, {"injected": 3.0, "of": 3.0}}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("progress = %v, want %v", got, want)
		}

		got = nil
		_, err = p.Execute(callCtx(t), Call{
			Tool: "object.delete", Args: map[string]any{"name": "Nope"}, injectProgress: 2,
			OnProgress: func(m map[string]any) { got = append(got, m) },
		})
		var te *ToolError
		if !errors.As(err, &te) || te.Code != CodeNotFound || len(got) != 2 {
			t.Errorf("failing tool: err %v, progress %v", err, got)
		}

		// No callback: the progress lines are skipped, the call still works.
		out, err = p.Execute(callCtx(t), Call{Tool: "scene.get_summary", injectProgress: 5})
		if err != nil || out.Result["object_count"] != 3.0 {
			t.Errorf("without OnProgress: %+v, %v", out, err)
		}
		assertIncrementalMatchesFull(t, p)
	})
}

// versionScript exercises compat.version_in_range, the registry's checks and
// the Blender-version filter of the registry (hello) and of execute inside
// the runtime's Python.
const versionScript = `
import sys
sys.path.insert(0, sys.argv[sys.argv.index("--") + 1] if "--" in sys.argv else sys.argv[1])
import main, registry, compat
from common import ToolError
from schema import NO_ARGS

ok = [(">=3.4", (3, 4, 0)), (">=3.4", (4, 5, 3)), (">=3.4,<5.0", (4, 5, 15)), ("<4.5", (4, 4, 9)),
      ("==4.5", (4, 5, 0)), ("!=4.3,>3", (4, 5, 0)), ("> 3.4.1", (3, 4, 2))]
bad = [(">=3.4,<5.0", (5, 0, 0)), ("<4.5", (4, 5, 0)), (">=4.2", (3, 4, 1)), ("!=3.4", (3, 4, 0)), ("==4.5", (4, 5, 1))]
for spec, v in ok:
    assert compat.version_in_range(spec, v), (spec, v)
for spec, v in bad:
    assert not compat.version_in_range(spec, v), (spec, v)
for spec in ("", "3.4", ">=3.x", ">=3.4;<5", "=>3.4"):
    try:
        compat.parse_version_range(spec)
    except ValueError:
        pass
    else:
        raise AssertionError("accepted " + repr(spec))

for meta in (dict(safety_level="read_only", idempotence_class="keyed"),
             dict(safety_level="safe_write"),
             dict(safety_level="safe_write", idempotence_class="idempotent", rollback_method="none"),
             dict(safety_level="read_only", safety_mode="headless"),
             dict(safety_level="read_only", blender_versions="3.4")):
    try:
        registry.register("test.bad", lambda tx, a: {}, "bad", NO_ARGS, **meta)
    except ValueError:
        pass
    else:
        raise AssertionError("accepted %r" % meta)

registry.register("test.old", lambda tx, a: {}, "only on old Blender", NO_ARGS, "read_only", blender_versions="<3.0")
registry.register("test.now", lambda tx, a: {"ok": True}, "on this Blender", NO_ARGS, "read_only",
                  blender_versions=">=3.4,<99")
names = [t["name"] for t in registry.tool_list()]
assert "test.now" in names and "test.old" not in names, names
assert "test.old" in [t["name"] for t in registry.tool_list((2, 93, 0))]
assert main.m_execute({"tool": "test.now", "args": {}})["result"] == {"ok": True}
try:
    main.m_execute({"tool": "test.old", "args": {}})
except ToolError as e:
    assert e.code == "capability_missing", e.code
else:
    raise AssertionError("test.old ran")
print("VERSION-RANGES-OK")
`

func TestToolVersionRanges(t *testing.T) {
	forEachRuntime(t, func(t *testing.T, rt Runtime) {
		dir := t.TempDir()
		bridge, err := writeBridge(filepath.Join(dir, "bridge"))
		if err != nil {
			t.Fatal(err)
		}
		script := filepath.Join(dir, "check.py")
		if err := os.WriteFile(script, []byte(versionScript), 0o600); err != nil {
			t.Fatal(err)
		}
		var cmd *exec.Cmd
		if rt.Kind == RuntimeBinary {
			cmd = exec.Command(rt.Path, "-b", "--factory-startup", "--python-exit-code", "1", "--python", script, "--", filepath.Dir(bridge))
		} else {
			cmd = exec.Command(rt.Path, "-I", script, filepath.Dir(bridge))
		}
		cmd.Env = blenderEnv(os.Environ(), dir)
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(out), "VERSION-RANGES-OK") {
			t.Fatalf("%v\n%s", err, out)
		}
	})
}
