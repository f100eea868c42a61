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
	"time"
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
	for _, want := range []string{"main.py", "common.py", "compat.py", "state.py", "records.py", "baseline.py", "index.py", "trash.py", "window.py", "animation.py", "schema.py", "registry.py", "sandbox.py", "tools/__init__.py", "tools/scene.py", "tools/objects.py", "tools/datablocks.py", "tools/render.py"} {
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
		if err != nil || out.Fields()["name"] != "Cube" {
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
		if err != nil || out.Fields()["object_count"] != 3.0 {
			t.Errorf("without OnProgress: %+v, %v", out, err)
		}
		assertIncrementalMatchesFull(t, p)
	})
}

// TestHooksOnlyInTestFaults: a Blender started without test faults, as
// production starts every one, ignores the calls' injected failures and
// progress, and its undos run whole.
func TestHooksOnlyInTestFaults(t *testing.T) {
	forEachRuntime(t, func(t *testing.T, rt Runtime) {
		dir := t.TempDir()
		p, err := Start(callCtx(t), rt, Options{Logger: testLogger(t), WorkDir: filepath.Join(dir, "work"), SandboxDir: filepath.Join(dir, "sandbox")})
		if err != nil {
			t.Fatal(err)
		}
		defer p.Stop(5 * time.Second)
		var progress int
		out, err := p.Execute(callCtx(t), Call{Tool: "object.create", Args: map[string]any{"type": "cube", "name": "Whole"},
			injectFailure: "object.create:linked", injectProgress: 3, OnProgress: func(map[string]any) { progress++ }})
		if err != nil || out.Fields()["name"] != "Whole" || progress != 0 {
			t.Fatalf("Execute with hooks = %+v, %v, %d progress events; want the create, no progress", out, err, progress)
		}
		if err := p.call(callCtx(t), "undo", map[string]any{"undo": out.Undo, "inject_failure": "undo.object.create:unlinked"}, nil, nil); err != nil {
			t.Fatalf("undo with an injected failure: %v", err)
		}
		if s := assertIncrementalMatchesFull(t, p); s.SceneHash != out.SceneHashBefore {
			t.Fatalf("after the undo the scene is %s, want %s", s.SceneHash, out.SceneHashBefore)
		}
	})
}

// versionScript exercises compat.version_in_range, the registry's checks and
// the Blender-version filter of the registry (hello) and of execute inside
// the runtime's Python.
const versionScript = `
import sys
sys.path.insert(0, sys.argv[sys.argv.index("--") + 1] if "--" in sys.argv else sys.argv[1])
import json, main, registry, compat
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
assert json.loads(main.m_execute({"tool": "test.now", "args": {}}))["result"] == {"ok": True}
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
		runBridgeScript(t, rt, versionScript, "VERSION-RANGES-OK")
	})
}

// runBridgeScript runs a Python script inside Blender with the bridge
// package importable (its directory is the first argument after "--" or
// the script name) and fails unless it prints marker.
func runBridgeScript(t *testing.T, rt Runtime, code, marker string) {
	t.Helper()
	dir := t.TempDir()
	bridge, err := writeBridge(filepath.Join(dir, "bridge"))
	if err != nil {
		t.Fatal(err)
	}
	script := filepath.Join(dir, "check.py")
	if err := os.WriteFile(script, []byte(code), 0o600); err != nil {
		t.Fatal(err)
	}
	var cmd *exec.Cmd
	if rt.Kind == RuntimeBinary {
		cmd = exec.Command(rt.Path, "-b", "--factory-startup", "--python-exit-code", "1", "--python", script, "--", filepath.Dir(bridge))
	} else {
		cmd = exec.Command(rt.Path, "-I", script, filepath.Dir(bridge))
	}
	cmd.Env = blenderEnv(os.Environ(), dir, "")
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), marker) {
		t.Fatalf("%v\n%s", err, out)
	}
}

// transactionScript registers a test tool that changes the scene (with its
// reversal) and writes a file (Tx.wrote), then fails in every way a tool
// can, and serves requests through main.handle the way the transport does.
const transactionScript = `
import json, os, sys, tempfile
sys.path.insert(0, sys.argv[sys.argv.index("--") + 1] if "--" in sys.argv else sys.argv[1])
import bpy
import main, registry, sandbox
from state import STATE

SESSION = tempfile.mkdtemp()  # the sandbox's parent holds what the bridge keeps beside it
os.mkdir(os.path.join(SESSION, "output"))
main.m_hello({"sandbox_dir": os.path.join(SESSION, "output")})
out_path = os.path.join(os.path.realpath(sandbox.SANDBOX["dir"]), "t.txt")

def tool(tx, args):
    ob = bpy.data.objects["Light"]
    old = tuple(ob.location)
    tx.touch("object", "Light")
    tx.on_undo(lambda: setattr(ob, "location", old))
    ob.location = (9.0, 9.0, 9.0)
    path = sandbox.output_path("t.txt", "output")
    with open(path, "w") as f:
        f.write("partial")
    tx.wrote(path)
    kind = args.get("kind")
    if kind == "big":
        return {"x": "a" * main.MAX_RESULT_BYTES}
    if kind == "nan":
        return {"x": float("nan")}
    if kind == "object":
        return {"x": object()}
    if kind == "raise":
        raise RuntimeError("late")
    if kind == "recurse":
        def f(n):
            return f(n + 1)
        f(0)
    return {"ok": True}

registry.register("test.write", tool, "test", {"type": "object", "properties": {"kind": {"type": "string"}},
                  "additionalProperties": False}, "safe_write", idempotence_class="idempotent", writes_files=True,
                  rollback_method="not_needed")

