package blender

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestSharedCache: Blenders that share a cache dir run one copy of the
// bridge, written once, and keep Python's bytecode in the cache (none
// beside the sources, none in the work dir). A bridge file edited on disk
// is written again and the bytecode compiled from it dropped; the bridge
// of another content (an older agentd) goes.
func TestSharedCache(t *testing.T) {
	forEachRuntime(t, func(t *testing.T, rt Runtime) {
		dir := t.TempDir()
		cache := filepath.Join(dir, "cache")
		stale := filepath.Join(cache, "bridge-0123456789abcdef")
		if err := os.MkdirAll(stale, 0o700); err != nil {
			t.Fatal(err)
		}
		start := func(name string) *Process {
			t.Helper()
			p, err := Start(callCtx(t), rt, Options{Logger: testLogger(t), WorkDir: filepath.Join(dir, name),
				SandboxDir: filepath.Join(dir, name, "out"), CacheDir: cache})
			if err != nil {
				t.Fatalf("Start: %v", err)
			}
			t.Cleanup(func() { p.Stop(5 * time.Second) })
			return p
		}
		bridge := filepath.Join(cache, "bridge-"+bridgeDigest())
		pyc := func() []string {
			t.Helper()
			var found []string
			filepath.WalkDir(filepath.Join(cache, "pycache"), func(path string, d os.DirEntry, err error) error {
				if err == nil && strings.HasPrefix(path, filepath.Join(cache, "pycache", bridge)+string(filepath.Separator)) &&
					strings.HasSuffix(path, ".pyc") {
					found = append(found, filepath.Base(path))
				}
				return nil
			})
			return found
		}

		a := start("a")
		if _, err := os.Stat(stale); !os.IsNotExist(err) {
			t.Errorf("the bridge of another content is still there: %v", err)
		}
		if _, err := os.Stat(filepath.Join(dir, "a", "bridge")); !os.IsNotExist(err) {
			t.Errorf("the work dir has a bridge of its own: %v", err)
		}
		compiled := pyc()
		if len(compiled) < 10 || !contains(compiled, "registry."+cacheTag(t, a)+".pyc") {
			t.Fatalf("bytecode of the bridge in the cache: %v", compiled)
		}
		filepath.WalkDir(bridge, func(path string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() && d.Name() == "__pycache__" {
				t.Errorf("bytecode beside the sources: %s", path)
			}
			return nil
		})
		before, err := os.Stat(filepath.Join(bridge, "registry.py"))
		if err != nil {
			t.Fatal(err)
		}

		b := start("b") // the same copy, not written again
		after, err := os.Stat(filepath.Join(bridge, "registry.py"))
		if err != nil || !after.ModTime().Equal(before.ModTime()) {
			t.Errorf("the bridge was written again for a second Blender: %v, %v → %v", err, before.ModTime(), after.ModTime())
		}
		if h1, h2 := sceneHash(t, a), sceneHash(t, b); h1 != h2 {
			t.Errorf("baseline hashes differ: %s, %s", h1, h2)
		}

		// Edited on disk, or a module added that would shadow one: written
		// again, its bytecode dropped.
		edited := filepath.Join(bridge, "records.py")
		if err := os.WriteFile(edited, []byte("raise SystemExit('edited')\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		c := start("c")
		if data, err := os.ReadFile(edited); err != nil || strings.Contains(string(data), "edited") {
			t.Errorf("an edited bridge file was not written again: %v", err)
		}
		added := filepath.Join(bridge, "platform.py")
		if err := os.WriteFile(added, []byte("raise SystemExit('added')\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		start("d")
		if _, err := os.Stat(added); !os.IsNotExist(err) {
			t.Errorf("a module added to the bridge is still there: %v", err)
		}
		if left, _ := filepath.Glob(filepath.Join(cache, "*.old")); len(left) > 0 {
			t.Errorf("left behind: %v", left)
		}
		if h := sceneHash(t, c); h != sceneHash(t, a) {
			t.Errorf("baseline hash after the rewrite: %s", h)
		}

		// Modules imported after the bridge's own keep the bytecode they
		// were installed with (or none): nothing of theirs in the cache.
		mustExecute(t, c, "python.exec", map[string]any{"code": "import xml.dom.minidom"})
		filepath.WalkDir(filepath.Join(cache, "pycache"), func(path string, d os.DirEntry, err error) error {
			if err == nil && strings.Contains(filepath.Base(path), "minidom") {
				t.Errorf("a module python.exec imported was compiled into the cache: %s", path)
			}
			return nil
		})

		// A cache that cannot be written: a bridge of its own, as without one.
		blocked := filepath.Join(dir, "blocked")
		if err := os.WriteFile(blocked, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		p, err := Start(callCtx(t), rt, Options{Logger: testLogger(t), WorkDir: filepath.Join(dir, "e"), CacheDir: blocked})
		if err != nil {
			t.Fatalf("Start with an unusable cache: %v", err)
		}
		t.Cleanup(func() { p.Stop(5 * time.Second) })
		if _, err := os.Stat(filepath.Join(dir, "e", "bridge", "main.py")); err != nil {
			t.Errorf("no bridge of its own: %v", err)
		}
		if h := sceneHash(t, p); h != sceneHash(t, a) {
			t.Errorf("baseline hash without the cache: %s", h)
		}
	})
}

// cacheTag is the runtime's Python cache tag (cpython-311).
func cacheTag(t *testing.T, p *Process) string {
	t.Helper()
	parts := strings.SplitN(p.Profile().PythonVersion, ".", 3)
	if len(parts) < 2 {
		t.Fatalf("python version %q", p.Profile().PythonVersion)
	}
	return "cpython-" + parts[0] + parts[1]
}

func sceneHash(t *testing.T, p *Process) string {
	t.Helper()
	h, err := p.SceneHash(callCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	return h
}
