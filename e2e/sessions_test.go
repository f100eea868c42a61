package e2e

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	cpv1 "github.com/blendplane/blendplane/gen/blendplane/controlplane/v1"
)

func (c *cluster) session(t testing.TB, id string) *cpv1.Session {
	t.Helper()
	resp, err := c.client.GetSession(ctxT(t, 10*time.Second), &cpv1.GetSessionRequest{SessionId: id})
	if err != nil {
		t.Fatalf("get session %s: %v", id, err)
	}
	return resp.GetSession()
}

// waitState waits until a session is in state want.
func (c *cluster) waitState(t testing.TB, id string, want cpv1.Session_State) *cpv1.Session {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		s := c.session(t, id)
		if s.GetState() == want {
			return s
		}
		if time.Now().After(deadline) {
			t.Fatalf("session %s stayed %v, want %v", id, s.GetState(), want)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// wantRefusal checks an error's code and ErrorInfo reason.
func wantRefusal(t testing.TB, what string, err error, code codes.Code, reason string) {
	t.Helper()
	st := status.Convert(err)
	info, _ := details(st)
	if st.Code() != code || info.GetReason() != reason {
		t.Fatalf("%s: %v (reason %q), want %v %s", what, err, info.GetReason(), code, reason)
	}
}

// TestSessionParkRestoreClose: a session starts no Blender until its first
// plan, is parked when idle (checkpointed, Blender stopped), comes back on
// the same scene hash, and once closed refuses plans, has no files left on
// its agent and keeps its plans, receipts and audit.
func TestSessionParkRestoreClose(t *testing.T) {
	c := startClusterOpts(t, clusterOpts{cpArgs: []string{"--session-idle-timeout", "2s"}})
	s := c.negotiate(t)
	id := s.GetSessionId()
	dir := filepath.Join(c.dir, "agent", "sessions", id)
	if pids := sessionBlender(t, dir); len(pids) != 0 {
		t.Fatalf("Negotiate started Blender %v", pids)
	}
	if st := c.session(t, id).GetState(); st != cpv1.Session_STATE_PARKED {
		t.Fatalf("a new session is %v, want PARKED (no Blender yet)", st)
	}
	p, rs := c.run(t, id, "park-1", op("a", "object.create", map[string]any{"type": "cube", "name": "Keep"}))
	if p.GetState() != cpv1.Plan_STATE_SUCCEEDED {
		t.Fatalf("plan %v", p)
	}
	if pids := sessionBlender(t, dir); len(pids) != 1 {
		t.Fatalf("Blender processes of the session after its plan: %v", pids)
	}
	parked := c.waitState(t, id, cpv1.Session_STATE_PARKED)
	if pids := sessionBlender(t, dir); len(pids) != 0 {
		t.Fatalf("a parked session still runs Blender %v", pids)
	}
	if checkpoints, _ := filepath.Glob(filepath.Join(dir, "checkpoint-*.blend")); len(checkpoints) != 1 {
		t.Fatalf("checkpoints of the parked session: %v", checkpoints)
	}
	if parked.GetSceneHash() != rs[0].GetSceneHashAfter() || parked.GetPlanCount() != 1 {
		t.Fatalf("parked session %v, last receipt %v", parked, rs[0])
	}

	// The next plan restores it transparently, on the same scene.
	_, rs2 := c.run(t, id, "park-2", op("again", "object.create", map[string]any{"type": "cube", "name": "Keep"}))
	if rs2[0].GetSceneHashBefore() != rs[0].GetSceneHashAfter() || rs2[0].GetError().GetErrorCode() != "CONFLICT" {
		t.Fatalf("after the restore: %v (want a CONFLICT on the scene %s)", rs2[0], rs[0].GetSceneHashAfter())
	}

	resp, err := c.client.CloseSession(ctxT(t, time.Minute), &cpv1.CloseSessionRequest{SessionId: id})
	if err != nil {
		t.Fatal(err)
	}
	if closed := resp.GetSession(); closed.GetState() != cpv1.Session_STATE_CLOSED || closed.GetCloseTime() == nil {
		t.Fatalf("closed session %v", closed)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("the session's files are left on the agent: %v", err)
	}
	if pids := sessionBlender(t, dir); len(pids) != 0 {
		t.Fatalf("a closed session runs Blender %v", pids)
	}
	_, err = c.client.SubmitPlan(ctxT(t, time.Minute), &cpv1.SubmitPlanRequest{SessionId: id, RequestId: "park-3",
		Operations: []*cpv1.Operation{op("a", "scene.get_summary", map[string]any{})}})
	wantRefusal(t, "plan in a closed session", err, codes.FailedPrecondition, "SESSION_CLOSED")
	if again, err := c.client.CloseSession(ctxT(t, time.Minute), &cpv1.CloseSessionRequest{SessionId: id}); err != nil ||
		again.GetSession().GetCloseTime().AsTime() != resp.GetSession().GetCloseTime().AsTime() {
		t.Fatalf("closing again: %v %v", again, err)
	}
	// Its plans, receipts and audit stay.
	if got := c.receipts(t, "park-1", 1); len(got) != 1 || got[0].GetSceneHashAfter() != rs[0].GetSceneHashAfter() {
		t.Fatalf("receipts of a closed session's plan: %v", got)
	}
	audit, err := c.client.ListAuditRecords(ctxT(t, 10*time.Second), &cpv1.ListAuditRecordsRequest{RequestId: "park-1"})
	if err != nil || len(audit.GetAuditRecords()) != 1 {
		t.Fatalf("audit of a closed session's plan: %v %v", audit, err)
	}
	// Closed sessions are listed only when asked for.
	list := func(state cpv1.Session_State) []string {
		resp, err := c.client.ListSessions(ctxT(t, 10*time.Second), &cpv1.ListSessionsRequest{State: state})
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, s := range resp.GetSessions() {
			ids = append(ids, s.GetSessionId())
		}
		return ids
	}
	if ids := list(cpv1.Session_STATE_UNSPECIFIED); len(ids) != 0 {
		t.Fatalf("sessions listed by default: %v", ids)
	}
	if ids := list(cpv1.Session_STATE_CLOSED); fmt.Sprint(ids) != fmt.Sprint([]string{id}) {
		t.Fatalf("closed sessions: %v", ids)
	}
}

// TestFloodUnderMaxSessions: fifty clients negotiating and running a plan
// at once against an agent with --max-sessions 3 never make it run more than
// three Blenders, and lose no plan: each succeeds, or its negotiation is
// refused with RESOURCE_EXHAUSTED.
func TestFloodUnderMaxSessions(t *testing.T) {
	c := startClusterWith(t, []string{"--max-sessions", "3"}, nil)
	agentDir := filepath.Join(c.dir, "agent")
	stop := make(chan struct{})
	most := make(chan int)
	go func() {
		peak := 0
		for {
			select {
			case <-stop:
				most <- peak
				return
			case <-time.After(20 * time.Millisecond):
				peak = max(peak, len(blenderPIDs(t, agentDir)))
			}
		}
	}()
	var mu sync.Mutex
	ran, refused := 0, 0
	var wg sync.WaitGroup
	for i := 0; i < 50; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := c.client.Negotiate(ctxT(t, 2*time.Minute), &cpv1.NegotiateRequest{
				ContractVersion: "1.0.0", HostProfile: &cpv1.HostProfile{ClientName: "flood"}})
			if status.Code(err) == codes.ResourceExhausted {
				if info, _ := details(status.Convert(err)); info.GetReason() != "CAPACITY_EXHAUSTED" {
					t.Errorf("refusal %v", err)
				}
				mu.Lock()
				refused++
				mu.Unlock()
				return
			}
			if err != nil {
				t.Errorf("negotiate %d: %v", i, err)
				return
			}
			rid := fmt.Sprintf("flood-%d", i)
			if _, err := c.client.SubmitPlan(ctxT(t, time.Minute), &cpv1.SubmitPlanRequest{SessionId: resp.GetContract().GetSessionId(),
				RequestId: rid, Operations: []*cpv1.Operation{op("a", "object.create", map[string]any{"type": "cube"})}}); err != nil {
				t.Errorf("submit %s: %v", rid, err)
				return
			}
			rs := c.receipts(t, rid, 1)
			if p := c.plan(t, rid); p.GetState() != cpv1.Plan_STATE_SUCCEEDED || len(rs) != 1 {
				t.Errorf("plan %s ended %v with %d receipts: %v", rid, p.GetState(), len(rs), p.GetFailure())
				return
			}
			mu.Lock()
			ran++
			mu.Unlock()
		}()
	}
	wg.Wait()
	close(stop)
	peak := <-most
	t.Logf("%d plans ran, %d negotiations refused, at most %d Blenders at once", ran, refused, peak)
	if peak > 3 {
		t.Fatalf("%d Blenders at once under --max-sessions 3", peak)
	}
	if ran+refused != 50 || ran < 3 {
		t.Fatalf("%d ran and %d were refused, of 50", ran, refused)
	}
}

