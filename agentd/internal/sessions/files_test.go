package sessions

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/blendplane/blendplane/agentd/internal/blender"
	cpv1 "github.com/blendplane/blendplane/gen/blendplane/controlplane/v1"
)

// TestSessionStorageCeiling: a session's files take at most its disk
// ceiling (blender.Limits.StorageMiB), which the journal keeps: an upload
// over it is refused before a byte lands and leaves nothing, one that
// replaces a file counts once, an operation whose files would go over it
// fails QUOTA_EXCEEDED with a hint and leaves none, and a restarted agent
// holds the session to the same ceiling.
func TestSessionStorageCeiling(t *testing.T) {
	m, j, rt := newManager(t)
	if _, _, err := m.Open(context.Background(), "s1", rt, blender.Limits{StorageMiB: 1}, 0); err != nil {
		t.Fatal(err)
	}
	big := bytes.Repeat([]byte("x"), 1<<20-100)
	putFile(t, m, "s1", "big.bin", big)
	putFile(t, m, "s1", "big.bin", big) // replaces itself
	small := bytes.Repeat([]byte("y"), 200)
	refused := func(m *Manager) {
		t.Helper()
		_, err := m.PutFile("s1", "small.bin", int64(len(small)), sha(small), bytes.NewReader(small))
		if !errors.Is(err, ErrQuotaExceeded) || errors.Is(err, ErrDiskFloor) || !strings.Contains(err.Error(), "temp_storage_mib of 1 MiB") {
			t.Fatalf("an upload over the ceiling: %v, want ErrQuotaExceeded naming it", err)
		}
	}
	refused(m)

	rs := run(t, m, "s1", "r1", Operation{OperationID: "exp", MCPCallID: "c", Tool: "scene.export",
		Args: map[string]any{"format": "obj", "output": "scene.obj"}, Safety: cpv1.SafetyLevel_SAFETY_LEVEL_SAFE_WRITE, IdempotencyKey: "key-exp"})
	if len(rs) != 1 || rs[0].GetStatus() != cpv1.Receipt_STATUS_FAILED || rs[0].GetError().GetErrorCode() != "QUOTA_EXCEEDED" ||
		!strings.Contains(rs[0].GetError().GetRetryHint(), "temp_storage_mib") || !rs[0].GetError().GetRecoverable() {
		t.Fatalf("an export over the ceiling: %v", rs)
	}

	m = restart(t, m, j)
	refused(m)
	entries, err := os.ReadDir(filepath.Join(m.cfg.DataDir, "sessions", "s1", "output"))
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 || entries[0].Name() != "big.bin" {
		t.Errorf("the sandbox holds %v, want big.bin alone", entries)
	}
	leftovers, _ := filepath.Glob(filepath.Join(m.cfg.DataDir, "sessions", "s1", ".upload-*"))
	if len(leftovers) != 0 {
		t.Errorf("a refused upload left %v", leftovers)
	}
	if err := os.Remove(filepath.Join(m.cfg.DataDir, "sessions", "s1", "output", "big.bin")); err != nil {
		t.Fatal(err)
	}
	putFile(t, m, "s1", "small.bin", small) // room again
}

// TestDiskFloor: an upload that would leave the agent's disk less free
// than it keeps for its journal (Config.MinFreeDiskMiB; here more than any
// disk has) is refused and leaves nothing, in a session without a ceiling.
func TestDiskFloor(t *testing.T) {
	m, _, rt := newManagerWith(t, func(c *Config) { c.MinFreeDiskMiB = 1 << 40 })
	open(t, m, rt, "s1")
	content := []byte("v 0 0 0\n")
	_, err := m.PutFile("s1", "a.obj", int64(len(content)), sha(content), bytes.NewReader(content))
	if !errors.Is(err, ErrDiskFloor) || !strings.Contains(err.Error(), "keeps for its journal") {
		t.Fatalf("an upload under the disk floor: %v, want ErrDiskFloor saying why", err)
	}
	if entries, _ := os.ReadDir(filepath.Join(m.cfg.DataDir, "sessions", "s1", "output")); len(entries) != 0 {
		t.Errorf("the refused upload left %v", entries)
	}
	// A preview copies the session's files: not under the floor either.
	if _, err := m.Preview(context.Background(), "s1", []Operation{create("p", "Ball")}, false); !errors.Is(err, ErrQuotaExceeded) {
		t.Fatalf("a preview under the disk floor: %v, want ErrQuotaExceeded", err)
	}
}

