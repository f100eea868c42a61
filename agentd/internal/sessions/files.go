package sessions

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/blendplane/blendplane/agentd/internal/blender"
	cpv1 "github.com/blendplane/blendplane/gen/blendplane/controlplane/v1"
	"github.com/blendplane/blendplane/internal/diskfree"
	"github.com/blendplane/blendplane/internal/filename"
)

var (
	// ErrBadFileName: not a plain file name of the sandbox.
	ErrBadFileName = errors.New("not a plain file name")
	// ErrFileConflict: the name is taken by something that is not a file.
	ErrFileConflict = errors.New("not a regular file")
	// ErrFileNotFound: no such file in the sandbox.
	ErrFileNotFound = errors.New("file not found")
	// ErrFileMismatch: the content differs from the declared size or hash.
	ErrFileMismatch = errors.New("file content mismatch")
	// ErrQuotaExceeded: the file would take the session's files over its
	// disk ceiling (blender.Limits.StorageMiB), or leave less disk free
	// than agentd keeps (Config.MinFreeDiskMiB).
	ErrQuotaExceeded = errors.New("no room for the session's files")
	// ErrDiskFloor: ErrQuotaExceeded for the agent's free disk, not the
	// session's ceiling.
	ErrDiskFloor = fmt.Errorf("%w on the agent's disk", ErrQuotaExceeded)
)

// checkFileName applies the plain-name rules (filename.Problem; the
// bridge's bridge/sandbox.py, is_plain_name): a name, not a path.
func checkFileName(name string) error {
	if why := filename.Problem(name); why != "" {
		return fmt.Errorf("%w: %q: %s", ErrBadFileName, name, why)
	}
	return nil
}

// PutFile writes a file into a session's sandbox from r, which must hold
// exactly size bytes hashing to sha (hex SHA-256). The file appears whole
// or not at all (a temporary file, fsynced, renamed over the name); a
// symlink at the name is replaced, never followed. A parked session takes
// files without starting its Blender. A session closed meanwhile is
// ErrNotFound. landed is when the file took the name, by this host's
// clock: after the calls that wrote the name before it returned, before
// those that write it after it start (session.files), so that the control
// plane orders the session's versions of a name as the sandbox had them.
func (m *Manager) PutFile(sessionID, name string, size int64, sha string, r io.Reader) (landed time.Time, err error) {
	s, err := m.session(sessionID)
	if err != nil {
		return time.Time{}, err
	}
	defer func() {
		if err != nil && m.isClosed(s) { // its files went with it
			err = fmt.Errorf("%w: %q was closed during the upload (%v)", ErrNotFound, sessionID, err)
		}
	}()
	if err := checkFileName(name); err != nil {
		return time.Time{}, err
	}
	if err := os.MkdirAll(s.sandbox, 0o755); err != nil { // a session being opened may not have it yet
		return time.Time{}, err
	}
	if err := m.checkRoom(s, name, size, size); err != nil { // before a byte lands on the disk
		return time.Time{}, err
	}
	tmp, err := receive(s.dir, uploadPrefix, size, sha, r)
	if err != nil {
		return time.Time{}, err
	}
	defer os.Remove(tmp)
	target := filepath.Join(s.sandbox, name)
	if fi, err := os.Lstat(target); err == nil && fi.IsDir() {
		return time.Time{}, fmt.Errorf("%w: %q is a directory in the sandbox", ErrFileConflict, name)
	}
	s.files.Lock()                      // not under a running call's feet (session.files), nor another upload's
	err = m.checkRoom(s, name, size, 0) // again, written: others may have landed meanwhile
	if err == nil {
		err = m.land(s, name, tmp, target)
		landed = time.Now()
	}
	s.files.Unlock()
	if err != nil {
		return time.Time{}, err
	}
	m.trimKept(s.dir, s.limits.StorageMiB<<20) // the file replaced may be a version kept
	if d, err := os.Open(s.sandbox); err == nil {
		d.Sync()
		d.Close()
	}
	m.log.Info("file received", "session_id", sessionID, "name", name, "bytes", size, "sha256", sha)
	return landed, nil
}