// upload sends a file to a session in chunks of chunk bytes.
func (c *cluster) upload(t testing.TB, header *cpv1.ArtifactUpload, content []byte, chunk int) (*cpv1.Artifact, error) {
	t.Helper()
	stream, err := c.client.UploadArtifact(ctxT(t, time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&cpv1.UploadArtifactRequest{Part: &cpv1.UploadArtifactRequest_Header{Header: header}}); err != nil {
		_, err = stream.CloseAndRecv()
		return nil, err
	}
	for len(content) > 0 {
		n := min(chunk, len(content))
		if err := stream.Send(&cpv1.UploadArtifactRequest{Part: &cpv1.UploadArtifactRequest_Chunk{Chunk: content[:n]}}); err != nil {
			_, err = stream.CloseAndRecv()
			return nil, err
		}
		content = content[n:]
	}
	resp, err := stream.CloseAndRecv()
	return resp.GetArtifact(), err
}

// download fetches an artifact and checks that its content hashes as its
// header says.
func (c *cluster) download(t testing.TB, req *cpv1.DownloadArtifactRequest) (*cpv1.Artifact, []byte, error) {
	t.Helper()
	return downloadAs(t, c.client, req)
}

// downloadAs is cluster.download by another client.
func downloadAs(t testing.TB, client cpv1.ControlPlaneServiceClient, req *cpv1.DownloadArtifactRequest) (*cpv1.Artifact, []byte, error) {
	t.Helper()
	stream, err := client.DownloadArtifact(ctxT(t, time.Minute), req)
	if err != nil {
		t.Fatal(err)
	}
	var a *cpv1.Artifact
	var content bytes.Buffer
	for {
		resp, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, nil, err
		}
		if h := resp.GetArtifact(); h != nil {
			a = h
		}
		content.Write(resp.GetChunk())
	}
	if hexSHA(content.Bytes()) != a.GetSha256() || int64(content.Len()) != a.GetSizeBytes() {
		t.Fatalf("downloaded %d bytes hashing to %s; the header says %d bytes, %s", content.Len(), hexSHA(content.Bytes()), a.GetSizeBytes(), a.GetSha256())
	}
	return a, content.Bytes(), nil
}