def serve(line):
    resp, _ = main.handle(line)
    return json.loads(main.response_line(resp))

before = STATE.scene_hash()
for i, (kind, code) in enumerate([("big", "invalid_input"), ("nan", "internal_error"), ("object", "internal_error"),
                                  ("raise", "internal_error"), ("recurse", "invalid_input")]):
    rid = 100 + i
    r = serve(json.dumps({"id": rid, "method": "execute", "params": {"tool": "test.write", "args": {"kind": kind}}}).encode())
    assert r["id"] == rid and not r["ok"] and r["error"]["code"] == code, (kind, r)
    assert r["error"]["scene_hash"] == before == STATE.scene_hash(), (kind, "scene changed")
    assert tuple(bpy.data.objects["Light"].location) != (9.0, 9.0, 9.0), kind
    assert not os.path.exists(out_path), (kind, "file left behind")
    kept = os.path.join(os.path.dirname(os.path.dirname(out_path)), "kept")
    assert not os.path.isdir(kept) or not os.listdir(kept), (kind, "a link kept", os.listdir(kept))

# A tool that writes a file must say so at its registration (agentd holds
# uploads off while it runs): one that does not fails.
def sneak(tx, args):
    path = sandbox.output_path("t.txt", "output")
    tx.wrote(path)
    with open(path, "w") as f:
        f.write("sneaked")
    return {}

registry.register("test.sneak", sneak, "test", {"type": "object", "additionalProperties": False}, "safe_write",
                  idempotence_class="idempotent", rollback_method="not_needed")
r = serve(b'{"id":6,"method":"execute","params":{"tool":"test.sneak","args":{}}}')
assert not r["ok"] and r["error"]["code"] == "internal_error" and "writes_files" in r["error"]["message"], r
assert not os.path.exists(out_path)
assert [t["name"] for t in registry.tool_list() if t["writes_files"]] == ["render.animation", "render.still", "scene.export", "test.write"]

r = serve(b'{"id":7,"method":"execute","params":{"tool":"test.write","args":{"kind":"ok"}}}')
assert r["id"] == 7 and r["ok"] and [f["name"] for f in r["result"]["files"]] == ["t.txt"] and r["result"]["mutated"], r
assert os.listdir(kept) == [r["result"]["files"][0]["sha256"]], os.listdir(kept)
assert r["result"]["result"] == {"ok": True} and r["result"]["undo"] is None, r
assert os.path.isfile(out_path)

# An execute's answer is written around its encoded result; ids other than
# Go's integers come back as JSON too.
for rid in ("x7", True, 7.5, None, 2**70):
    r = serve(json.dumps({"id": rid, "method": "execute", "params": {"tool": "scene.get_summary", "args": {}}}).encode())
    assert r["id"] == rid and type(r["id"]) is type(rid) and r["ok"] and not r["result"]["mutated"], r

# Lines json cannot decode are answered with the id Go writes first.
deep = '{"id":8,"method":"execute","params":{"tool":"object.create","args":{"type":' + "[" * 5000 + "]" * 5000 + "}}}"
truncated = b'{"id": 9, "method": "execu'
for rid, line in ((8, deep.encode()), (9, truncated), (10, b'{"id":10,"method":"execute","params":\xff}')):
    r = serve(line)
    assert r["id"] == rid and not r["ok"] and r["error"]["code"] == "invalid_input", r
    assert r["error"]["scene_hash"] == STATE.scene_hash()
r = serve(b"[not json")
assert r["id"] is None and r["error"]["code"] == "invalid_input", r
print("TRANSACTIONS-OK")
`

// TestBridgeTransactions: whatever makes a tool fail after it changed the
// scene and wrote a file (an exception, a result that is not JSON, one over
// MAX_RESULT_BYTES, a RecursionError), the call is rolled back: the scene
// hashes as before, the file is gone, and the error carries the hash; a
// successful call reports its file. Request lines json cannot decode (too
// deep, truncated, not UTF-8) are answered with their id.
func TestBridgeTransactions(t *testing.T) {
	forEachRuntime(t, func(t *testing.T, rt Runtime) {
		runBridgeScript(t, rt, transactionScript, "TRANSACTIONS-OK")
	})
}

// TestOversizedResult: a result over MAX_RESULT_BYTES is refused with
// invalid_input and rolled back; python.exec has no rollback, so one that
// changed the scene fails with internal_error and the honest hash of the
// changed scene, which the caller sees differ from the hash before.
func TestOversizedResult(t *testing.T) {
	forEachRuntime(t, func(t *testing.T, rt Runtime) {
		p := startTestProcess(t, rt)
		wantToolError(t, p, "python.exec", map[string]any{"code": "result = 'x' * (17 << 20)"}, CodeInvalidInput)
		before, err := p.SceneHash(callCtx(t))
		if err != nil {
			t.Fatal(err)
		}
		out, err := p.Execute(callCtx(t), Call{Tool: "python.exec", Args: map[string]any{
			"code": "bpy.data.objects['Light'].location.x = 5\nresult = ['x' * (1 << 20)] * 17"}})
		now, herr := p.SceneHash(callCtx(t))
		if !isCode(err, CodeInternalError) || herr != nil || out.SceneHashAfter != now || now == before {
			t.Fatalf("changing python.exec with a huge result: %+v, %v; hash now %s, before %s", out, err, now, before)
		}
		assertIncrementalMatchesFull(t, p)
		mustExecute(t, p, "scene.get_summary", nil)
	})
}
