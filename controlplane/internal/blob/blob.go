// Package blob keeps artifact content on the control plane's disk,
// content-addressed: a file's name is its SHA-256, so equal content is
// stored once and a stored file can be checked against its name.
//
// Layout under the directory given to Open:
//
//	sha256/<first two hex digits>/<64 hex digits>   the content
//	tmp/                                            writes in progress
//
// A write goes to tmp/, is fsynced, and is renamed into place only when its
// whole content and hash are known, so a crash never leaves a partial blob
// under a hash name; tmp/ is emptied at Open.
package blob

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/blendplane/blendplane/internal/diskfree"
)

// ErrTooLarge: the content is over the writer's limit.
var ErrTooLarge = errors.New("content too large")

// ErrNotFound: no blob with that hash.
var ErrNotFound = errors.New("blob not found")

// ErrDiskShort: a write would leave the disk less free than the store
// keeps (Open's keepFree).
var ErrDiskShort = errors.New("the control plane's disk is short")

// Store is a directory of blobs.
type Store struct {
	dir      string
	keepFree int64
	// mu orders a blob's use (found by Has, or written by Commit) against
	// RemoveIdle: a blob found or written is not removed under its user.
	mu sync.Mutex
}

// Open opens (creating if needed) a blob directory whose writes leave at
// least keepFree bytes of its disk free (0: no floor), for what else the
// control plane keeps there: its database above all.
func Open(dir string, keepFree int64) (*Store, error) {
	tmp := filepath.Join(dir, "tmp")
	if err := os.RemoveAll(tmp); err != nil {
		return nil, fmt.Errorf("blob: %w", err)
	}
	for _, d := range []string{tmp, filepath.Join(dir, "sha256")} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, fmt.Errorf("blob: %w", err)
		}
	}
	return &Store{dir: dir, keepFree: keepFree}, nil
}

// room is ErrDiskShort unless n more bytes leave the floor free.
func (s *Store) room(n int64) error {
	if s.keepFree <= 0 {
		return nil
	}
	free, err := diskfree.Bytes(s.dir)
	if err != nil {
		return fmt.Errorf("blob: %w", err)
	}
	if free -= n; free < s.keepFree {
		return fmt.Errorf("%w: %d more bytes would leave %.1f MiB free, under the %d MiB it keeps (--min-free-disk-mib)",
			ErrDiskShort, n, float64(free)/(1<<20), s.keepFree>>20)
	}
	return nil
}

// ValidHash reports whether s is a lower-case hex SHA-256.
func ValidHash(s string) bool {
	if len(s) != 64 {
		return false
	}
	_, err := hex.DecodeString(s)
	return err == nil && s == hexLower(s)
}

func hexLower(s string) string {
	b := []byte(s)
	for i, c := range b {
		if c >= 'A' && c <= 'F' {
			b[i] = c + 'a' - 'A'
		}
	}
	return string(b)
}

func (s *Store) path(sum string) string {
	return filepath.Join(s.dir, "sha256", sum[:2], sum)
}

// Has reports whether the blob is stored, and marks it used now: the
// caller is about to name it (RemoveIdle leaves it).
func (s *Store) Has(sum string) bool {
	if !ValidHash(sum) {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.touch(s.path(sum)) == nil
}

// touch marks a blob used now; it fails only when the blob is not there
// (a file system that keeps no times still has the blob).
func (s *Store) touch(path string) error {
	now := time.Now()
	err := os.Chtimes(path, now, now)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		_, err = os.Stat(path)
	}
	return err
}

// RemoveIdle removes a blob unless it was written or found (Has) within
// idle, or unwanted says it is wanted again (asked under the lock that
// Has and Commit take); removed is true when the blob is gone (or was
// never there).
func (s *Store) RemoveIdle(sum string, idle time.Duration, unwanted func() (bool, error)) (removed bool, err error) {
	if !ValidHash(sum) {
		return true, nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	fi, err := os.Stat(s.path(sum))
	switch {
	case errors.Is(err, os.ErrNotExist):
		return true, nil
	case err != nil:
		return false, err
	case time.Since(fi.ModTime()) < idle:
		return false, nil
	}
	if ok, err := unwanted(); !ok || err != nil {
		return false, err
	}
	if err := os.Remove(s.path(sum)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return false, err
	}
	return true, nil
}

// Open opens a stored blob for reading.
func (s *Store) Open(sum string) (*os.File, error) {
	if !ValidHash(sum) {
		return nil, fmt.Errorf("%w: %q is not a sha256", ErrNotFound, sum)
	}
	f, err := os.Open(s.path(sum))
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("%w: %s", ErrNotFound, sum)
	}
	return f, err
}

