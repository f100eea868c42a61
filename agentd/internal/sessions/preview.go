package sessions

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"sync/atomic"
	"time"

	"google.golang.org/protobuf/types/known/structpb"

	"github.com/blendplane/blendplane/agentd/internal/blender"
	"github.com/blendplane/blendplane/agentd/internal/journal"
	cpv1 "github.com/blendplane/blendplane/gen/blendplane/controlplane/v1"
)

// previewTimeout bounds one preview: the fork's start, rebuild and the
// operations.
const previewTimeout = 10 * time.Minute

// previewRender is the preview image: small and quick, for a person to
// glance at before approving.
var previewRender = map[string]any{"output": "preview.png", "resolution": []any{320.0, 180.0}, "samples": 4.0}

// PreviewResult is what a plan would do to a session.
type PreviewResult struct {
	SceneHashBefore, SceneHashAfter string
	Changes                         []*cpv1.DatablockChange
	// FailedOperation and Failure: the operation that failed on the fork
	// (Changes then go up to it).
	FailedOperation string
	Failure         *cpv1.Failure
	PNG             []byte
}

var previewSeq atomic.Uint64

// Preview dry-runs ops on a throwaway fork of a session: a separate Blender
// that loads the session's checkpoint and replays its journal, as of now.
// The session itself is not touched, and may run batches meanwhile. The
// fork's Blender counts against MaxLive like a session's (slots.go): it
// takes a free slot, or parks an idle session, or waits for a slot within
// the preview's deadline and else fails (the approval then shows without a
// preview). Previews run one at a time per agent. An unsafe_ops tool
// (python.exec) is never run by a preview: the dry run stops before it
// with NOT_PREVIEWED, since its code must wait for the approval.
func (m *Manager) Preview(ctx context.Context, sessionID string, ops []Operation, render bool) (_ PreviewResult, err error) {
	s, err := m.session(sessionID)
	if err != nil {
		return PreviewResult{}, err
	}
	defer func() {
		switch { // a preview of what is gone: not a failure of its own
		case m.isClosed(s) && err != nil:
			err = fmt.Errorf("%w: %q was closed during its preview (%v)", ErrNotFound, sessionID, err)
		case m.isClosed(s):
			err = fmt.Errorf("%w: %q was closed during its preview", ErrNotFound, sessionID)
		}
	}()
	select {
	case m.previews <- struct{}{}:
		defer func() { <-m.previews }()
	case <-ctx.Done():
		return PreviewResult{}, ctx.Err()
	}
	ctx, cancel := context.WithTimeout(ctx, previewTimeout)
	defer cancel()
	start := time.Now()
	// Beside the sessions, not in the session's own directory, which a
	// close removes while the fork may still write into its own.
	dir := filepath.Join(m.previewsDir(), fmt.Sprintf("%s-%d", s.id, previewSeq.Add(1)))
	defer os.RemoveAll(dir)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return PreviewResult{}, err
	}

	// The journal as of now, and the checkpoint linked into the fork's
	// directory: a checkpoint the session takes meanwhile removes its file.
	if m.isClosed(s) {
		return PreviewResult{}, fmt.Errorf("%w: %q is closed", ErrNotFound, sessionID)
	}
	s.mu.Lock()
	js, entries, cpPath, err := m.forkState(s, dir)
	s.mu.Unlock()
	if err != nil {
		return PreviewResult{}, err
	}

	// Wait for a slot rather than refuse: the control plane asks in the
	// background and never asks again, and slots are mostly busy for a
	// batch or two. Not holding s.mu (see the lock order in slots.go): the
	// fork is of the journal as it was when asked.
	var slot bool // guarded by m.mu
	var sp *spare
	if err := m.takeSlot(ctx, &slot, "a preview of session "+s.id, s.runtime.Info.GetRuntimeId(), &sp); err != nil {
		return PreviewResult{}, err
	}
	defer m.refillWhenQuiet() // runs last: with the preview's slot free
	defer m.giveSlot(&slot)   // runs after p.Stop (deferred later): once the fork has exited
	// The fork replays the journal, whose calls read the session's files
	// (an imported model) and write some (renders): it gets copies.
	sandbox := filepath.Join(dir, "output")
	held, err := sandboxBytes(s.sandbox, "")
	if err == nil {
		err = m.checkFloor(s.sandbox, "a copy of the session's files for its preview", held)
	}
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return PreviewResult{}, err
	}
	if err := copyTree(s.sandbox, sandbox); err != nil {
		return PreviewResult{}, fmt.Errorf("copy the session's files for the preview: %w", err)
	}
	p, err := m.startBlender(ctx, s.runtime, sp, m.base.With("session_id", s.id, "preview", true), filepath.Join(dir, "work"),
		sandbox, s.limits)
	if err != nil {
		return PreviewResult{}, fmt.Errorf("start the preview's blender: %w", err)
	}
	defer p.Stop(5 * time.Second)
	hash, err := p.SceneHash(ctx)
	if err == nil {
		hash, _, err = m.rebuild(ctx, p, s.id, hash, js.Checkpoint, cpPath, entries)
	}
	if err == nil && hash != js.HeadHash {
		err = fmt.Errorf("the fork hashes to %s, the journal head says %s", hash, js.HeadHash)
	}
	if err != nil {
		return PreviewResult{}, fmt.Errorf("fork the session: %w", err)
	}
	before, err := p.Snapshot(ctx)
	if err != nil {
		return PreviewResult{}, err
	}
	res := PreviewResult{SceneHashBefore: before.SceneHash}
	unsafe := map[string]bool{}
	for _, t := range p.Tools() {
		unsafe[t.Name] = t.SafetyMode == "unsafe_ops"
	}
	for _, op := range ops {
		if notPreviewed[op.Tool] {
			continue
		}
		if unsafe[op.Tool] {
			// Code runs on this host only once a person approved it: the
			// preview stops before it.
			res.FailedOperation, res.Failure = op.OperationID, &cpv1.Failure{ErrorCode: "NOT_PREVIEWED",
				Recoverable: true, Message: fmt.Sprintf("%s runs arbitrary code, which runs only once approved; the preview stops before it", op.Tool)}
			break
		}
		out, err := p.Execute(ctx, blender.Call{Tool: op.Tool, Args: op.Args, OperationID: op.OperationID})
		if len(out.Files) > 0 {
			m.trimKept(dir, s.limits.StorageMiB<<20) // as the session's own calls
		}
		var te *blender.ToolError
		switch {
		case errors.As(err, &te):
			res.FailedOperation, res.Failure = op.OperationID, toolFailure(op, te)
		case errors.Is(err, blender.ErrMemoryExceeded):
			res.FailedOperation, res.Failure = op.OperationID, &cpv1.Failure{ErrorCode: "RESOURCE_EXHAUSTED",
				Message: "the operation took Blender over the session's memory ceiling on the preview's fork"}
		case err != nil:
			return PreviewResult{}, fmt.Errorf("operation %q on the fork: %w", op.OperationID, err)
		}
		if res.Failure != nil {
			break
		}
	}
	if res.Failure != nil && exited(p) {
		res.SceneHashAfter = "" // the fork died with the failure: no after
		m.log.Info("preview done", "session_id", s.id, "operations", len(ops), "failed", res.FailedOperation, "took", time.Since(start).Round(time.Millisecond))
		return res, nil
	}
	after, err := p.Snapshot(ctx)
	if err != nil {
		return PreviewResult{}, err
	}
	res.SceneHashAfter = after.SceneHash
	res.Changes = diffSnapshots(before.State, after.State)
	if render && res.Failure == nil {
		if _, err := p.Execute(ctx, blender.Call{Tool: "render.still", Args: previewRender}); err != nil {
			m.log.Warn("preview render failed", "session_id", s.id, "err", err)
		} else if res.PNG, err = os.ReadFile(filepath.Join(dir, "output", "preview.png")); err != nil {
			return PreviewResult{}, err
		}
	}
	m.log.Info("preview done", "session_id", s.id, "operations", len(ops), "changes", len(res.Changes),
		"failed", res.FailedOperation, "took", time.Since(start).Round(time.Millisecond))
	return res, nil
}