// gone waits for a Blender killed under a call (cancelled, abandoned) to
// have exited, before uploads may land: a system call it was in completes
// even so, and a rename of its output could replace an upload landing
// meanwhile. A Blender that can take calls is not waited for.
func gone(p *blender.Process) {
	if p == nil || p.Usable() {
		return
	}
	select {
	case <-p.Done():
	case <-time.After(10 * time.Second): // Process.Stop's bound for a SIGKILL
	}
}

// land renames an upload's file tmp to target, its name in the sandbox.
// What a call that died with its Blender set aside under the name is older
// than the upload: putBack must not restore it over it. It is moved out of
// putBack's sight first, into landingDir (a putBack running now, in a
// batch's recovery, either puts it back before the rename or finds it
// gone), dropped once the upload is in, and returned if the rename fails
// (or agentd stops in between: settle).
func (m *Manager) land(s *session, name, tmp, target string) error {
	aside, old := filepath.Join(s.dir, asideDir, name), filepath.Join(s.dir, landingDir, filepath.Base(tmp), name)
	if _, err := os.Lstat(aside); errors.Is(err, fs.ErrNotExist) {
		return os.Rename(tmp, target)
	}
	if err := os.MkdirAll(filepath.Dir(old), 0o700); err != nil {
		return err
	}
	err := os.Rename(aside, old)
	if errors.Is(err, fs.ErrNotExist) { // put back meanwhile
		return os.Rename(tmp, target)
	}
	if err != nil {
		return err
	}
	if err := os.Rename(tmp, target); err != nil {
		if rerr := os.Rename(old, aside); rerr != nil {
			m.log.Error("a file set aside by a call that died is lost", "session_id", s.id, "name", name, "err", rerr)
		}
		return err
	}
	if err := os.RemoveAll(filepath.Dir(old)); err != nil { // else settle finds tmp gone: landed
		m.log.Warn("dropping a file set aside by a call that died", "session_id", s.id, "name", name, "err", err)
	}
	return nil
}

// asideDir, beside a session's sandbox, holds the files a call set aside
// while it rewrites them (bridge/registry.py, Tx.set_aside; sandbox.py,
// ASIDE): the call puts them back if it fails, drops them if it succeeds.
// landingDir holds those of a call that died while an upload of their name
// lands (land).
const (
	asideDir   = "aside"
	landingDir = "landing"
)

// settle tidies what uploads cut short by agentd's last stop left in a
// session's directory. What a call that died had set aside under an
// upload's name (landing/<upload's file>/<name>) goes back to asideDir, for
// putBack to restore before the session's next Blender starts, if the
// upload's file is still there (it never landed: the state before it);
// else the upload landed, and it goes. Then the received files go: their
// callers had no answer and send them again.
func (m *Manager) settle(s *session) {
	landing := filepath.Join(s.dir, landingDir)
	uploads, _ := os.ReadDir(landing)
	for _, u := range uploads {
		names, _ := os.ReadDir(filepath.Join(landing, u.Name()))
		for _, n := range names {
			if _, err := os.Lstat(filepath.Join(s.dir, u.Name())); err != nil {
				continue // landed
			}
			err := os.MkdirAll(filepath.Join(s.dir, asideDir), 0o700)
			if err == nil {
				err = os.Rename(filepath.Join(landing, u.Name(), n.Name()), filepath.Join(s.dir, asideDir, n.Name()))
			}
			if err != nil {
				m.log.Error("returning what a call that died had set aside, under an upload cut short", "session_id", s.id, "name", n.Name(), "err", err)
			}
		}
	}
	if err := os.RemoveAll(landing); err != nil {
		m.log.Warn("removing what uploads cut short left", "session_id", s.id, "err", err)
	}
	entries, _ := os.ReadDir(s.dir)
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), uploadPrefix) {
			if err := os.Remove(filepath.Join(s.dir, e.Name())); err != nil {
				m.log.Warn("removing a file of an upload cut short", "session_id", s.id, "file", e.Name(), "err", err)
			}
		}
	}
}

