package app

import (
	"bytes"
	"context"
	"errors"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/blendplane/blendplane/controlplane/internal/auth"
	"github.com/blendplane/blendplane/controlplane/internal/store"
	cpv1 "github.com/blendplane/blendplane/gen/blendplane/controlplane/v1"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// TestReserve: calls at once cannot each take the same room under a
// principal's quota; room given back, or recorded, counts once.
func TestReserve(t *testing.T) {
	a := newTestApp(t)
	a.cfg.ArtifactQuotaMiB = 1
	openSession(t, a, "s", "alice", "")
	if _, err := a.store.PutArtifact(&cpv1.Artifact{SessionId: "s", Name: "a", Sha256: "1", SizeBytes: 512 << 10}); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var took atomic.Int32
	for range 8 {
		wg.Go(func() {
			if ok, err := a.reserve("alice", 300<<10); err != nil {
				t.Error(err)
			} else if ok {
				took.Add(1)
			}
		})
	}
	wg.Wait()
	if took.Load() != 1 {
		t.Fatalf("%d of 8 reservations of 300 KiB fit in 512 KiB of room", took.Load())
	}
	if left, _ := a.quotaLeft("alice"); left != 212<<10 {
		t.Fatalf("left %d, want %d", left, 212<<10)
	}
	// Recorded, then given back: counted once.
	if _, err := a.store.PutArtifact(&cpv1.Artifact{SessionId: "s", Name: "b", Sha256: "2", SizeBytes: 300 << 10}); err != nil {
		t.Fatal(err)
	}
	a.unreserve("alice", 300<<10)
	if left, _ := a.quotaLeft("alice"); left != 212<<10 {
		t.Fatalf("after the record: left %d, want %d", left, 212<<10)
	}
	if ok, _ := a.reserve("alice", 213<<10); ok {
		t.Fatal("a reservation over the room fit")
	}
	if ok, _ := a.reserve("bob", 1<<20); !ok {
		t.Fatal("another principal's room was taken")
	}
	// A distributed render's room, handed to its receipt's collection, is
	// given back once.
	a.unreserve("bob", 1<<20)
	if ok, _ := a.reserve("alice", 100<<10); !ok {
		t.Fatal("100 KiB of 212 did not fit")
	}
	ref := store.PlanRef{Owner: "alice", RequestID: "r"}
	a.handOver(receiptKey(ref, "op"), "alice", 100<<10)
	if left, _ := a.quotaLeft("alice"); left != 112<<10 {
		t.Fatalf("handed over: left %d, want %d", left, 112<<10)
	}
	a.takeBack(receiptKey(ref, "op"))
	a.takeBack(receiptKey(ref, "op"))
	if left, _ := a.quotaLeft("alice"); left != 212<<10 {
		t.Fatalf("taken back: left %d, want %d", left, 212<<10)
	}
}

// TestCollectWithoutItsAgent: a receipt's files are recorded when its
// agent cannot be reached: what the control plane holds (a distributed
// render's frames) is kept, the rest is marked left on the agent, in the
// record and in the receipt.
func TestCollectWithoutItsAgent(t *testing.T) {
	a := newTestApp(t)
	a.cfg.ArtifactQuotaMiB = 1 // the room a file not fetched took is given back
	blobs := withBlobs(t, a)
	openSession(t, a, "s", "alice", "")
	held, _, err := blobs.CopyFrom(bytes.NewReader([]byte("frame")), 1<<10)
	if err != nil {
		t.Fatal(err)
	}
	r := &cpv1.Receipt{OperationId: "op", Sequence: 1, Artifacts: []*cpv1.Artifact{
		{Name: "f_0001.png", Sha256: held, SizeBytes: 5}, {Name: "gone.png", Sha256: "00aa", SizeBytes: 5}}}
	err = a.collect(context.Background(), nil, store.PlanRef{Owner: "alice", RequestID: "r"}, "s", r)
	if !errors.Is(err, ErrAgentUnavailable) {
		t.Fatalf("collect without an agent: %v", err)
	}
	for name, left := range map[string]bool{"f_0001.png": false, "gone.png": true} {
		if art, err := a.store.Artifact("s", name, ""); err != nil || art.GetLeftOnAgent() != left {
			t.Errorf("%s: recorded %v (%v), want left on the agent: %v", name, art, err, left)
		}
		if i := slices.IndexFunc(r.GetArtifacts(), func(f *cpv1.Artifact) bool { return f.GetName() == name }); r.GetArtifacts()[i].GetLeftOnAgent() != left {
			t.Errorf("%s in the receipt: left on the agent %v, want %v", name, !left, left)
		}
	}
	if len(a.quotas.reserved) != 0 {
		t.Errorf("room still reserved after the collect: %v", a.quotas.reserved)
	}
}

// TestUploadToAClosedMovedSession: an upload into a session that moved
// and closed before its rebuild says SESSION_CLOSED; it rebuilt the closed
// session on its new agent (here: tried, and said AGENT_UNAVAILABLE).
func TestUploadToAClosedMovedSession(t *testing.T) {
	a := newTestApp(t)
	err := a.store.PutSession(store.Session{Owner: "alice", Info: &cpv1.Session{SessionId: "s", State: cpv1.Session_STATE_OPEN, AgentId: "a1", Epoch: 1,
		Contract: &cpv1.SessionContract{SessionId: "s", ToolRegistryRef: &cpv1.ToolRegistryRef{Fingerprint: "f"}}}},
		&cpv1.ToolRegistry{Fingerprint: "f"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.store.MoveSession("s", "a2", "rt"); err != nil {
		t.Fatal(err)
	}
	if _, err := a.store.CloseSession("s", time.Now()); err != nil {
		t.Fatal(err)
	}
	if _, err := a.uploadTarget(context.Background(), "s"); !errors.Is(err, store.ErrSessionClosed) {
		t.Fatalf("an upload into a closed session that moved: %v", err)
	}
}

// TestDownloadWhileItsAgentIsDown: a file the control plane did not keep,
// asked for while its session's agent does not answer, is
// AGENT_UNAVAILABLE (worth a retry), not ARTIFACT_UNAVAILABLE (gone), both
// when it would be kept and when it would be relayed (over the quota).
func TestDownloadWhileItsAgentIsDown(t *testing.T) {
	a := newTestApp(t)
	withBlobs(t, a)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	down := lis.Addr().String()
	lis.Close() // nothing answers there
	registerAgent(t, a, "a1", down)
	openSession(t, a, "s", "alice", "a1")
	if _, err := a.store.PutArtifact(&cpv1.Artifact{SessionId: "s", Name: "k.png", Sha256: strings.Repeat("ab", 32), SizeBytes: 5 << 20}); err != nil {
		t.Fatal(err)
	}
	alice := Principal{Name: "alice", Scopes: []string{auth.ScopePlans}}
	for _, quota := range []int64{0, 1} { // kept at a download; relayed (5 MiB over 1)
		a.cfg.ArtifactQuotaMiB = quota
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err := a.Download(ctx, alice, "s", "k.png", "", func(*cpv1.DownloadArtifactResponse) error { return nil })
		cancel()
		if !errors.Is(err, ErrAgentUnavailable) {
			t.Errorf("quota %d MiB: %v, want AGENT_UNAVAILABLE", quota, err)
		}
	}
}

// TestOverQuotaSays: the refusal counts what uploads under way are taking
// (the quota is checked with it), and says to close sessions only where
// that frees room (with --artifact-retention).
func TestOverQuotaSays(t *testing.T) {
	a := newTestApp(t)
	a.cfg.ArtifactQuotaMiB = 30
	if ok, err := a.reserve("alice", 18<<20); !ok || err != nil {
		t.Fatal(ok, err)
	}
	for retention, want := range map[time.Duration][]string{
		0:         {"18.0 MiB more that uploads and fetches under way are taking", "9437184 bytes (9.0 MiB) more would pass its quota of 30 MiB", "ask an admin"},
		time.Hour: {"close sessions you are done with (their artifacts are forgotten 1h0m0s after)"},
	} {
		a.cfg.ArtifactRetention = retention
		msg := a.overQuota("alice", 9<<20).Error()
		for _, w := range want {
			if !strings.Contains(msg, w) {
				t.Errorf("retention %v: %q does not say %q", retention, msg, w)
			}
		}
		if retention == 0 && strings.Contains(msg, "close sessions") {
			t.Errorf("without a retention: %q", msg)
		}
	}
	// Sizes in the unit that shows them, not "(0.0 MiB)".
	if msg := a.overQuota("bob", 38100).Error(); !strings.Contains(msg, `"bob" keeps 0 bytes of artifacts; 38100 bytes (37.2 KiB) more`) {
		t.Errorf("a small file: %q", msg)
	}
}

// TestSandboxContent: what a rebuild gives a session's new sandbox is each
// name at the version its old one held: the one that landed last (an
// upload that landed after an export of its name, recorded before it);
// never a distributed render's frame, which no sandbox held, whoever ran
// its plan (an admin's plan in alice's session), nor a preview's render;
// an export whose request id an admin used for a distributed render too;
// nothing for a name whose newest version the control plane does not hold
// (not an older one). A fork gets the uploads only.
func TestSandboxContent(t *testing.T) {
	a := newTestApp(t)
	blobs := withBlobs(t, a)
	held := func(content string) string {
		t.Helper()
		sum, _, err := blobs.CopyFrom(strings.NewReader(content), 1<<10)
		if err != nil {
			t.Fatal(err)
		}
		return sum
	}
	for _, p := range []struct{ owner, rid, tool string }{
		{"alice", "exp", "scene.export"}, {"alice", "anim", "render.animation"}, {"root", "fan", "render.animation"}, {"alice", "shot", "render.still"},
		{"alice", "dup", "scene.export"}, {"root", "dup", "render.animation"},
	} {
		args, _ := structpb.NewStruct(map[string]any{"distribute": p.tool == "render.animation" && p.owner == "root"})
		if _, err := a.store.CreatePlan(store.NewPlan{Owner: p.owner, Digest: "d", Schedule: []int{0},
			Plan:    &cpv1.Plan{RequestId: p.rid, SessionId: "s", Owner: p.owner, State: cpv1.Plan_STATE_PENDING},
			Request: &cpv1.SubmitPlanRequest{SessionId: "s", RequestId: p.rid, Operations: []*cpv1.Operation{{OperationId: "o", ToolName: p.tool, Args: args}}}}); err != nil {
			t.Fatal(err)
		}
	}
	version := func(name, sum, rid string, at int64) *cpv1.Artifact {
		a := &cpv1.Artifact{SessionId: "s", Name: name, Sha256: sum, RequestId: rid, CreateTime: &timestamppb.Timestamp{Seconds: at}}
		if rid != "" {
			a.OperationId = "o"
		}
		return a
	}
	upload := version("m.obj", held("# the upload"), "", 20)
	frame := version("clash_0001.png", held("rendered in the sandbox"), "anim", 5)
	dup := version("dup.obj", held("# an export"), "dup", 5)
	preview := version("preview-a.png", held("a preview's render"), "exp", 50)
	preview.OperationId = ""
	files := sessionFiles{byName: map[string][]*cpv1.Artifact{
		"m.obj":          {upload, version("m.obj", held("# the export"), "exp", 10)},
		"clash_0001.png": {frame, version("clash_0001.png", held("rendered on a fork"), "fan", 30)},
		"fan_0001.png":   {version("fan_0001.png", held("on a fork only"), "fan", 30)},
		"big.png":        {version("big.png", held("an older render"), "shot", 5), version("big.png", "left-on-the-agent", "shot", 40)},
		"dup.obj":        {dup},
		"preview-a.png":  {preview},
	}, uploads: []string{"m.obj"}}
	f := &replayFiles{app: a, sessionID: "s", target: "s", onAgent: map[string]string{}}
	names := func(whole bool) []string {
		t.Helper()
		arts, err := f.sandboxContent(files, whole)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, art := range arts {
			out = append(out, art.GetName()+"@"+art.GetSha256()[:8])
		}
		slices.Sort(out)
		return out
	}
	want := []string{"clash_0001.png@" + frame.GetSha256()[:8], "dup.obj@" + dup.GetSha256()[:8], "m.obj@" + upload.GetSha256()[:8]}
	if got := names(true); !slices.Equal(got, want) {
		t.Fatalf("the new sandbox: %v, want %v", got, want)
	}
	if got := names(false); !slices.Equal(got, want[2:]) {
		t.Fatalf("a fork: %v, want %v", got, want[2:])
	}
}

// TestPreviewRenderUnderQuota: a preview's render counts under its session
// owner's artifact quota like any artifact: kept while it fits, refused
// (and not recorded) once the owner is over it. It was kept whatever the
// owner held (found by exploratory QA).
func TestPreviewRenderUnderQuota(t *testing.T) {
	a := newTestApp(t)
	a.cfg.ArtifactQuotaMiB = 1
	withBlobs(t, a)
	openSession(t, a, "s", "alice", "")
	png := bytes.Repeat([]byte{0x89}, 600<<10)
	if art, err := a.storeBytes("s", "r1", "preview-a.png", png); err != nil || art.GetRequestId() != "r1" || art.GetOperationId() != "" {
		t.Fatalf("a preview's render within the quota: %v %v", art, err)
	}
	if art, err := a.storeBytes("s", "r2", "preview-b.png", png[1:]); !errors.Is(err, ErrQuotaExceeded) || art != nil {
		t.Fatalf("a preview's render over the quota: %v %v", art, err)
	}
	if arts, _, err := a.store.ListArtifacts("s", "", 0, 10); err != nil || len(arts) != 1 {
		t.Fatalf("the session's artifacts: %v %v", arts, err)
	}
}