// notPreviewed are the tools a preview skips: renders write only files
// (the scene stays as it was, which is what a preview shows), and take
// minutes, often the very reason a policy asks for approval; before, a
// plan that waited for approval rendered in full on the fork first.
var notPreviewed = map[string]bool{"render.still": true, "render.animation": true}

func exited(p *blender.Process) bool {
	select {
	case <-p.Done():
		return true
	default:
		return false
	}
}

// forkState reads what a fork of s needs: the journal's state and entries
// after its checkpoint, with the checkpoint hard-linked (or copied) into
// dir. The caller holds s.mu, so no batch or checkpoint moves them.
func (m *Manager) forkState(s *session, dir string) (journal.Session, []journal.Entry, string, error) {
	js, err := m.journal.Session(s.id)
	if err != nil {
		return js, nil, "", err
	}
	entries, err := m.journal.Entries(s.id, js.CheckpointIndex())
	if err != nil {
		return js, nil, "", err
	}
	var cpPath string
	if js.Checkpoint != nil {
		cpPath = filepath.Join(dir, "base.blend")
		if err := os.Link(js.Checkpoint.Path, cpPath); err != nil {
			return js, nil, "", fmt.Errorf("link checkpoint: %w", err)
		}
	}
	return js, entries, cpPath, nil
}