// putBack returns to the sandbox the files a call that died with its
// Blender had set aside (over what it left half-written under their
// names), before the session's next Blender starts.
func (m *Manager) putBack(s *session) error {
	dir := filepath.Join(s.dir, asideDir)
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	for _, e := range entries {
		err := os.Rename(filepath.Join(dir, e.Name()), filepath.Join(s.sandbox, e.Name()))
		if errors.Is(err, fs.ErrNotExist) {
			continue // an upload of its name replaced it meanwhile (PutFile)
		}
		if err != nil {
			return fmt.Errorf("put back %s, which a call that died had set aside: %w", e.Name(), err)
		}
		m.log.Info("a file that a call which died had set aside is back", "session_id", s.id, "name", e.Name())
	}
	return nil
}

// partialSuffix ends the temporary file a render writes before it renames
// it to its name (bridge/tools/render.py, partial_path).
const partialSuffix = ".partial.png"

// dropPartials removes from the sandbox the temporary renders of a call
// that died with its Blender (killed when its plan was cancelled, or on a
// crash): the call removes them itself when it fails, but not when it is
// killed. They were left in the sandbox, counted in its disk ceiling.
func (m *Manager) dropPartials(s *session) error {
	entries, err := os.ReadDir(s.sandbox)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if name := e.Name(); strings.HasSuffix(name, partialSuffix) && e.Type().IsRegular() {
			if err := os.Remove(filepath.Join(s.sandbox, name)); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return err
			}
			m.log.Info("a render that died with its Blender left its temporary file: removed", "session_id", s.id, "name", name)
		}
	}
	return nil
}

// checkRoom is ErrQuotaExceeded unless a file of size bytes under name (in
// place of the one there) keeps the session's files within its disk
// ceiling, and its bytes not on the disk yet (unwritten) leave the disk
// agentd keeps free (Config.MinFreeDiskMiB).
// The files are counted as the bridge counts them after a tool
// (bridge/sandbox.py, usage and check_storage): the sizes of the regular
// files directly in the sandbox.
func (m *Manager) checkRoom(s *session, name string, size, unwritten int64) error {
	if err := m.checkFloor(s.sandbox, name, unwritten); err != nil {
		return err
	}
	limit := s.limits.StorageMiB << 20
	if limit <= 0 {
		return nil
	}
	used, err := sandboxBytes(s.sandbox, name)
	if err != nil {
		return err
	}
	if used += size; used > limit {
		return fmt.Errorf("%w: %s (%d bytes) would take the session's files to %d bytes (%.1f MiB), over its temp_storage_mib of %d MiB",
			ErrQuotaExceeded, name, size, used, float64(used)/(1<<20), s.limits.StorageMiB)
	}
	return nil
}

// checkFloor is ErrDiskFloor unless size more bytes in dir leave the
// disk agentd keeps free (Config.MinFreeDiskMiB); what names them.
func (m *Manager) checkFloor(dir, what string, size int64) error {
	floor := m.cfg.MinFreeDiskMiB << 20
	if floor <= 0 {
		return nil
	}
	free, err := freeDisk(dir)
	if err != nil {
		return err
	}
	if free -= size; free < floor {
		return fmt.Errorf("%w: %s (%d bytes) would leave the agent's disk %.1f MiB free, under the %d MiB it keeps for its journal",
			ErrDiskFloor, what, size, float64(free)/(1<<20), m.cfg.MinFreeDiskMiB)
	}
	return nil
}

// freeDisk is the disk free to agentd under dir, in bytes; a variable for
// the tests, whose disk others write to meanwhile.
var freeDisk = diskfree.Bytes

// sandboxBytes is what the regular files directly in dir take (their
// sizes), but the one named except.
func sandboxBytes(dir, except string) (int64, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return 0, err
	}
	var n int64
	for _, e := range entries {
		if e.Name() == except || !e.Type().IsRegular() {
			continue
		}
		if fi, err := e.Info(); err == nil { // a file removed meanwhile takes nothing
			n += fi.Size()
		}
	}
	return n, nil
}

