package blender

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
)

// The cache shared by an agent's Blenders (Options.CacheDir). Without it,
// every start writes the bridge into its work dir and Python compiles it
// and, for Debian's Blender, every startup script of Blender's own: 60 ms
// (the bpy wheel, whose own scripts pip compiled) to 0.3 s (Blender 3.4) of
// each start, paid again by every session start, spare, recovery and
// restore. With it, the bridge is written once per content, to
// CacheDir/bridge-<digest>/, and Python keeps its compiled bytecode under
// CacheDir/pycache (its pycache prefix: nothing lands beside the sources).
//
// Python checks bytecode against its source's size and modification time
// (its default); a bridge directory that differs from the embedded one (a
// file edited, added or missing) is written again, and the bytecode cache
// dropped with it. What a session runs through python.exec runs as agentd's
// user and could write here, as it could anywhere that user can (unsafe_ops,
// docs/SECURITY.md).

// bridgeDigest identifies the embedded bridge: the SHA-256 of its files'
// paths and contents, in path order.
var bridgeDigest = sync.OnceValue(func() string {
	files := bridgeContents()
	h := sha256.New()
	for _, path := range slices.Sorted(maps.Keys(files)) {
		fmt.Fprintf(h, "%s\x00%d\x00", path, len(files[path]))
		h.Write(files[path])
	}
	return hex.EncodeToString(h.Sum(nil))[:16]
})

// bridgeContents is the embedded bridge package: contents by slash-separated
// path.
var bridgeContents = sync.OnceValue(func() map[string][]byte {
	files := map[string][]byte{}
	src := BridgeFS()
	err := fs.WalkDir(src, ".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		files[path], err = fs.ReadFile(src, path)
		return err
	})
	if err != nil {
		panic(err) // the embedded tree is readable
	}
	return files
})

// cacheMu serializes the checks and writes of shared bridge directories
// within this agentd (one agentd owns a data dir).
var cacheMu sync.Mutex

// sharedBridge returns the entry point of the bridge in cacheDir, writing
// it first when it is missing or differs from the embedded one. A copy is
// written beside and renamed into place, so a Blender never imports a
// half-written one; bridges of other contents (an agentd before an upgrade)
// and the bytecode compiled from what was there are removed.
func sharedBridge(cacheDir string) (string, error) {
	cacheMu.Lock()
	defer cacheMu.Unlock()
	dir := filepath.Join(cacheDir, "bridge-"+bridgeDigest())
	if bridgeIntact(dir) {
		return filepath.Join(dir, "main.py"), nil
	}
	if err := os.MkdirAll(cacheDir, 0o700); err != nil {
		return "", err
	}
	tmp := dir + ".tmp"
	if _, err := writeBridge(tmp); err != nil {
		return "", err
	}
	// Moved aside before removal: a Blender may still write into them.
	for _, name := range []string{"pycache", filepath.Base(dir)} {
		old := filepath.Join(cacheDir, name+".old")
		if err := os.RemoveAll(old); err != nil {
			return "", err
		}
		if err := os.Rename(filepath.Join(cacheDir, name), old); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return "", err
		}
	}
	if err := os.Rename(tmp, dir); err != nil {
		return "", err
	}
	entries, err := os.ReadDir(cacheDir)
	if err != nil {
		return "", err
	}
	for _, e := range entries {
		if e.Name() != filepath.Base(dir) && (strings.HasPrefix(e.Name(), "bridge-") || e.Name() == "pycache.old") {
			if err := os.RemoveAll(filepath.Join(cacheDir, e.Name())); err != nil {
				return "", err
			}
		}
	}
	return filepath.Join(dir, "main.py"), nil
}

// bridgeIntact reports whether dir holds exactly the embedded bridge: its
// files with their contents and no other file (the directory is first on
// the bridge's sys.path, so any other module there would shadow one).
func bridgeIntact(dir string) bool {
	want := bridgeContents()
	found := 0
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, err := filepath.Rel(dir, path)
		if err != nil {
			return err
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if f, ok := want[filepath.ToSlash(rel)]; !ok || !bytes.Equal(data, f) {
			return fs.SkipAll
		}
		found++
		return nil
	})
	return err == nil && found == len(want)
}

// pycachePrefix is where Python keeps the bytecode of the Blenders sharing
// cacheDir.
func pycachePrefix(cacheDir string) string { return filepath.Join(cacheDir, "pycache") }