// diffSnapshots lists the datablocks added, removed and changed between two
// scene_state_v1 snapshots, sorted by collection and name; a changed one
// names its changed fields (dotted paths into its record).
func diffSnapshots(before, after map[string]any) []*cpv1.DatablockChange {
	var out []*cpv1.DatablockChange
	names := slices.DeleteFunc(keysOf(before, after), func(k string) bool { return k == "schema" })
	for _, sec := range names {
		b, _ := before[sec].(map[string]any)
		a, _ := after[sec].(map[string]any)
		for _, name := range keysOf(b, a) {
			rb, inB := b[name]
			ra, inA := a[name]
			switch {
			case !inB:
				out = append(out, &cpv1.DatablockChange{Kind: cpv1.DatablockChange_KIND_ADDED, Collection: sec, Name: name})
			case !inA:
				out = append(out, &cpv1.DatablockChange{Kind: cpv1.DatablockChange_KIND_REMOVED, Collection: sec, Name: name})
			case !reflect.DeepEqual(rb, ra):
				c := &cpv1.DatablockChange{Kind: cpv1.DatablockChange_KIND_CHANGED, Collection: sec, Name: name}
				diffFields("", rb, ra, &c.Fields)
				out = append(out, c)
			}
		}
	}
	return out
}

// keysOf is the sorted union of the keys of b and a.
func keysOf(b, a map[string]any) []string {
	keys := make([]string, 0, len(b)+len(a))
	for k := range b {
		keys = append(keys, k)
	}
	for k := range a {
		if _, ok := b[k]; !ok {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	return keys
}

// diffFields appends the fields that differ between two record values:
// objects field by field, anything else (lists, scalars) whole.
func diffFields(path string, b, a any, out *[]*cpv1.FieldChange) {
	mb, okB := b.(map[string]any)
	ma, okA := a.(map[string]any)
	if okB && okA {
		for _, k := range keysOf(mb, ma) {
			p := k
			if path != "" {
				p = path + "." + k
			}
			diffFields(p, mb[k], ma[k], out)
		}
		return
	}
	if reflect.DeepEqual(b, a) {
		return
	}
	// Both sides always, null included (a field that became null, such as
	// the active object when none is): an unset side read as "not said".
	fc := &cpv1.FieldChange{Field: path}
	fc.Before, _ = structpb.NewValue(b)
	fc.After, _ = structpb.NewValue(a)
	*out = append(*out, fc)
}

// copyTree copies the regular files under src into dst, directories made
// as needed; links and other files are left out (a sandbox holds none that
// a call could read). A copy, not a link: the fork may write files of the
// same names. On Linux io.Copy between files is copy_file_range, which
// shares the blocks where the file system can.
func copyTree(src, dst string) error {
	return filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) && path == src {
				return nil // no files yet
			}
			return err
		}
		rel, err := filepath.Rel(src, path)
		if err != nil {
			return err
		}
		to := filepath.Join(dst, rel)
		switch {
		case d.IsDir():
			return os.MkdirAll(to, 0o755)
		case !d.Type().IsRegular():
			return nil
		}
		in, err := os.Open(path)
		if err != nil {
			return err
		}
		defer in.Close()
		out, err := os.OpenFile(to, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
		if err != nil {
			return err
		}
		if _, err := io.Copy(out, in); err != nil {
			out.Close()
			return err
		}
		return out.Close()
	})
}