// Remove deletes a stored blob (absent: nothing to do).
func (s *Store) Remove(sum string) error {
	if !ValidHash(sum) {
		return nil
	}
	err := os.Remove(s.path(sum))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	return err
}

// Writer receives one blob's content.
type Writer struct {
	s     *Store
	f     *os.File
	h     hash.Hash
	size  int64
	limit int64
	done  bool
}

// Create starts a blob of at most limit bytes. It and each Write are
// ErrDiskShort when the disk has no room left above the store's floor.
func (s *Store) Create(limit int64) (*Writer, error) {
	if err := s.room(0); err != nil {
		return nil, err
	}
	f, err := os.CreateTemp(filepath.Join(s.dir, "tmp"), "blob-")
	if err != nil {
		return nil, fmt.Errorf("blob: %w", err)
	}
	return &Writer{s: s, f: f, h: sha256.New(), limit: limit}, nil
}

// Write appends content; past the limit it fails with ErrTooLarge.
func (w *Writer) Write(p []byte) (int, error) {
	if w.size+int64(len(p)) > w.limit {
		return 0, fmt.Errorf("%w: more than %d bytes", ErrTooLarge, w.limit)
	}
	if err := w.s.room(int64(len(p))); err != nil {
		return 0, err
	}
	n, err := w.f.Write(p)
	w.h.Write(p[:n])
	w.size += int64(n)
	return n, err
}

// Size is how many bytes were written so far.
func (w *Writer) Size() int64 { return w.size }

// Sum is the SHA-256 (hex) of what was written so far.
func (w *Writer) Sum() string { return hex.EncodeToString(w.h.Sum(nil)) }

// Content opens what was written so far for reading: a write's content
// can be handed on before it is kept (and is never kept if that fails).
func (w *Writer) Content() (*os.File, error) {
	f, err := os.Open(w.f.Name())
	if err != nil {
		return nil, fmt.Errorf("blob: %w", err)
	}
	return f, nil
}

// Commit makes the content durable under its hash and returns the hash.
func (w *Writer) Commit() (string, error) {
	defer w.Abort()
	sum := w.Sum()
	if err := w.f.Sync(); err != nil {
		return "", fmt.Errorf("blob: %w", err)
	}
	if err := w.f.Close(); err != nil {
		return "", fmt.Errorf("blob: %w", err)
	}
	dst := w.s.path(sum)
	if err := os.MkdirAll(filepath.Dir(dst), 0o700); err != nil {
		return "", fmt.Errorf("blob: %w", err)
	}
	w.s.mu.Lock()
	err := os.Rename(w.f.Name(), dst)
	if err == nil {
		err = w.s.touch(dst) // written now, whenever its bytes were: RemoveIdle leaves it
	}
	w.s.mu.Unlock()
	if err != nil {
		return "", fmt.Errorf("blob: %w", err)
	}
	w.done = true
	if d, err := os.Open(filepath.Dir(dst)); err == nil {
		d.Sync()
		d.Close()
	}
	return sum, nil
}

// Abort drops an uncommitted write; it is safe after Commit.
func (w *Writer) Abort() {
	if w.done {
		return
	}
	w.done = true
	w.f.Close()
	os.Remove(w.f.Name())
}

// CopyFrom writes r's whole content (at most limit bytes) as a blob and
// returns its hash and size.
func (s *Store) CopyFrom(r io.Reader, limit int64) (sum string, size int64, err error) {
	w, err := s.Create(limit)
	if err != nil {
		return "", 0, err
	}
	defer w.Abort()
	if _, err := io.Copy(w, r); err != nil {
		return "", 0, err
	}
	sum, err = w.Commit()
	return sum, w.Size(), err
}