func hexSHA(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// TestArtifacts: a file uploaded in chunks is imported by a plan; the
// plan's render and export are kept as artifacts, downloaded with the hash
// the receipt names and the agent's file has; bad uploads change nothing.
func TestArtifacts(t *testing.T) {
	c := startCluster(t)
	s := c.negotiate(t)
	id := s.GetSessionId()
	obj := []byte("o Tri\nv 0 0 0\nv 1 0 0\nv 0 1 0\nf 1 2 3\n")
	up, err := c.upload(t, &cpv1.ArtifactUpload{SessionId: id, Name: "tri.obj", SizeBytes: int64(len(obj)), Sha256: hexSHA(obj)}, obj, 10)
	if err != nil {
		t.Fatal(err)
	}
	if up.GetSha256() != hexSHA(obj) || up.GetSizeBytes() != int64(len(obj)) || up.GetRequestId() != "" {
		t.Fatalf("uploaded %v", up)
	}
	p, rs := c.run(t, id, "art-1",
		op("imp", "scene.import", map[string]any{"format": "obj", "input": "tri.obj"}),
		op("shot", "render.still", map[string]any{"output": "shot.png", "resolution": []any{64, 48}, "samples": 1, "seed": 3}, "imp"),
		op("out", "scene.export", map[string]any{"format": "gltf", "output": "scene.glb"}, "imp"))
	if p.GetState() != cpv1.Plan_STATE_SUCCEEDED {
		t.Fatalf("plan %v: %v", p.GetState(), rs)
	}
	sandbox := filepath.Join(c.dir, "agent", "sessions", id, "output")
	for _, r := range rs[1:] {
		if len(r.GetArtifacts()) == 0 {
			t.Fatalf("receipt of %s names no file: %v", r.GetOperationId(), r)
		}
		for _, f := range r.GetArtifacts() {
			a, content, err := c.download(t, &cpv1.DownloadArtifactRequest{SessionId: id, Name: f.GetName()})
			if err != nil {
				t.Fatalf("download %s: %v", f.GetName(), err)
			}
			onAgent, _ := os.ReadFile(filepath.Join(sandbox, f.GetName()))
			if a.GetSha256() != f.GetSha256() || hexSHA(onAgent) != f.GetSha256() || !bytes.Equal(content, onAgent) {
				t.Fatalf("%s: downloaded %s, receipt %s, agent's file %s", f.GetName(), a.GetSha256(), f.GetSha256(), hexSHA(onAgent))
			}
			if a.GetRequestId() != "art-1" || a.GetOperationId() != r.GetOperationId() || a.GetReceiptSequence() != r.GetSequence() {
				t.Fatalf("artifact %v does not name its receipt %v", a, r)
			}
		}
	}
	list, err := c.client.ListArtifacts(ctxT(t, 10*time.Second), &cpv1.ListArtifactsRequest{SessionId: id, RequestId: "art-1"})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, a := range list.GetArtifacts() {
		names = append(names, a.GetName())
	}
	if got := strings.Join(names, " "); !strings.Contains(got, "shot.png") || !strings.Contains(got, "scene.glb") || strings.Contains(got, "tri.obj") {
		t.Fatalf("artifacts of art-1: %s", got)
	}

	// Refusals, each changing nothing.
	_, err = c.upload(t, &cpv1.ArtifactUpload{SessionId: id, Name: "../evil.obj"}, obj, 1<<20)
	wantRefusal(t, "a path as a name", err, codes.FailedPrecondition, "POLICY_REFUSED")
	_, err = c.upload(t, &cpv1.ArtifactUpload{SessionId: id, Name: "evil\n.obj"}, obj, 1<<20)
	wantRefusal(t, "a control character in a name", err, codes.FailedPrecondition, "POLICY_REFUSED")
	_, err = c.upload(t, &cpv1.ArtifactUpload{SessionId: id, Name: "evil\u202ejbo.exe"}, obj, 1<<20)
	wantRefusal(t, "a bidirectional control in a name", err, codes.FailedPrecondition, "POLICY_REFUSED")
	_, err = c.upload(t, &cpv1.ArtifactUpload{SessionId: id, Name: "tri.obj", Sha256: hexSHA([]byte("other"))}, obj, 1<<20)
	wantRefusal(t, "a wrong hash", err, codes.InvalidArgument, "CHECKSUM_MISMATCH")
	if a, _, err := c.download(t, &cpv1.DownloadArtifactRequest{SessionId: id, Name: "tri.obj"}); err != nil || a.GetSha256() != hexSHA(obj) {
		t.Fatalf("the refused upload replaced tri.obj: %v %v", a, err)
	}
	unique := []byte("content no artifact has " + id)
	_, err = c.upload(t, &cpv1.ArtifactUpload{SessionId: id, Name: "u.obj", Sha256: hexSHA([]byte("other"))}, unique, 1<<20)
	wantRefusal(t, "a wrong hash of new content", err, codes.InvalidArgument, "CHECKSUM_MISMATCH")
	if kept, _ := filepath.Glob(filepath.Join(c.dir, "cp", "blobs", "*", "*", hexSHA(unique))); len(kept) != 0 {
		t.Fatalf("the refused upload's content was kept: %v", kept)
	}
	empty, err := c.client.UploadArtifact(ctxT(t, 10*time.Second))
	if err == nil {
		_, err = empty.CloseAndRecv()
	}
	wantRefusal(t, "an upload without messages", err, codes.InvalidArgument, "SCHEMA_INVALID")
	if err := os.Mkdir(filepath.Join(sandbox, "dir.obj"), 0o755); err != nil {
		t.Fatal(err)
	}
	_, err = c.upload(t, &cpv1.ArtifactUpload{SessionId: id, Name: "dir.obj"}, obj, 1<<20)
	wantRefusal(t, "an upload onto a directory's name", err, codes.FailedPrecondition, "ARTIFACT_CONFLICT")
	_, _, err = c.download(t, &cpv1.DownloadArtifactRequest{SessionId: id, Name: "nope.png"})
	wantRefusal(t, "an unknown artifact", err, codes.NotFound, "ARTIFACT_NOT_FOUND")
	small, err := c.client.Negotiate(ctxT(t, time.Minute), &cpv1.NegotiateRequest{ContractVersion: "1.0.0",
		HostProfile: &cpv1.HostProfile{ClientName: "e2e"}, Limits: &cpv1.Limits{MaxArtifactBytes: 16}})
	if err != nil || small.GetContract().GetLimits().GetMaxArtifactBytes() != 16 {
		t.Fatalf("negotiate a small artifact limit: %v %v", small, err)
	}
	_, err = c.upload(t, &cpv1.ArtifactUpload{SessionId: small.GetContract().GetSessionId(), Name: "tri.obj"}, obj, 8)
	wantRefusal(t, "an upload over the contract's limit", err, codes.FailedPrecondition, "CONTRACT_VIOLATION")
	if _, err := os.Stat(filepath.Join(c.dir, "agent", "sessions", small.GetContract().GetSessionId(), "output", "tri.obj")); !os.IsNotExist(err) {
		t.Fatalf("the refused upload reached the agent: %v", err)
	}
}

// TestUploadDuringAWrite: an upload of a name that a running plan writes
// lands after the plan's call (it waits for it), though the control plane
// records the call's file after the upload's: the name's newest version is
// the one the agent's sandbox holds, the upload, and the call's version
// stays downloadable by its hash.
func TestUploadDuringAWrite(t *testing.T) {
	c := startCluster(t)
	id := c.negotiate(t).GetSessionId()
	_, err := c.client.SubmitPlan(ctxT(t, time.Minute), &cpv1.SubmitPlanRequest{SessionId: id, RequestId: "slow", Operations: []*cpv1.Operation{
		op("shot", "render.still", map[string]any{"output": "slow.png", "resolution": []any{640, 480}, "samples": 64, "seed": 1}),
		op("out", "scene.export", map[string]any{"format": "obj", "output": "model.obj"}, "shot")}})
	if err != nil {
		t.Fatal(err)
	}
	for c.plan(t, "slow").GetState() != cpv1.Plan_STATE_RUNNING {
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(time.Second) // the render runs for some seconds: the agent holds the upload off
	obj := []byte("o Up\nv 0 0 0\nv 1 0 0\nv 0 1 0\nf 1 2 3\n")
	up, err := c.upload(t, &cpv1.ArtifactUpload{SessionId: id, Name: "model.obj", SizeBytes: int64(len(obj)), Sha256: hexSHA(obj)}, obj, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	rs := c.receipts(t, "slow", 1)
	if len(rs) != 2 || rs[1].GetStatus() != cpv1.Receipt_STATUS_SUCCEEDED {
		t.Fatalf("receipts: %v", rs)
	}
	if !up.GetCreateTime().AsTime().After(rs[1].GetCompleteTime().AsTime()) {
		t.Fatalf("the upload landed at %v, before the export returned at %v: it came before the plan's batch (a render too quick?)",
			up.GetCreateTime().AsTime(), rs[1].GetCompleteTime().AsTime())
	}
	if a, content, err := c.download(t, &cpv1.DownloadArtifactRequest{SessionId: id, Name: "model.obj"}); err != nil || a.GetSha256() != up.GetSha256() || !bytes.Equal(content, obj) {
		t.Fatalf("model.obj's newest: %v %v; want the upload", a, err)
	}
	if onAgent, err := os.ReadFile(filepath.Join(c.dir, "agent", "sessions", id, "output", "model.obj")); err != nil || !bytes.Equal(onAgent, obj) {
		t.Fatalf("the agent's model.obj: %q %v", onAgent, err)
	}
	export := rs[1].GetArtifacts()[slices.IndexFunc(rs[1].GetArtifacts(), func(a *cpv1.Artifact) bool { return a.GetName() == "model.obj" })]
	if a, _, err := c.download(t, &cpv1.DownloadArtifactRequest{SessionId: id, Name: "model.obj", Sha256: export.GetSha256()}); err != nil || a.GetRequestId() != "slow" {
		t.Fatalf("the export's model.obj: %v %v", a, err)
	}
}

// TestSessionStorage: a session's files take at most its contract's
// temp_storage_mib, which the agent enforces: an upload over it is refused
// QUOTA_EXCEEDED (by the control plane when the file alone is larger, by
// the agent when the session's files would be), a plan whose export would
// go over it fails QUOTA_EXCEEDED, and neither leaves a file on the agent.
// A contract asking for more than an agent offers a session is refused; an
// agent whose disk is short of what it keeps free refuses every file.
func TestSessionStorage(t *testing.T) {
	c := startClusterOpts(t, clusterOpts{agentArgs: []string{"--session-storage-mib", "64"}})
	if s := c.negotiate(t); s.GetConstraints().GetTempStorageMib() != 64 {
		t.Errorf("default temp_storage_mib %d, want agentd's offer: --session-storage-mib 64", s.GetConstraints().GetTempStorageMib())
	}
	_, err := c.client.Negotiate(ctxT(t, time.Minute), &cpv1.NegotiateRequest{ContractVersion: "1.0.0",
		HostProfile: &cpv1.HostProfile{ClientName: "e2e"}, Constraints: &cpv1.Constraints{TempStorageMib: 1 << 40}})
	wantRefusal(t, "more disk than the agent offers a session", err, codes.FailedPrecondition, "CONTRACT_VIOLATION")
	if out, err := c.blendctl("negotiate", "--disk-mib", "16", "--memory-mib", "1024").CombinedOutput(); err != nil ||
		!strings.Contains(string(out), "memory 1024 MiB; storage 16 MiB") {
		t.Fatalf("blendctl negotiate --disk-mib 16 --memory-mib 1024: %v\n%s", err, out)
	}
	if out, err := c.blendctl("negotiate", "--disk-mib", "65").CombinedOutput(); err == nil ||
		!strings.Contains(string(out), "offers a session at most 64 MiB") {
		t.Fatalf("blendctl negotiate --disk-mib 65 on an agent offering 64: %v\n%s", err, out)
	}
	// --selector: the labels the session's agent must carry (this one has none).
	if out, err := c.blendctl("negotiate", "--selector", "gpu=true").CombinedOutput(); err == nil ||
		!strings.Contains(string(out), "gpu=true") || !strings.Contains(string(out), "CONTRACT_VIOLATION") {
		t.Fatalf("blendctl negotiate --selector gpu=true with no such agent: %v\n%s", err, out)
	}

	resp, err := c.client.Negotiate(ctxT(t, time.Minute), &cpv1.NegotiateRequest{ContractVersion: "1.0.0",
		HostProfile: &cpv1.HostProfile{ClientName: "e2e"}, Constraints: &cpv1.Constraints{TempStorageMib: 1}})
	if err != nil || resp.GetContract().GetConstraints().GetTempStorageMib() != 1 {
		t.Fatalf("negotiate 1 MiB of disk: %v %v", resp, err)
	}
	id := resp.GetContract().GetSessionId()
	sandbox := filepath.Join(c.dir, "agent", "sessions", id, "output")
	upload := func(name string, content []byte) error {
		_, err := c.upload(t, &cpv1.ArtifactUpload{SessionId: id, Name: name, SizeBytes: int64(len(content)), Sha256: hexSHA(content)}, content, 256<<10)
		return err
	}
	big := bytes.Repeat([]byte("b"), 1<<20-512) // no room for a glTF cube (1.4 KB)
	if err := upload("big.bin", big); err != nil {
		t.Fatal(err)
	}
	more := append(bytes.Repeat([]byte("m"), 8192), id...) // content no other test has
	err = upload("more.bin", more)
	wantRefusal(t, "an upload the session's files have no room for", err, codes.ResourceExhausted, "QUOTA_EXCEEDED")
	if kept, _ := filepath.Glob(filepath.Join(c.dir, "cp", "blobs", "*", "*", hexSHA(more))); len(kept) != 0 {
		t.Fatalf("the upload the agent refused was kept by the control plane: %v", kept)
	}
	err = upload("huge.bin", bytes.Repeat([]byte("h"), 2<<20))
	wantRefusal(t, "an upload larger than the session's disk", err, codes.ResourceExhausted, "QUOTA_EXCEEDED")

	p, rs := c.run(t, id, "disk-1",
		op("box", "object.create", map[string]any{"type": "cube", "name": "Box"}),
		op("out", "scene.export", map[string]any{"format": "gltf", "output": "scene.glb"}, "box"))
	if p.GetState() != cpv1.Plan_STATE_FAILED || len(rs) != 2 || rs[1].GetError().GetErrorCode() != "QUOTA_EXCEEDED" ||
		!strings.Contains(rs[1].GetError().GetMessage(), "temp_storage_mib of 1 MiB") {
		t.Fatalf("an export over the session's disk: plan %v, receipts %v", p.GetState(), rs)
	}
	entries, err := os.ReadDir(sandbox)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 || entries[0].Name() != "big.bin" {
		t.Fatalf("the session's files: %v, want big.bin alone", entries)
	}

	short := startClusterOpts(t, clusterOpts{agentArgs: []string{"--min-free-disk-mib", "1099511627776"}}) // more than any disk
	s := short.negotiate(t)
	if s.GetConstraints().GetTempStorageMib() != 1 {
		t.Errorf("temp_storage_mib %d on an agent with no disk to offer, want 1", s.GetConstraints().GetTempStorageMib())
	}
	tiny := []byte("v 0 0 0\n")
	_, err = short.upload(t, &cpv1.ArtifactUpload{SessionId: s.GetSessionId(), Name: "tiny.obj", SizeBytes: int64(len(tiny)), Sha256: hexSHA(tiny)}, tiny, 1024)
	wantRefusal(t, "an upload to an agent short of disk", err, codes.ResourceExhausted, "QUOTA_EXCEEDED")
	if !strings.Contains(err.Error(), "keeps for its journal") {
		t.Errorf("the refusal %v does not say why", err)
	}
}

// TestControlPlaneDiskFloor: a control plane whose disk is short of what it
// keeps free for its database (--min-free-disk-mib; here more than any
// disk has) keeps no artifact content: an upload is refused
// STORAGE_EXHAUSTED, and a plan's files are listed but not kept (asking
// for one says why), while plans run and their receipts are committed.
func TestControlPlaneDiskFloor(t *testing.T) {
	c := startClusterOpts(t, clusterOpts{cpArgs: []string{"--min-free-disk-mib", "1099511627776"}})
	id := c.negotiate(t).GetSessionId()
	obj := []byte("o Tri\nv 0 0 0\nv 1 0 0\nv 0 1 0\nf 1 2 3\n")
	_, err := c.upload(t, &cpv1.ArtifactUpload{SessionId: id, Name: "tri.obj", SizeBytes: int64(len(obj)), Sha256: hexSHA(obj)}, obj, 1024)
	wantRefusal(t, "an upload to a control plane short of disk", err, codes.ResourceExhausted, "STORAGE_EXHAUSTED")
	p, rs := c.run(t, id, "floor-1", op("box", "object.create", map[string]any{"type": "cube", "name": "Box"}),
		op("out", "scene.export", map[string]any{"format": "gltf", "output": "scene.glb"}, "box"))
	if p.GetState() != cpv1.Plan_STATE_SUCCEEDED || len(rs) != 2 || len(rs[1].GetArtifacts()) != 1 {
		t.Fatalf("a plan on a control plane short of disk: %v %v", p.GetState(), rs)
	}
	_, _, err = c.download(t, &cpv1.DownloadArtifactRequest{SessionId: id, Name: "scene.glb"})
	wantRefusal(t, "a file the control plane had no room to keep", err, codes.ResourceExhausted, "STORAGE_EXHAUSTED")
	if kept, _ := filepath.Glob(filepath.Join(c.dir, "cp", "blobs", "sha256", "*", "*")); len(kept) != 0 {
		t.Fatalf("kept %v under the floor", kept)
	}
	// A distributed render brings its frames to the control plane: it fails
	// once, saying why, rather than trying every agent in turn.
	p, rs = c.run(t, id, "floor-2", op("frames", "render.animation", map[string]any{"output_prefix": "f", "frame_start": 1,
		"frame_end": 2, "resolution": []any{16, 16}, "samples": 1, "distribute": true}))
	if p.GetState() != cpv1.Plan_STATE_FAILED || len(rs) != 1 || rs[0].GetError().GetErrorCode() != "STORAGE_EXHAUSTED" {
		t.Fatalf("a distributed render on a control plane short of disk: %v %v", p.GetState(), rs)
	}
}

// TestArtifactRetention: with --artifact-retention, the artifacts of a
// session closed that long ago are forgotten (their content goes once
// unused for a day: app.TestSweep), while another session's artifact of
// the same content stays whole; the session itself is kept.
func TestArtifactRetention(t *testing.T) {
	c := startClusterOpts(t, clusterOpts{cpArgs: []string{"--artifact-retention", "2s"}})
	a, b := c.negotiate(t).GetSessionId(), c.negotiate(t).GetSessionId()
	own := []byte("o Own\nv 0 0 0\nv 1 0 0\nv 0 1 0\nf 1 2 3\n# " + a)
	shared := []byte("o Shared\nv 0 0 0\nv 1 0 0\nv 0 1 0\nf 1 2 3\n# " + a + b)
	for _, up := range []struct {
		session, name string
		content       []byte
	}{{a, "own.obj", own}, {a, "shared.obj", shared}, {b, "shared.obj", shared}} {
		if _, err := c.upload(t, &cpv1.ArtifactUpload{SessionId: up.session, Name: up.name, SizeBytes: int64(len(up.content)),
			Sha256: hexSHA(up.content)}, up.content, 1024); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.client.CloseSession(ctxT(t, time.Minute), &cpv1.CloseSessionRequest{SessionId: a}); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(200 * time.Millisecond) {
		list, err := c.client.ListArtifacts(ctxT(t, 10*time.Second), &cpv1.ListArtifactsRequest{SessionId: a})
		if err != nil {
			t.Fatal(err)
		}
		if len(list.GetArtifacts()) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a minute after its session closed: artifacts %v", list.GetArtifacts())
		}
	}
	_, _, err := c.download(t, &cpv1.DownloadArtifactRequest{SessionId: a, Name: "own.obj"})
	wantRefusal(t, "an expired artifact", err, codes.NotFound, "ARTIFACT_NOT_FOUND")
	if _, content, err := c.download(t, &cpv1.DownloadArtifactRequest{SessionId: b, Name: "shared.obj"}); err != nil || !bytes.Equal(content, shared) {
		t.Fatalf("the other session's artifact of the same content: %v", err)
	}
	if got, err := c.client.GetSession(ctxT(t, 10*time.Second), &cpv1.GetSessionRequest{SessionId: a}); err != nil ||
		got.GetSession().GetState() != cpv1.Session_STATE_CLOSED {
		t.Fatalf("the expired session itself: %v %v", got, err)
	}
}

// TestArtifactQuota: what one principal's sessions keep on the control
// plane is bounded by --artifact-quota-mib: an upload over it is refused
// and stores nothing, a receipt's file over it stays on its agent (a
// download relays it while the session lives, and nothing is kept), a
// distributed render over it fails; artifacts forgotten after their
// session closed free the quota, and a file left on its agent is kept at
// its next download.
func TestArtifactQuota(t *testing.T) {
	c := startClusterOpts(t, clusterOpts{cpArgs: []string{"--artifact-quota-mib", "1", "--artifact-retention", "2s"}})
	full, id := c.negotiate(t).GetSessionId(), c.negotiate(t).GetSessionId()
	upload := func(session, name string, content []byte, declared bool) error {
		t.Helper()
		h := &cpv1.ArtifactUpload{SessionId: session, Name: name}
		if declared {
			h.SizeBytes, h.Sha256 = int64(len(content)), hexSHA(content)
		}
		_, err := c.upload(t, h, content, 64<<10)
		return err
	}
	big := bytes.Repeat([]byte("v 0 0 0\n"), (1<<20-512)/8) // the quota less 512 bytes
	if err := upload(full, "big.obj", big, true); err != nil {
		t.Fatal(err)
	}
	more := bytes.Repeat([]byte("# more\n"), 600)
	for _, declared := range []bool{true, false} {
		err := upload(id, "more.obj", more, declared)
		wantRefusal(t, fmt.Sprintf("an upload over the quota (size declared: %v)", declared), err, codes.ResourceExhausted, "QUOTA_EXCEEDED")
		if !strings.Contains(err.Error(), "--artifact-quota-mib") {
			t.Errorf("the refusal does not say which limit: %v", err)
		}
	}
	if _, _, err := c.download(t, &cpv1.DownloadArtifactRequest{SessionId: id, Name: "more.obj"}); status.Code(err) != codes.NotFound {
		t.Fatalf("a refused upload was kept: %v", err)
	}
	if err := upload(full, "big.obj", big, true); err != nil { // the same again: nothing new to keep
		t.Fatalf("the newest upload again, at the quota: %v", err)
	}
	// A version of a name sent again after another (the 116 bytes left
	// would not take it twice): nothing new to keep, and it is the newest.
	first, second := bytes.Repeat([]byte("#1\n"), 200/3), bytes.Repeat([]byte("#2\n"), 200/3)
	for i, content := range [][]byte{first, second, first} {
		if err := upload(full, "x.obj", content, true); err != nil {
			t.Fatalf("upload %d of x.obj, near the quota: %v", i+1, err)
		}
	}
	if _, content, err := c.download(t, &cpv1.DownloadArtifactRequest{SessionId: full, Name: "x.obj"}); err != nil || !bytes.Equal(content, first) {
		t.Fatalf("x.obj after its first version was sent again: %q %v", content, err)
	}

	blobs := filepath.Join(c.dir, "cp", "blobs", "sha256")
	p, rs := c.run(t, id, "shot", op("shot", "render.still", map[string]any{"output": "shot.png", "resolution": []any{64, 48}, "samples": 1, "seed": 3}))
	if p.GetState() != cpv1.Plan_STATE_SUCCEEDED || len(rs[0].GetArtifacts()) != 1 || rs[0].GetArtifacts()[0].GetSizeBytes() <= 512 {
		t.Fatalf("a render whose file passes the quota: %v %v", p, rs)
	}
	shot := rs[0].GetArtifacts()[0]
	left := func() bool { // as listed
		t.Helper()
		resp, err := c.client.ListArtifacts(ctxT(t, time.Minute), &cpv1.ListArtifactsRequest{SessionId: id, RequestId: "shot"})
		if err != nil || len(resp.GetArtifacts()) != 1 {
			t.Fatalf("the render's artifacts: %v %v", resp, err)
		}
		return resp.GetArtifacts()[0].GetLeftOnAgent()
	}
	if !shot.GetLeftOnAgent() || !left() {
		t.Errorf("a render's file over the quota is not said to be left on the agent: %v", shot)
	}
	kept := func() bool {
		_, err := os.Stat(filepath.Join(blobs, shot.GetSha256()[:2], shot.GetSha256()))
		return err == nil
	}
	download := func(i int) {
		t.Helper()
		art, content, err := c.download(t, &cpv1.DownloadArtifactRequest{SessionId: id, Name: "shot.png"})
		if err != nil || art.GetSha256() != shot.GetSha256() || hexSHA(content) != shot.GetSha256() {
			t.Fatalf("download %d of shot.png: %v %v", i, art, err)
		}
	}
	for i := range 2 { // relayed each time: nothing is kept
		download(i)
		if kept() {
			t.Fatal("the control plane kept a file over the quota")
		}
	}
	// Uploaded as it is, the version only its agent had would be kept:
	// checked against the quota like any new content.
	_, content, err := c.download(t, &cpv1.DownloadArtifactRequest{SessionId: id, Name: "shot.png"})
	if err != nil {
		t.Fatal(err)
	}
	wantRefusal(t, "an upload of a version left on the agent, over the quota", upload(id, "shot.png", content, true), codes.ResourceExhausted, "QUOTA_EXCEEDED")
	// Two renders to one name in a plan, both left on the agent: each
	// version is relayed by its hash, the first too, which the second
	// replaced in the sandbox.
	_, rs = c.run(t, id, "twice",
		op("a", "render.still", map[string]any{"output": "twice.png", "resolution": []any{64, 48}, "samples": 1, "seed": 3}),
		op("b", "render.still", map[string]any{"output": "twice.png", "resolution": []any{48, 36}, "samples": 1, "seed": 3}, "a"))
	if len(rs) != 2 || len(rs[0].GetArtifacts()) != 1 || len(rs[1].GetArtifacts()) != 1 || rs[0].GetArtifacts()[0].GetSha256() == rs[1].GetArtifacts()[0].GetSha256() {
		t.Fatalf("two renders to one name: %v", rs)
	}
	for _, r := range rs {
		want := r.GetArtifacts()[0].GetSha256()
		art, content, err := c.download(t, &cpv1.DownloadArtifactRequest{SessionId: id, Name: "twice.png", Sha256: want})
		if err != nil || art.GetSha256() != want || hexSHA(content) != want {
			t.Fatalf("download of %s's twice.png: %v %v", r.GetOperationId(), art, err)
		}
	}
	// blendctl submit, in a session of its own, leaves open a session whose
	// agent alone has a file, and says how to take it.
	plan := filepath.Join(t.TempDir(), "over.json")
	if err := os.WriteFile(plan, []byte(`{"request_id": "over", "operations": [{"operation_id": "r", "tool_name": "render.still",
		"safety_level": "safe_write", "args": {"output": "over.png", "resolution": [64, 48], "samples": 1, "seed": 3}}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	cmd := c.blendctl("submit", plan, "--watch")
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("blendctl submit over the quota: %v\n%s\n%s", err, stdout.String(), stderr.String())
	}
	m := regexp.MustCompile(`session (s-[0-9a-f]+) stays open: only its agent has over.png`).FindStringSubmatch(stderr.String())
	if m == nil || strings.Contains(stdout.String(), "closed") || !strings.Contains(stdout.String(), "wrote over.png") ||
		!strings.Contains(stdout.String(), "[left on the agent") {
		t.Fatalf("blendctl submit of a render over the quota:\n%s\n%s", stdout.String(), stderr.String())
	}
	if out, err := c.blendctl("download", "over.png", "--session", m[1], "-o", t.TempDir()).CombinedOutput(); err != nil {
		t.Fatalf("downloading the file left on the agent: %v\n%s", err, out)
	}
	if out, err := c.blendctl("close", m[1]).CombinedOutput(); err != nil {
		t.Fatalf("closing the session kept open: %v\n%s", err, out)
	}

	_, rs = c.run(t, id, "frames", op("anim", "render.animation", map[string]any{"output_prefix": "f", "frame_start": 1, "frame_end": 2,
		"resolution": []any{32, 24}, "samples": 1, "seed": 7, "distribute": true}))
	if rs[0].GetError().GetErrorCode() != "QUOTA_EXCEEDED" || !strings.Contains(rs[0].GetError().GetRetryHint(), "without distribute") {
		t.Fatalf("a distributed render over the quota: %v", rs)
	}

	// Forgotten two seconds after their session closed: room again. The
	// render's file, within the quota now, is kept at its next download.
	if _, err := c.client.CloseSession(ctxT(t, time.Minute), &cpv1.CloseSessionRequest{SessionId: full}); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(200 * time.Millisecond) {
		err := upload(id, "more.obj", more, true)
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a minute after the session closed: %v", err)
		}
	}
	download(2)
	if !kept() || left() {
		t.Fatal("a file within the quota was not kept at its download")
	}
}

// TestHelloTwiceWithBlendctl: the hello example runs twice through
// blendctl: the second run gets a fresh request id, each closes the session
// it negotiated, and --out saves the render with the hash the control plane
// holds.
func TestHelloTwiceWithBlendctl(t *testing.T) {
	c := startCluster(t)
	out := t.TempDir()
	sessionLine := regexp.MustCompile(`session (s-[0-9a-f]+) on agent`)
	var sessions []string
	for i := 0; i < 3; i++ {
		args := []string{"submit", filepath.Join(repoRoot(), "examples/plans/hello.json"), "--watch", "--out", out}
		if i == 2 {
			args = append(args, "--keep-session") // the third run keeps its session
		}
		cmd := c.blendctl(args...)
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Run(); err != nil {
			t.Fatalf("run %d: %v\n%s\n%s", i+1, err, stdout.String(), stderr.String())
		}
		text := stdout.String()
		for _, want := range []string{"[8/8]", "SUCCEEDED", "wrote hello.png", "saved " + filepath.Join(out, "hello.png"), "closed"} {
			if !strings.Contains(text, want) && !(i == 2 && want == "closed") {
				t.Errorf("run %d: output lacks %q:\n%s", i+1, want, text)
			}
		}
		if i > 0 && !strings.Contains(stderr.String(), "request_id hello-1 is already taken") {
			t.Errorf("the second run does not say its request id was replaced:\n%s", stderr.String())
		}
		m := sessionLine.FindStringSubmatch(text)
		if m == nil {
			t.Fatalf("no session in the output:\n%s", text)
		}
		sessions = append(sessions, m[1])
	}
	for i, id := range sessions {
		if st := c.session(t, id).GetState(); (st == cpv1.Session_STATE_CLOSED) != (i < 2) {
			t.Errorf("run %d: session %s left %v", i+1, id, st)
		}
	}
	saved, err := os.ReadFile(filepath.Join(out, "hello.png"))
	if err != nil {
		t.Fatal(err)
	}
	a, _, err := c.download(t, &cpv1.DownloadArtifactRequest{SessionId: sessions[1], Name: "hello.png"})
	if err != nil || a.GetSha256() != hexSHA(saved) {
		t.Fatalf("saved render %s, artifact %v %v", hexSHA(saved), a, err)
	}
	// Seeded renders of the same plan are the same bytes.
	first, _, err := c.download(t, &cpv1.DownloadArtifactRequest{SessionId: sessions[0], Name: "hello.png"})
	if err != nil || first.GetSha256() != a.GetSha256() {
		t.Fatalf("the two runs rendered %v and %v", first, a)
	}
	// The two closed sessions, one per page (AIP-158).
	var listed []string
	for token, pages := "", 0; ; pages++ {
		page, err := c.client.ListSessions(ctxT(t, 10*time.Second), &cpv1.ListSessionsRequest{
			PageSize: 1, PageToken: token, State: cpv1.Session_STATE_CLOSED})
		if err != nil || len(page.GetSessions()) > 1 || pages > 2 {
			t.Fatalf("ListSessions page %d: %v %v", pages+1, page, err)
		}
		for _, s := range page.GetSessions() {
			listed = append(listed, s.GetSessionId())
		}
		if token = page.GetNextPageToken(); token == "" {
			break
		}
	}
	slices.Sort(listed)
	if want := slices.Sorted(slices.Values(sessions[:2])); !slices.Equal(listed, want) {
		t.Errorf("closed sessions in pages of 1: %v, want %v", listed, want)
	}
}

// TestCapacityExhausted: with every Blender slot of the only agent running
// a plan, a negotiation is refused with RESOURCE_EXHAUSTED /
// CAPACITY_EXHAUSTED; once the plan ends it is accepted.
func TestCapacityExhausted(t *testing.T) {
	c := startClusterWith(t, []string{"--max-sessions", "1"}, nil)
	s := c.negotiate(t)
	slow := map[string]any{"output": "slow.png", "resolution": []any{640, 480}, "samples": 4096, "seed": 1}
	if _, err := c.client.SubmitPlan(ctxT(t, time.Minute), &cpv1.SubmitPlanRequest{SessionId: s.GetSessionId(), RequestId: "busy",
		Operations: []*cpv1.Operation{op("r", "render.still", slow)}}); err != nil {
		t.Fatal(err)
	}
	// Wait until the agent reports its only slot busy.
	for deadline := time.Now().Add(60 * time.Second); ; {
		resp, err := c.client.ListAgents(ctxT(t, 10*time.Second), &cpv1.ListAgentsRequest{})
		if err == nil && len(resp.GetAgents()) == 1 && resp.GetAgents()[0].GetBusySessionCount() == 1 && resp.GetAgents()[0].GetMaxSessions() == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the agent never reported its slot busy: %v %v", resp, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	_, err := c.client.Negotiate(ctxT(t, time.Minute), negotiateReq(nil))
	wantRefusal(t, "a negotiation while every slot is busy", err, codes.ResourceExhausted, "CAPACITY_EXHAUSTED")
	if _, err := c.client.CancelPlan(ctxT(t, time.Minute), &cpv1.CancelPlanRequest{RequestId: "busy"}); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(30 * time.Second); ; {
		_, err := c.client.Negotiate(ctxT(t, time.Minute), negotiateReq(nil))
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("negotiation still refused after the plan ended: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestBlendctlSessionsAndFiles: blendctl's session and file commands.
func TestBlendctlSessionsAndFiles(t *testing.T) {
	c := startCluster(t)
	s := c.negotiate(t)
	id := s.GetSessionId()
	blendctl := func(args ...string) string {
		t.Helper()
		out, err := c.blendctl(args...).CombinedOutput()
		if err != nil {
			t.Fatalf("blendctl %v: %v\n%s", args, err, out)
		}
		return string(out)
	}
	dir := t.TempDir()
	obj := filepath.Join(dir, "tri.obj")
	os.WriteFile(obj, []byte("o Tri\nv 0 0 0\nv 1 0 0\nv 0 1 0\nf 1 2 3\n"), 0o644)
	if out := blendctl("upload", obj, "--session", id); !strings.Contains(out, "uploaded tri.obj to session "+id) {
		t.Fatalf("upload: %s", out)
	}
	if out, err := c.blendctl("upload", obj, "--session", id, "--name", "bad\xff.obj").CombinedOutput(); err == nil || !strings.Contains(string(out), "not valid UTF-8") {
		t.Fatalf("an upload named in bytes that are not UTF-8: %v %s", err, out)
	}
	plan := filepath.Join(dir, "plan.json")
	os.WriteFile(plan, []byte(`{"request_id":"cli-files","operations":[
		{"operation_id":"imp","tool_name":"scene.import","args":{"format":"obj","input":"tri.obj"},"depends_on":[],"safety_level":"safe_write"},
		{"operation_id":"out","tool_name":"scene.export","args":{"format":"gltf","output":"tri.glb"},"depends_on":["imp"],"safety_level":"safe_write"}]}`), 0o644)
	if out := blendctl("submit", plan, "--session", id, "--watch"); !strings.Contains(out, "wrote tri.glb") {
		t.Fatalf("submit: %s", out)
	}
	if out := blendctl("plans", "--session", id); !strings.Contains(out, "cli-files") || !strings.Contains(out, "SUCCEEDED") {
		t.Fatalf("plans: %s", out)
	}
	if out := blendctl("artifacts", "--session", id); !strings.Contains(out, "tri.obj") || !strings.Contains(out, "(upload)") ||
		!strings.Contains(out, "tri.glb") || !strings.Contains(out, "cli-files") {
		t.Fatalf("artifacts: %s", out)
	}
	if out := blendctl("download", "tri.glb", "--session", id, "-o", dir); !strings.Contains(out, "saved "+filepath.Join(dir, "tri.glb")) {
		t.Fatalf("download: %s", out)
	}
	// -o ending in / makes the directory; a file in a missing one is refused, saying so.
	if out := blendctl("download", "tri.glb", "--session", id, "-o", dir+"/new/"); !strings.Contains(out, "saved "+filepath.Join(dir, "new", "tri.glb")) {
		t.Fatalf("download into a new directory: %s", out)
	}
	if out, err := c.blendctl("download", "tri.glb", "--session", id, "-o", dir+"/none/x.glb").CombinedOutput(); err == nil ||
		!strings.Contains(string(out), "no directory "+filepath.Join(dir, "none")) || strings.Contains(string(out), ".blendctl-") {
		t.Fatalf("download into a missing directory: %v %s", err, out)
	}
	if out := blendctl("sessions"); !strings.Contains(out, id) || !strings.Contains(out, "OPEN") && !strings.Contains(out, "PARKED") {
		t.Fatalf("sessions: %s", out)
	}
	if out := blendctl("close", id); !strings.Contains(out, "CLOSED") {
		t.Fatalf("close: %s", out)
	}
	if out := blendctl("sessions"); strings.Contains(out, id) {
		t.Fatalf("a closed session listed by default: %s", out)
	}
	if out := blendctl("sessions", "--state", "closed"); !strings.Contains(out, id) {
		t.Fatalf("sessions --state closed: %s", out)
	}
}

// TestSessionQuota: a principal holds at most --max-sessions-per-principal
// sessions open; one more is refused with QUOTA_EXCEEDED (others are not
// affected) until it closes one.
func TestSessionQuota(t *testing.T) {
	c := startClusterOpts(t, clusterOpts{cpArgs: []string{"--max-sessions-per-principal", "2"}})
	first := c.negotiate(t)
	c.negotiate(t)
	quotaReq := &cpv1.NegotiateRequest{ContractVersion: "1.0.0", HostProfile: &cpv1.HostProfile{ClientName: "quota"}}
	_, err := c.client.Negotiate(ctxT(t, time.Minute), quotaReq)
	if info, _ := details(status.Convert(err)); status.Code(err) != codes.ResourceExhausted || info.GetReason() != "QUOTA_EXCEEDED" {
		t.Fatalf("a third session: %v (%v)", err, info)
	}
	other := c.clientAs(t, c.createToken(t, "ana", "plans"))
	if _, err := other.Negotiate(ctxT(t, time.Minute), quotaReq); err != nil {
		t.Fatalf("another principal's session: %v", err)
	}
	if _, err := c.client.CloseSession(ctxT(t, time.Minute), &cpv1.CloseSessionRequest{SessionId: first.GetSessionId()}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.client.Negotiate(ctxT(t, time.Minute), quotaReq); err != nil {
		t.Fatalf("a session after closing one: %v", err)
	}
}

// TestRefreshAfter: agentd with --refresh-after gives a session whose
// Blender changed that many of the scene's records a fresh Blender (the
// spare) that loads its checkpoint, from the next checkpoint on; the metric
// counts it, the session's next plan runs on the scene it had, and a session
// below the count keeps its Blender. A session whose plans come back to
// back is refreshed too, at a checkpoint of its own, and none of its plans
// fails or loses a change.
func TestRefreshAfter(t *testing.T) {
	metrics := freeAddr(t)
	// A create changes three of the scene's records: two creates stay below
	// 7, a third reaches it.
	c := startClusterOpts(t, clusterOpts{agentArgs: []string{"--refresh-after", "7", "--checkpoint-idle", "200ms", "--checkpoint-every", "3",
		"--max-sessions", "2", "--metrics-listen", metrics}})
	c.agentMetrics = metrics
	refreshed := func() float64 {
		return scrape(t, "http://"+metrics+"/metrics", "")["blendplane_sessions_refreshed_total"]
	}
	s := c.negotiate(t).GetSessionId()
	c.run(t, s, "p1", cubeOp("a", "A", 0), cubeOp("b", "B", 1))
	c.waitSpares(t, 1)
	time.Sleep(time.Second) // its idle checkpoint, two creates: no refresh
	if n := refreshed(); n != 0 {
		t.Fatalf("%v refreshes after 2 creates", n)
	}
	_, rs := c.run(t, s, "p2", cubeOp("c", "C", 2))
	head := rs[len(rs)-1].GetSceneHashAfter()
	for deadline := time.Now().Add(time.Minute); refreshed() != 1; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no refresh after 3 creates and a checkpoint (%v)", refreshed())
		}
	}
	p, rs := c.run(t, s, "p3", cubeOp("d", "D", 3))
	if p.GetState() != cpv1.Plan_STATE_SUCCEEDED || rs[0].GetSceneHashBefore() != head {
		t.Fatalf("the plan after the refresh: %v, starts from %s, want %s", p.GetState(), rs[0].GetSceneHashBefore(), head)
	}

	// Back to back: a batch's checkpoint starts the refresh, and the plans
	// go on while the spare loads and catches up.
	c.waitSpares(t, 1)
	head = rs[0].GetSceneHashAfter()
	busy := 0
	for i := 0; refreshed() != 2; i, busy = i+1, busy+1 {
		if i == 300 {
			t.Fatalf("no refresh in 300 plans back to back (%v)", refreshed())
		}
		p, rs := c.run(t, s, fmt.Sprintf("busy-%d", i), cubeOp("e", fmt.Sprintf("E%d", i), 4+i))
		if p.GetState() != cpv1.Plan_STATE_SUCCEEDED || rs[0].GetSceneHashBefore() != head {
			t.Fatalf("plan %d: %v, starts from %s, want %s", i, p.GetState(), rs[0].GetSceneHashBefore(), head)
		}
		head = rs[0].GetSceneHashAfter()
	}
	t.Logf("refreshed while plans ran back to back, after %d of them", busy)
	p, rs = c.run(t, s, "p4", cubeOp("f", "F", 400))
	if p.GetState() != cpv1.Plan_STATE_SUCCEEDED || rs[0].GetSceneHashBefore() != head {
		t.Fatalf("the plan after the busy refresh: %v, starts from %s, want %s", p.GetState(), rs[0].GetSceneHashBefore(), head)
	}
}
