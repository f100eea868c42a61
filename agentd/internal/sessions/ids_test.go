package sessions

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/blendplane/blendplane/agentd/internal/blender"
	"github.com/blendplane/blendplane/agentd/internal/journal"
)

// A session id names the session's directory: one that names another (the
// directory of all sessions, the agent's own) is refused, so that no close
// removes it. Before the check, Open("..") took the agent's data directory
// as the session's and Close("..") removed it, journal included.
func TestSessionIDsNameTheirOwnDirectory(t *testing.T) {
	m, j, rt := newManager(t)
	keep := []string{filepath.Join(m.cfg.DataDir, "kept"), filepath.Join(m.cfg.DataDir, "sessions", "kept")}
	for _, f := range keep {
		if err := os.MkdirAll(filepath.Dir(f), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(f, []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, id := range []string{"", ".", "..", ".hidden", "a/b", "../x", `a\b`, "a b", "é", strings.Repeat("a", 129)} {
		if _, _, err := m.Open(context.Background(), id, rt, blender.Limits{}, 0); !errors.Is(err, ErrBadSessionID) {
			t.Errorf("Open(%q): %v, want ErrBadSessionID", id, err)
		}
		if err := m.Close(id); !errors.Is(err, ErrNotFound) {
			t.Errorf("Close(%q): %v, want ErrNotFound", id, err)
		}
	}
	if _, _, err := m.Open(context.Background(), "s.1:a-b_C", rt, blender.Limits{}, 0); err != nil {
		t.Fatalf("a plain id with dots inside: %v", err)
	}
	if err := m.Close("s.1:a-b_C"); err != nil {
		t.Fatal(err)
	}

	// A journal from before the check may hold such a session: a restarted
	// agent does not serve it, so its close cannot remove a directory.
	if err := j.OpenSession("..", rt, "", journal.Limits{}, 0); err != nil {
		t.Fatal(err)
	}
	if err := restart(t, m, j).Close(".."); !errors.Is(err, ErrNotFound) {
		t.Errorf("Close(\"..\") after a restart: %v, want ErrNotFound", err)
	}
	for _, f := range keep {
		if _, err := os.Stat(f); err != nil {
			t.Errorf("removed: %v", err)
		}
	}
}

// An Open and a Close of the same session at once end in one order or the
// other, never between: a close that found the session while its open was
// still making its directory removed it under the open (which failed,
// "mkdir .../output: no such file or directory") or dropped the journal
// record the open then wrote, leaving a session the manager did not know.
func TestOpenAndCloseAtOnce(t *testing.T) {
	m, j, rt := newManager(t)
	for i := range 300 {
		id := fmt.Sprintf("s%d", i%3)
		var wg sync.WaitGroup
		wg.Go(func() {
			if _, _, err := m.Open(context.Background(), id, rt, blender.Limits{}, 0); err != nil {
				t.Errorf("open %s: %v", id, err)
			}
		})
		wg.Go(func() {
			for range 100_000 { // close as soon as the open has made the session known
				if _, err := m.session(id); err == nil {
					break
				}
				runtime.Gosched()
			}
			if err := m.Close(id); err != nil && !errors.Is(err, ErrNotFound) {
				t.Errorf("close %s: %v", id, err)
			}
		})
		wg.Wait()
		_, held := m.session(id)
		_, journaled := j.Session(id)
		if (held == nil) != (journaled == nil) {
			t.Fatalf("round %d: the manager has %s: %v; the journal: %v", i, id, held, journaled)
		}
		if _, err := os.Stat(filepath.Join(m.cfg.DataDir, "sessions", id, "output")); (err == nil) != (held == nil) {
			t.Fatalf("round %d: %s held: %v, its sandbox: %v", i, id, held, err)
		}
	}
}
