package sessions

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/blendplane/blendplane/agentd/internal/journal"
)

// ErrNoCheckpoint: the session has no checkpoint yet.
var ErrNoCheckpoint = errors.New("no checkpoint")

// ErrNotFresh: a checkpoint can only be given to a session that has run
// nothing.
var ErrNotFresh = errors.New("the session has run operations")

// OpenCheckpoint opens a session's newest checkpoint and returns it with its
// scene hash, size and SHA-256. The file stays readable even if a newer
// checkpoint replaces it meanwhile.
func (m *Manager) OpenCheckpoint(sessionID string) (*os.File, string, int64, string, error) {
	if _, err := m.session(sessionID); err != nil {
		return nil, "", 0, "", err
	}
	for range 3 {
		js, err := m.journal.Session(sessionID)
		if err != nil {
			return nil, "", 0, "", err
		}
		if js.Checkpoint == nil {
			return nil, "", 0, "", fmt.Errorf("%w: session %s", ErrNoCheckpoint, sessionID)
		}
		f, size, sum, err := openHashed(js.Checkpoint.Path)
		if errors.Is(err, ErrFileNotFound) {
			continue // replaced by a newer one between the two reads
		}
		if err != nil {
			return nil, "", 0, "", err
		}
		return f, js.Checkpoint.SceneHash, size, sum, nil
	}
	return nil, "", 0, "", fmt.Errorf("%w: session %s (its checkpoints keep changing)", ErrNoCheckpoint, sessionID)
}

// PutCheckpoint makes a checkpoint from r (size bytes hashing to sha, a
// scene hashing to sceneHash) the starting point of a session that has run
// nothing: its Blender, when it starts, loads it instead of the baseline
// scene, and checks its hash.
func (m *Manager) PutCheckpoint(sessionID, sceneHash string, size int64, sha string, r io.Reader) error {
	s, err := m.session(sessionID)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	js, err := m.journal.Session(sessionID)
	if err != nil {
		return err
	}
	if js.Head != 0 || js.Checkpoint != nil || s.proc != nil {
		return fmt.Errorf("%w: session %s", ErrNotFresh, sessionID)
	}
	if err := os.MkdirAll(s.dir, 0o755); err != nil {
		return err
	}
	path := filepath.Join(s.dir, "checkpoint-00000000.blend")
	tmp, err := receive(s.dir, ".checkpoint-", size, sha, r)
	if err != nil {
		return err
	}
	defer os.Remove(tmp)
	if err := os.Rename(tmp, path); err != nil {
		return err
	}
	if err := m.journal.StartFrom(sessionID, journal.Checkpoint{Path: path, SceneHash: sceneHash}); err != nil {
		return err
	}
	s.sceneHash = sceneHash
	m.log.Info("session starts from a checkpoint", "session_id", sessionID, "scene_hash", sceneHash, "bytes", size)
	return nil
}