// uploadPrefix starts the names of uploads' files in a session's directory
// while they are received.
const uploadPrefix = ".upload-"

// receive writes r, which must hold exactly size bytes hashing to sha (hex
// SHA-256), to a new fsynced temporary file in dir and returns its path;
// the caller renames it into place (and removes it if it does not).
func receive(dir, prefix string, size int64, sha string, r io.Reader) (string, error) {
	tmp, err := os.CreateTemp(dir, prefix)
	if err != nil {
		return "", err
	}
	defer tmp.Close()
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(tmp, h), io.LimitReader(r, size+1))
	if err == nil {
		if got := hex.EncodeToString(h.Sum(nil)); n != size || got != sha {
			err = fmt.Errorf("%w: received %d bytes with sha256 %s, want %d bytes with %s", ErrFileMismatch, n, got, size, sha)
		}
	}
	if err == nil {
		err = tmp.Sync()
	}
	if err != nil {
		os.Remove(tmp.Name())
		return "", err
	}
	return tmp.Name(), nil
}

// OpenFile opens a regular file of a session's sandbox (never through a
// symlink) and returns it with its size and SHA-256: the version with hex
// SHA-256 sha if a call wrote it during the session's plan (keptDir), else
// the sandbox's.
func (m *Manager) OpenFile(sessionID, name, sha string) (*os.File, int64, string, error) {
	s, err := m.session(sessionID)
	if err != nil {
		return nil, 0, "", err
	}
	if err := checkFileName(name); err != nil {
		return nil, 0, "", err
	}
	if isSHA256(sha) {
		// By content, whatever its name: a version the session's calls
		// wrote under one name is the same under another.
		f, size, sum, err := openHashed(filepath.Join(s.dir, keptDir, sha))
		if err == nil && sum == sha {
			return f, size, sum, nil
		}
		if err == nil {
			f.Close() // rewritten in place (python.exec): not that version
		}
	}
	return openHashed(filepath.Join(s.sandbox, name))
}

// openHashed opens a regular file without following a symlink, hashes it
// and returns it rewound.
func openHashed(path string) (*os.File, int64, string, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return nil, 0, "", fmt.Errorf("%w: %s", ErrFileNotFound, filepath.Base(path))
	case errors.Is(err, syscall.ELOOP):
		return nil, 0, "", fmt.Errorf("%w: %s is a symlink", ErrFileConflict, filepath.Base(path))
	case err != nil:
		return nil, 0, "", err
	}
	fi, err := f.Stat()
	if err == nil && !fi.Mode().IsRegular() {
		err = fmt.Errorf("%w: %s", ErrFileConflict, filepath.Base(path))
	}
	h := sha256.New()
	var n int64
	if err == nil {
		n, err = io.Copy(h, f)
	}
	if err == nil {
		_, err = f.Seek(0, io.SeekStart)
	}
	if err != nil {
		f.Close()
		return nil, 0, "", err
	}
	return f, n, hex.EncodeToString(h.Sum(nil)), nil
}

// artifacts describes the files a call wrote for its receipt, as the
// bridge read them when the call ended (a later call or an upload may have
// replaced them since; the version is kept, see keptDir). A file described
// wrongly is left out and logged.
func (m *Manager) artifacts(s *session, files []blender.File, log *slog.Logger) []*cpv1.Artifact {
	var out []*cpv1.Artifact
	for _, f := range files {
		if checkFileName(f.Name) != nil || !isSHA256(f.SHA256) || f.Size < 0 {
			log.Warn("the bridge reported a file it cannot have written", "name", f.Name, "sha256", f.SHA256, "size", f.Size)
			continue
		}
		out = append(out, &cpv1.Artifact{SessionId: s.id, Name: f.Name, SizeBytes: f.Size, Sha256: f.SHA256})
	}
	if len(files) > 0 {
		if !s.keptMarked { // the plan's first files: say whose they are
			dir := filepath.Join(s.dir, keptDir)
			err := os.MkdirAll(dir, 0o700)
			if err == nil {
				err = os.WriteFile(filepath.Join(dir, keptFor), []byte(s.keptFor), 0o600)
			}
			if err != nil {
				log.Warn("marking the files kept for the plan", "err", err)
			}
			s.keptMarked = err == nil
		}
		m.trimKept(s.dir, s.limits.StorageMiB<<20)
	}
	return out
}