// TestImportSurvivesAReplacedUpload: a session that imported a file, whose
// upload was then replaced under the same name (a fixed model uploaded
// again), recovers after its Blender dies: the import is checkpointed with
// the batch that ran it, under the lock that keeps uploads out, so no
// recovery replays it from a file that changed since. Replayed, it read
// the new file, the scene hashed otherwise and the session was broken.
func TestImportSurvivesAReplacedUpload(t *testing.T) {
	m, _, rt := newManager(t)
	open(t, m, rt, "s1")
	putFile(t, m, "s1", "model.obj", []byte("v 0 0 0\nv 1 0 0\nv 0 1 0\nf 1 2 3\n"))
	imp := Operation{OperationID: "imp", MCPCallID: "c", Tool: "scene.import", Args: map[string]any{"format": "obj", "input": "model.obj"},
		Safety: cpv1.SafetyLevel_SAFETY_LEVEL_SAFE_WRITE, IdempotencyKey: "key-imp"}
	if rs := run(t, m, "s1", "r1", imp); rs[0].GetStatus() != cpv1.Receipt_STATUS_SUCCEEDED {
		t.Fatalf("import: %v", rs)
	}
	putFile(t, m, "s1", "model.obj", []byte("v 0 0 0\nv 2 0 0\nv 0 2 0\nv 0 0 2\nf 1 2 3\nf 1 2 4\n"))
	if err := syscall.Kill(blenderPid(m, "s1"), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	rs := run(t, m, "s1", "r2", create("after", "Ball"))
	if len(rs) != 1 || rs[0].GetStatus() != cpv1.Receipt_STATUS_SUCCEEDED {
		t.Fatalf("the session after its Blender died: %v", rs)
	}
}

// TestUploadAboveTheFloor: an upload that fits above the disk floor is
// taken: its bytes are counted against the floor once, before they are
// written, not again when the file lands (which refused any upload larger
// than half the room above the floor). The disk is one of the test's own,
// 1 GiB less what the agent's files take, so that what else writes to the
// real one meanwhile does not count.
func TestUploadAboveTheFloor(t *testing.T) {
	m, _, rt := newManagerWith(t, func(c *Config) { c.MinFreeDiskMiB = 1<<10 - 96 })
	real := freeDisk
	t.Cleanup(func() { freeDisk = real })
	freeDisk = func(string) (int64, error) {
		var used int64
		err := filepath.WalkDir(m.cfg.DataDir, func(_ string, d fs.DirEntry, err error) error {
			if err == nil && d.Type().IsRegular() {
				if fi, ierr := d.Info(); ierr == nil {
					used += fi.Size()
				}
			}
			return nil
		})
		return 1<<30 - used, err
	}
	open(t, m, rt, "s1")
	room, err := freeDisk("")
	if err != nil {
		t.Fatal(err)
	}
	size := room - (1<<10-96)<<20 - 32<<20 // 32 MiB short of the room above the floor
	h := sha256.New()
	io.Copy(h, io.LimitReader(zeros{}, size))
	if _, err := m.PutFile("s1", "big.bin", size, hex.EncodeToString(h.Sum(nil)), io.LimitReader(zeros{}, size)); err != nil {
		t.Fatal(err)
	}
	if _, err := m.PutFile("s1", "more.bin", 64<<20, "", io.LimitReader(zeros{}, 64<<20)); !errors.Is(err, ErrQuotaExceeded) {
		t.Fatalf("an upload past the floor: %v", err)
	}
}

// zeros reads as an endless run of zero bytes.
type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

// TestPutBackWhatADeadCallSetAside: a file an export set aside while it
// rewrote it (bridge Tx.set_aside), left there by a Blender that died mid
// call over its half-written output, is back in the sandbox before the
// session's next Blender starts; unless an upload of its name came after
// the death, which is newer and stays.
func TestPutBackWhatADeadCallSetAside(t *testing.T) {
	m, _, rt := newManager(t)
	open(t, m, rt, "s1")
	export := Operation{OperationID: "exp", MCPCallID: "c", Tool: "scene.export", Args: map[string]any{"format": "obj", "output": "scene.obj"},
		Safety: cpv1.SafetyLevel_SAFETY_LEVEL_SAFE_WRITE, IdempotencyKey: "key-exp"}
	if rs := run(t, m, "s1", "r1", create("a", "Box"), export); rs[1].GetStatus() != cpv1.Receipt_STATUS_SUCCEEDED {
		t.Fatalf("export: %v", rs)
	}
	dir := filepath.Join(m.cfg.DataDir, "sessions", "s1")
	exported, err := os.ReadFile(filepath.Join(dir, "output", "scene.obj"))
	if err != nil {
		t.Fatal(err)
	}
	uploaded := []byte("# uploaded after the death\n")
	for _, upload := range []bool{false, true} {
		// What a Blender killed mid-export leaves: the old file aside, a
		// half-written one under its name.
		if err := os.MkdirAll(filepath.Join(dir, "aside"), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "aside", "scene.obj"), exported, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "output", "scene.obj"), []byte("# half"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := syscall.Kill(blenderPid(m, "s1"), syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		want := exported
		if upload {
			putFile(t, m, "s1", "scene.obj", uploaded)
			want = uploaded
		}
		if rs := run(t, m, "s1", fmt.Sprint("after-", upload), create(fmt.Sprint("b", upload), fmt.Sprint("Ball", upload))); rs[0].GetStatus() != cpv1.Receipt_STATUS_SUCCEEDED {
			t.Fatalf("the session after its Blender died: %v", rs)
		}
		if got, err := os.ReadFile(filepath.Join(dir, "output", "scene.obj")); err != nil || !bytes.Equal(got, want) {
			t.Errorf("scene.obj after the recovery (upload %v): %q, %v; want %q", upload, got, err, want)
		}
		if left, _ := os.ReadDir(filepath.Join(dir, "aside")); len(left) != 0 {
			t.Errorf("still aside: %v", left)
		}
	}
}

// TestCloseDuringAPreview: a session closed while a preview of it runs is
// closed (its directory removed) and the preview ends NotFound: the
// preview's fork lives beside the sessions, not in the session's
// directory, where the fork's Blender kept writing while the close removed
// it ("directory not empty", found by TestRandomRequests' fixed seed).
func TestCloseDuringAPreview(t *testing.T) {
	m, _, rt := newManager(t)
	open(t, m, rt, "s1")
	run(t, m, "s1", "r1", create("a", "Box"))
	done := make(chan error, 1)
	go func() {
		_, err := m.Preview(context.Background(), "s1", []Operation{create("p", "Ball")}, false)
		done <- err
	}()
	s, _ := m.session("s1")
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(20 * time.Millisecond) {
		if forks, _ := filepath.Glob(filepath.Join(m.previewsDir(), "s1-*")); len(forks) > 0 {
			break
		}
		if inside, _ := filepath.Glob(filepath.Join(s.dir, "preview-*")); len(inside) > 0 {
			t.Fatalf("the preview's fork is in the session's directory: %v", inside)
		}
		if time.Now().After(deadline) {
			t.Fatal("the preview did not start")
		}
	}
	if err := m.Close("s1"); err != nil {
		t.Fatalf("close during a preview: %v", err)
	}
	if err := <-done; !errors.Is(err, ErrNotFound) {
		t.Fatalf("the preview of a session closed under it: %v, want ErrNotFound", err)
	}
	if _, err := os.Stat(s.dir); !os.IsNotExist(err) {
		t.Errorf("the closed session's directory: %v", err)
	}
	if forks, _ := os.ReadDir(m.previewsDir()); len(forks) != 0 {
		t.Errorf("forks left: %v", forks)
	}
}

// TestWritesFilesFromTheBridge: the tools whose batches hold uploads off
// are the ones the bridge registers as writing files (it refuses a file of
// any other: TestBridgeTransactions).
func TestWritesFilesFromTheBridge(t *testing.T) {
	m, _, _ := newManager(t)
	for id, rt := range m.runtimes {
		if got := slices.Sorted(maps.Keys(rt.writes)); !slices.Equal(got, []string{"render.animation", "render.still", "scene.export"}) {
			t.Errorf("%s: the tools that write files: %v", id, got)
		}
	}
}

// TestLandReturnsWhatWasSetAside: an upload whose rename into the sandbox
// fails leaves what a call that died had set aside under its name where it
// was, for putBack.
func TestLandReturnsWhatWasSetAside(t *testing.T) {
	m, _, rt := newManager(t)
	open(t, m, rt, "s1")
	s, err := m.session("s1")
	if err != nil {
		t.Fatal(err)
	}
	aside := filepath.Join(s.dir, asideDir, "scene.obj")
	tmp := filepath.Join(s.dir, ".upload-test")
	target := filepath.Join(s.dir, "blocked") // a directory with a file in it: no file renames over it
	for _, f := range []string{aside, tmp, filepath.Join(target, "x")} {
		if err := os.MkdirAll(filepath.Dir(f), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(f, []byte(f), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := m.land(s, "scene.obj", tmp, target); err == nil {
		t.Fatal("a rename over a directory worked")
	}
	if got, err := os.ReadFile(aside); err != nil || string(got) != aside {
		t.Fatalf("set aside after the failed upload: %q, %v", got, err)
	}
}

// TestKeptWithinTheCeiling: the versions of a file that later calls of a
// plan or uploads replaced are kept up to the session's disk ceiling, the
// oldest dropped first, the plan's own name kept (a plan resumed after a
// restart keeps them).
func TestKeptWithinTheCeiling(t *testing.T) {
	m, j, rt := newManager(t)
	if _, _, err := m.Open(context.Background(), "s1", rt, blender.Limits{StorageMiB: 1}, 0); err != nil {
		t.Fatal(err)
	}
	op := func(id, tool string, args map[string]any) Operation {
		return Operation{OperationID: id, MCPCallID: "c", Tool: tool, Args: args, Safety: cpv1.SafetyLevel_SAFETY_LEVEL_DESTRUCTIVE, IdempotencyKey: "key-" + id}
	}
	// A sphere whose OBJ takes some 40 % of the ceiling, exported five
	// times from five places.
	ops := []Operation{op("ball", "python.exec", map[string]any{"code": "import bpy, bmesh\n" +
		"me = bpy.data.meshes.new('Ball')\nbm = bmesh.new()\nbmesh.ops.create_uvsphere(bm, u_segments=96, v_segments=48, radius=1)\nbm.to_mesh(me)\nbm.free()\n" +
		"bpy.context.scene.collection.objects.link(bpy.data.objects.new('Ball', me))"})}
	for i := range 5 {
		ops = append(ops, op(fmt.Sprint("move", i), "object.set_transform", map[string]any{"name": "Ball", "location": []any{float64(i), 0, 0}}),
			op(fmt.Sprint("export", i), "scene.export", map[string]any{"format": "obj", "output": "x.obj"}))
	}
	var versions []*cpv1.Artifact
	for _, r := range run(t, m, "s1", "r1", ops...) {
		for _, a := range r.GetArtifacts() {
			if a.GetName() == "x.obj" {
				versions = append(versions, a)
			}
		}
	}
	if len(versions) != 5 || versions[0].GetSizeBytes() < 350<<10 || versions[0].GetSizeBytes() > 500<<10 {
		t.Fatalf("exports: %v", versions)
	}
	kept := func(m *Manager, want ...bool) {
		t.Helper()
		for i, a := range versions {
			f, _, got, err := m.OpenFile("s1", "x.obj", a.GetSha256())
			if err != nil {
				t.Fatal(err)
			}
			f.Close()
			if (got == a.GetSha256()) != want[i] {
				t.Errorf("version %d served: %v, want %v", i+1, got == a.GetSha256(), want[i])
			}
		}
	}
	// Two replaced versions fit the ceiling, not three: the oldest went.
	kept(m, false, false, true, true, true)
	m = restart(t, m, j)
	run(t, m, "s1", "r1", ops...) // resumed: all journaled
	kept(m, false, false, true, true, true)
	// An upload replaces the last version too: one more goes.
	putFile(t, m, "s1", "x.obj", []byte("# uploaded\n"))
	kept(m, false, false, false, true, true)
}

// TestSettleAnUploadCutShort: agentd stopped while an upload landed over
// what a call that died had set aside under its name. At its next start,
// if the upload's file was not renamed in yet, the set-aside file is back
// in the sandbox before the session's Blender starts, over the dead call's
// half-written one, and the upload's file goes (its caller had no answer);
// if it was, the upload stays and the set-aside file goes.
func TestSettleAnUploadCutShort(t *testing.T) {
	m, j, rt := newManager(t)
	open(t, m, rt, "s1")
	dir := filepath.Join(m.cfg.DataDir, "sessions", "s1")
	old, uploaded := []byte("# the file before the call that died\n"), []byte("# the upload\n")
	for path, content := range map[string][]byte{
		// Cut short before its rename: its file is still there.
		filepath.Join(dir, landingDir, uploadPrefix+"1", "scene.obj"): old,
		filepath.Join(dir, "output", "scene.obj"):                     []byte("# half"),
		filepath.Join(dir, uploadPrefix+"1"):                          uploaded,
		// Landed, the set-aside copy not dropped yet.
		filepath.Join(dir, landingDir, uploadPrefix+"2", "up.obj"): old,
		filepath.Join(dir, "output", "up.obj"):                     uploaded,
	} {
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, content, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	m = restart(t, m, j)
	run(t, m, "s1", "r1", create("a", "Box"))
	for name, want := range map[string][]byte{"scene.obj": old, "up.obj": uploaded} {
		if got, err := os.ReadFile(filepath.Join(dir, "output", name)); err != nil || !bytes.Equal(got, want) {
			t.Errorf("%s after the restart: %q, %v; want %q", name, got, err, want)
		}
	}
	for _, gone := range []string{uploadPrefix + "1", landingDir, asideDir} {
		if entries, err := os.ReadDir(filepath.Join(dir, gone)); !os.IsNotExist(err) && (err != nil || len(entries) > 0) {
			t.Errorf("%s after the restart: %v %v", gone, entries, err)
		}
	}
}

// TestKeptOfAnotherPlanGoes: links in the kept directory that no plan's
// name claims (its plan's calls failed after their files were linked, or
// agentd stopped before it could name the plan) go when a plan starts,
// before and after a restart.
func TestKeptOfAnotherPlanGoes(t *testing.T) {
	m, j, rt := newManager(t)
	open(t, m, rt, "s1")
	kept := filepath.Join(m.cfg.DataDir, "sessions", "s1", keptDir)
	for i, again := range []bool{false, true} {
		stray := filepath.Join(kept, strings.Repeat("ab", 32))
		if err := os.MkdirAll(kept, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(stray, []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
		if again {
			m = restart(t, m, j)
		}
		run(t, m, "s1", fmt.Sprint("r", i), create(fmt.Sprint("a", i), fmt.Sprint("Box", i)))
		if _, err := os.Stat(stray); !os.IsNotExist(err) {
			t.Errorf("a stray link after a plan (restart: %v): %v", again, err)
		}
	}
}

// TestFilesOfALaterCallKept: a receipt names the version of a file its
// call wrote, and that version is served by its hash after a later call of
// the plan replaced it, as long as the plan is the session's last (a
// restart in between keeps it: the plan may resume); the session's next
// plan lets it go.
func TestFilesOfALaterCallKept(t *testing.T) {
	m, j, rt := newManager(t)
	open(t, m, rt, "s1")
	export := func(id string) Operation {
		return Operation{OperationID: id, MCPCallID: "c", Tool: "scene.export", Args: map[string]any{"format": "obj", "output": "out.obj"},
			Safety: cpv1.SafetyLevel_SAFETY_LEVEL_SAFE_WRITE, IdempotencyKey: "key-" + id}
	}
	rs := run(t, m, "s1", "r1", export("first"), create("ball", "Ball"), export("second"))
	version := func(r *cpv1.Receipt) *cpv1.Artifact {
		t.Helper()
		for _, a := range r.GetArtifacts() {
			if a.GetName() == "out.obj" {
				return a
			}
		}
		t.Fatalf("%s names no out.obj: %v", r.GetOperationId(), r)
		return nil
	}
	first, second := version(rs[0]), version(rs[2])
	if first.GetSha256() == second.GetSha256() {
		t.Fatalf("both exports wrote %s", first.GetSha256())
	}
	serves := func(m *Manager, want string) string {
		t.Helper()
		f, size, got, err := m.OpenFile("s1", "out.obj", want)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		b, err := io.ReadAll(f)
		if err != nil || int64(len(b)) != size || got != sha(b) {
			t.Fatalf("served %d bytes with sha256 %s, read %d: %v", size, got, len(b), err)
		}
		return got
	}
	for _, a := range []*cpv1.Artifact{first, second} {
		if got := serves(m, a.GetSha256()); got != a.GetSha256() {
			t.Errorf("%s asked for, %s served", a.GetSha256(), got)
		}
	}
	if got := serves(m, ""); got != second.GetSha256() {
		t.Errorf("the sandbox's out.obj is %s, want the second export's", got)
	}

	m = restart(t, m, j)
	run(t, m, "s1", "r1", export("first"), create("ball", "Ball"), export("second")) // resumed: all journaled
	if got := serves(m, first.GetSha256()); got != first.GetSha256() {
		t.Errorf("after a restart and the plan resumed: %s served for the first export", got)
	}
	run(t, m, "s1", "r2", create("box", "Box"))
	if got := serves(m, first.GetSha256()); got != second.GetSha256() {
		t.Errorf("after the next plan: %s served for the first export's version, want the sandbox's", got)
	}
	if entries, err := os.ReadDir(filepath.Join(m.cfg.DataDir, "sessions", "s1", keptDir)); !os.IsNotExist(err) || len(entries) > 0 {
		t.Errorf("kept after the next plan: %v %v", entries, err)
	}
}

// TestPartialRendersOfADeadBlender: a render killed with its Blender (a
// cancelled plan's) leaves its temporary files in the sandbox; they are
// gone once the session's next Blender starts, and nothing else is.
func TestPartialRendersOfADeadBlender(t *testing.T) {
	m, _, rt := newManager(t)
	open(t, m, rt, "s1")
	putFile(t, m, "s1", "keep.png", []byte("kept"))
	if rs := run(t, m, "s1", "r1", create("box", "Box")); rs[0].GetStatus() != cpv1.Receipt_STATUS_SUCCEEDED {
		t.Fatalf("create: %v", rs)
	}
	s, err := m.session("s1")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"fr_0001.png.partial.png", "fr_0002.png.partial.png"} {
		if err := os.WriteFile(filepath.Join(s.sandbox, name), []byte("half a frame"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := syscall.Kill(blenderPid(m, "s1"), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if rs := run(t, m, "s1", "r2", create("after", "Ball")); len(rs) != 1 || rs[0].GetStatus() != cpv1.Receipt_STATUS_SUCCEEDED {
		t.Fatalf("the session after its Blender died: %v", rs)
	}
	entries, err := os.ReadDir(s.sandbox)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if fmt.Sprint(names) != "[keep.png]" {
		t.Fatalf("the sandbox after the recovery: %v", names)
	}
}