// keptDir, beside a session's sandbox, holds a link to each file a
// successful call wrote, named by its SHA-256 (bridge/sandbox.py, keep):
// the control plane takes a receipt's files after the receipt reaches it,
// and a later call of the batch or an upload may have replaced the name by
// then. Versions the sandbox no longer holds take at most the session's
// ceiling (trimKept), and the directory is emptied when the session's next
// plan starts: the control plane takes a plan's files before it commits the
// plan's receipts, and so before it sends another plan.
const keptDir = "kept"

// keptFor is the file in keptDir naming the plan whose files it holds.
const keptFor = ".request"

// keepFor empties keptDir unless it holds the files of requestID's plan
// (resumed after a restart, its files maybe not all taken yet).
func (m *Manager) keepFor(s *session, requestID string) {
	dir := filepath.Join(s.dir, keptDir)
	if !s.keptKnown {
		b, _ := os.ReadFile(filepath.Join(dir, keptFor))
		s.keptFor, s.keptMarked, s.keptKnown = string(b), len(b) > 0, true
	}
	if s.keptFor == requestID {
		return
	}
	if err := os.RemoveAll(dir); err != nil {
		m.log.Warn("emptying the files kept for the session's last plan", "session_id", s.id, "err", err)
	}
	s.keptFor, s.keptMarked = requestID, false
}

// trimKept drops the oldest versions in keptDir under a session's
// directory that the sandbox no longer holds (one link left) while they
// take more than limit bytes (0: none). It runs once a call's or an
// upload's file is in place; the bridge may be moving a link meanwhile
// (the same bytes written again), so each is checked once more before it
// goes.
func (m *Manager) trimKept(dir string, limit int64) {
	if limit <= 0 {
		return
	}
	kept := filepath.Join(dir, keptDir)
	entries, _ := os.ReadDir(kept)
	type version struct {
		name  string
		mtime int64
		size  int64
		ino   uint64
	}
	// replaced is the file at name when the sandbox no longer holds it.
	replaced := func(name string) (os.FileInfo, uint64, bool) {
		fi, err := os.Lstat(filepath.Join(kept, name))
		if err != nil || !fi.Mode().IsRegular() {
			return nil, 0, false
		}
		if st, ok := fi.Sys().(*syscall.Stat_t); ok && st.Nlink == 1 {
			return fi, st.Ino, true
		}
		return nil, 0, false
	}
	var only []version
	var total int64
	for _, e := range entries {
		if !isSHA256(e.Name()) { // the plan's name, a link being moved
			continue
		}
		if fi, ino, ok := replaced(e.Name()); ok {
			only = append(only, version{e.Name(), fi.ModTime().UnixNano(), fi.Size(), ino})
			total += fi.Size()
		}
	}
	slices.SortFunc(only, func(a, b version) int {
		return cmp.Or(cmp.Compare(a.mtime, b.mtime), strings.Compare(a.name, b.name))
	})
	for _, v := range only {
		if total <= limit {
			return
		}
		total -= v.size
		if _, ino, ok := replaced(v.name); !ok || ino != v.ino {
			continue // moved to a file the sandbox holds, or gone: another trim took it
		}
		if err := os.Remove(filepath.Join(kept, v.name)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			m.log.Warn("trimming the files kept for the control plane", "dir", dir, "err", err)
			return
		}
	}
}

// isSHA256 tells a hex SHA-256 as hashes are written here (lower case).
func isSHA256(s string) bool {
	if len(s) != sha256.Size*2 {
		return false
	}
	for _, c := range s {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}
