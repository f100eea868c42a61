package store

import (
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	cpv1 "github.com/blendplane/blendplane/gen/blendplane/controlplane/v1"
)

func openTest(t testing.TB) (*Store, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "cp.db")
	s, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s, path
}

// reopenAt turns s (a database at path) into one of schema version
// without the buckets that version did not have, closes it and opens it
// again: what the migrations from version make of it.
func reopenAt(t testing.TB, s *Store, path string, version uint64, added ...[]byte) *Store {
	t.Helper()
	if err := s.db.Update(func(tx *bolt.Tx) error {
		for _, b := range added {
			if err := tx.DeleteBucket(b); err != nil {
				return err
			}
		}
		return tx.Bucket(bucketMeta).Put(keySchemaVersion, u64(version))
	}); err != nil {
		t.Fatal(err)
	}
	s.Close()
	again, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { again.Close() })
	return again
}

func testPlan(owner, id string) NewPlan {
	args, _ := structpb.NewStruct(map[string]any{"type": "cube"})
	return NewPlan{
		Owner: owner,
		Plan:  &cpv1.Plan{RequestId: id, SessionId: "s1", State: cpv1.Plan_STATE_PENDING},
		Request: &cpv1.SubmitPlanRequest{SessionId: "s1", RequestId: id, Operations: []*cpv1.Operation{
			{OperationId: "b", ToolName: "object.create", Args: args},
			{OperationId: "a", ToolName: "object.create", Args: args},
		}},
		Schedule: []int{1, 0},
		Digest:   "d-" + owner + "-" + id,
	}
}

func testSession(owner, id string) Session {
	created := timestamppb.New(time.Unix(1000, 0))
	return Session{
		Owner: owner,
		Info: &cpv1.Session{SessionId: id, State: cpv1.Session_STATE_OPEN, AgentId: "agent-1", RuntimeId: "rt",
			Contract: &cpv1.SessionContract{SessionId: id, ContractVersion: "1.0.0", BaselineSceneHash: "base",
				ToolRegistryRef: &cpv1.ToolRegistryRef{Fingerprint: "f"}},
			SceneHash: "base", CreateTime: created},
	}
}

var testRegistry = &cpv1.ToolRegistry{Fingerprint: "f", Version: "v"}

func TestSessionLifecycle(t *testing.T) {
	s, _ := openTest(t)
	for i := 1; i <= 5; i++ {
		if err := s.PutSession(testSession("alice", fmt.Sprint("s", i)), testRegistry); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.PutSession(testSession("bob", "s9"), testRegistry); err != nil {
		t.Fatal(err)
	}
	if err := s.PutSession(testSession("alice", "s1"), testRegistry); err == nil {
		t.Fatal("a session id was stored twice")
	}
	got, err := s.Session("s1")
	if err != nil {
		t.Fatal(err)
	}
	if got.Owner != "alice" || got.Info.GetAgentId() != "agent-1" || got.Info.GetSceneHash() != "base" ||
		got.RegistryFingerprint() != "f" || got.Info.GetUpdateTime().AsTime().Unix() != 1000 || got.Closed() {
		t.Fatalf("got %+v", got)
	}
	if reg, err := s.Registry("f"); err != nil || reg.GetVersion() != "v" {
		t.Fatalf("registry: %v %v", reg, err)
	}
	bad := testSession("alice", "s8")
	if err := s.PutSession(bad, &cpv1.ToolRegistry{Fingerprint: "other"}); err == nil {
		t.Fatal("a session stored with another registry than its contract's")
	}
	if _, err := s.Session("nope"); !errors.Is(err, ErrSessionNotFound) {
		t.Fatalf("missing session: %v", err)
	}

	closed, err := s.CloseSession("s2", time.Unix(2000, 0))
	if err != nil || !closed.Closed() || closed.Info.GetCloseTime().AsTime().Unix() != 2000 {
		t.Fatalf("close: %+v %v", closed, err)
	}
	if again, err := s.CloseSession("s2", time.Unix(3000, 0)); err != nil || again.Info.GetCloseTime().AsTime().Unix() != 2000 {
		t.Fatalf("closing again changed the session: %+v %v", again, err)
	}
	if ids, _ := s.Releasing(); fmt.Sprint(ids) != "[s2]" {
		t.Fatalf("releasing %v", ids)
	}
	if err := s.Released("s2"); err != nil {
		t.Fatal(err)
	}
	if ids, _ := s.Releasing(); len(ids) != 0 {
		t.Fatalf("still releasing %v", ids)
	}
	// A closed session takes no plan.
	p := testPlan("alice", "r1")
	p.Plan.SessionId = "s2"
	if _, err := s.CreatePlan(p); !errors.Is(err, ErrSessionClosed) {
		t.Fatalf("plan in a closed session: %v", err)
	}

	// Pages of alice's open sessions, two at a time, in negotiation order.
	var ids []string
	var after uint64
	for {
		page, next, err := s.ListSessions("alice", after, 2, func(s Session) bool { return !s.Closed() })
		if err != nil {
			t.Fatal(err)
		}
		for _, sess := range page {
			ids = append(ids, sess.Info.GetSessionId())
		}
		if next == 0 {
			break
		}
		after = next
	}
	if fmt.Sprint(ids) != "[s1 s3 s4 s5]" {
		t.Fatalf("alice's open sessions %v", ids)
	}
}

func TestPlanLifecycle(t *testing.T) {
	s, path := openTest(t)
	if err := s.PutSession(testSession("alice", "s1"), testRegistry); err != nil {
		t.Fatal(err)
	}
	ref := PlanRef{"alice", "r1"}
	if _, err := s.CreatePlan(testPlan("alice", "r1")); err != nil {
		t.Fatal(err)
	}
	if d, err := s.CreatePlan(testPlan("alice", "r1")); !errors.Is(err, ErrPlanExists) || d != "d-alice-r1" {
		t.Fatalf("duplicate create: %q %v", d, err)
	}
	// Request ids are per owner: bob's r1 is another plan.
	if _, err := s.CreatePlan(testPlan("bob", "r1")); err != nil {
		t.Fatalf("another owner's r1: %v", err)
	}
	if _, err := s.Plan(PlanRef{"carol", "r1"}); !errors.Is(err, ErrPlanNotFound) {
		t.Fatalf("carol sees r1: %v", err)
	}
	plan, err := s.Plan(ref)
	if err != nil {
		t.Fatal(err)
	}
	if got := plan.GetSchedule(); len(got) != 2 || got[0] != "a" || got[1] != "b" {
		t.Fatalf("schedule %v", got)
	}
	if refs, _ := s.ActivePlans(); len(refs) != 2 || refs[0] != ref || refs[1] != (PlanRef{"bob", "r1"}) {
		t.Fatalf("active %v", refs)
	}
	if sess, _ := s.Session("s1"); sess.Info.GetPlanCount() != 2 || sess.Info.GetActivePlanCount() != 2 {
		t.Fatalf("session counters %v", sess.Info)
	}

	watch := s.Watch(ref)
	plan.State = cpv1.Plan_STATE_RUNNING
	if err := s.Commit(ref, plan, []*cpv1.Receipt{{Sequence: 1, OperationId: "a", SceneHashAfter: "h1"}}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-watch:
	default:
		t.Fatal("watcher not woken by commit")
	}
	// A gap in the sequence is refused and changes nothing.
	if err := s.Commit(ref, plan, []*cpv1.Receipt{{Sequence: 3}}); err == nil {
		t.Fatal("gap accepted")
	}
	plan.State = cpv1.Plan_STATE_SUCCEEDED
	if err := s.Commit(ref, plan, []*cpv1.Receipt{{Sequence: 2, OperationId: "b", SceneHashAfter: "h2"}}); err != nil {
		t.Fatal(err)
	}
	// Committing the terminal state again does not count the plan twice.
	if err := s.Commit(ref, plan, nil); err != nil {
		t.Fatal(err)
	}
	if refs, _ := s.ActivePlans(); len(refs) != 1 || refs[0].Owner != "bob" {
		t.Fatalf("terminal plan still active: %v", refs)
	}
	if sess, _ := s.Session("s1"); sess.Info.GetActivePlanCount() != 1 || sess.Info.GetSceneHash() != "h2" {
		t.Fatalf("session after the plan: %v", sess.Info)
	}

	// Everything survives a reopen.
	s.Close()
	s2, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	st, err := s2.PlanState(ref)
	if err != nil || st.GetReceiptCount() != 2 || st.GetState() != cpv1.Plan_STATE_SUCCEEDED {
		t.Fatalf("after reopen: %v %v", st, err)
	}
	rs, err := s2.Receipts(ref, 2, 10)
	if err != nil || len(rs) != 1 || rs[0].GetOperationId() != "b" {
		t.Fatalf("receipts from 2: %v %v", rs, err)
	}
}

func TestRefusesNewerSchema(t *testing.T) {
	s, path := openTest(t)
	if err := s.db.Update(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketMeta).Put(keySchemaVersion, u64(uint64(len(migrations))+1))
	}); err != nil {
		t.Fatal(err)
	}
	s.Close()
	if _, err := Open(path); err == nil {
		t.Fatal("opened a database from a newer schema")
	}
}

func TestAuditPages(t *testing.T) {
	s, _ := openTest(t)
	refs := []PlanRef{{"alice", "r1"}, {"alice", "r2"}, {"bob", "r2"}}
	var plans []*cpv1.Plan
	for _, ref := range refs {
		if _, err := s.CreatePlan(testPlan(ref.Owner, ref.RequestID)); err != nil {
			t.Fatal(err)
		}
		p, _ := s.Plan(ref)
		plans = append(plans, p)
	}
	// Interleave the plans' receipts in the global log.
	for seq := int64(1); seq <= 3; seq++ {
		for i, ref := range refs {
			if err := s.Commit(ref, plans[i], []*cpv1.Receipt{{Sequence: seq, OperationId: fmt.Sprint("op", seq), McpCallId: "c",
				BlenderMutationId: fmt.Sprintf("m-%s-%s-%d", ref.Owner, ref.RequestID, seq)}}); err != nil {
				t.Fatal(err)
			}
		}
	}
	count := func(f AuditFilter) int {
		all, next, err := s.AuditRecords(f, 0, 100)
		if err != nil || next != 0 {
			t.Fatalf("%v: next %d, %v", f, next, err)
		}
		return len(all)
	}
	if n := count(AuditFilter{}); n != 9 {
		t.Fatalf("all: %d records", n)
	}
	if n := count(AuditFilter{Owner: "alice"}); n != 6 {
		t.Fatalf("alice: %d records", n)
	}
	if n := count(AuditFilter{Owner: "carol"}); n != 0 {
		t.Fatalf("carol: %d records", n)
	}
	var got []string
	var after uint64
	for {
		page, next, err := s.AuditRecords(AuditFilter{Owner: "bob", RequestID: "r2"}, after, 2)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range page {
			if r.GetRequestId() != "r2" || r.GetSessionId() != "s1" || r.GetTimestamp() == nil || r.GetPrincipal() != "bob" {
				t.Fatalf("record %v", r)
			}
			got = append(got, r.GetOperationId())
		}
		if next == 0 {
			break
		}
		after = next
	}
	if fmt.Sprint(got) != "[op1 op2 op3]" {
		t.Fatalf("paged bob's r2 records %v", got)
	}
	// By operation id across plans, a page at a time: only matches count.
	byOp, next, err := s.AuditRecords(AuditFilter{OperationID: "op2"}, 0, 2)
	if err != nil || len(byOp) != 2 || next == 0 {
		t.Fatalf("op2 page 1: %v %d %v", byOp, next, err)
	}
	rest, next, err := s.AuditRecords(AuditFilter{OperationID: "op2"}, next, 2)
	if err != nil || len(rest) != 1 || next != 0 || rest[0].GetOperationId() != "op2" {
		t.Fatalf("op2 page 2: %v %d %v", rest, next, err)
	}
	if n := count(AuditFilter{Owner: "alice", OperationID: "op3"}); n != 2 {
		t.Fatalf("alice's op3: %d records", n)
	}
	if n := count(AuditFilter{MutationID: "nope"}); n != 0 {
		t.Fatalf("unknown mutation id: %d records", n)
	}
	// By mutation id, through its index: that record only, and only within
	// the owner (and plan) asked for.
	one, _, err := s.AuditRecords(AuditFilter{MutationID: "m-bob-r2-2"}, 0, 10)
	if err != nil || len(one) != 1 || one[0].GetPrincipal() != "bob" || one[0].GetOperationId() != "op2" {
		t.Fatalf("by mutation id: %v %v", one, err)
	}
	if n := count(AuditFilter{Owner: "alice", MutationID: "m-bob-r2-2"}); n != 0 {
		t.Fatalf("alice sees bob's mutation: %d records", n)
	}
	if n := count(AuditFilter{Owner: "bob", RequestID: "r2", MutationID: "m-bob-r2-2"}); n != 1 {
		t.Fatalf("bob's r2 by mutation id: %d records", n)
	}
}

// TestArtifactsInLandingOrder: a name's newest version is the one that
// landed last in the sandbox, not the one recorded last: an upload that
// waited for a running call writing its name is recorded before the
// call's file, which landed first. Every version stays found by its hash.
func TestArtifactsInLandingOrder(t *testing.T) {
	s, _ := openTest(t)
	if err := s.PutSession(testSession("alice", "s1"), testRegistry); err != nil {
		t.Fatal(err)
	}
	at := func(sec int64) *timestamppb.Timestamp { return &timestamppb.Timestamp{Seconds: sec} }
	for _, a := range []*cpv1.Artifact{
		{Name: "m.obj", Sha256: "up", CreateTime: at(20)},                                        // the upload, landed after the export returned
		{Name: "m.obj", Sha256: "export", RequestId: "r1", OperationId: "x", CreateTime: at(10)}, // its receipt's file, fetched after
	} {
		a.SessionId = "s1"
		if _, err := s.PutArtifact(a); err != nil {
			t.Fatal(err)
		}
	}
	for sha, want := range map[string]string{"": "up", "export": "export", "up": "up"} {
		if a, err := s.Artifact("s1", "m.obj", sha); err != nil || a.GetSha256() != want {
			t.Errorf("m.obj %q: %v %v, want %s", sha, a, err, want)
		}
	}
	if _, err := s.PutArtifact(&cpv1.Artifact{SessionId: "s1", Name: "m.obj", Sha256: "later", RequestId: "r2", OperationId: "x", CreateTime: at(30)}); err != nil {
		t.Fatal(err)
	}
	if a, err := s.Artifact("s1", "m.obj", ""); err != nil || a.GetSha256() != "later" {
		t.Errorf("m.obj after a later export: %v %v", a, err)
	}
	// The same upload again, landing after a running export that is
	// recorded after it: recorded once, landed at its later time, newest.
	for _, a := range []*cpv1.Artifact{
		{Name: "in.obj", Sha256: "up", CreateTime: at(40)},
		{Name: "in.obj", Sha256: "up", CreateTime: at(60)},
		{Name: "in.obj", Sha256: "export", RequestId: "r3", OperationId: "x", CreateTime: at(50)},
	} {
		a.SessionId = "s1"
		if _, err := s.PutArtifact(a); err != nil {
			t.Fatal(err)
		}
	}
	if a, err := s.Artifact("s1", "in.obj", ""); err != nil || a.GetSha256() != "up" || a.GetCreateTime().GetSeconds() != 60 {
		t.Errorf("in.obj uploaded again during an export: %v %v", a, err)
	}
	if list, _, err := s.ListArtifacts("s1", "", 0, 100); err != nil || len(list) != 5 {
		t.Errorf("records: %d %v, want 5 (the upload sent again adds none)", len(list), err)
	}
}

func TestArtifacts(t *testing.T) {
	s, _ := openTest(t)
	if err := s.PutSession(testSession("alice", "s1"), testRegistry); err != nil {
		t.Fatal(err)
	}
	put := func(name, sum, requestID string) *cpv1.Artifact {
		t.Helper()
		a, err := s.PutArtifact(&cpv1.Artifact{SessionId: "s1", Name: name, Sha256: sum, SizeBytes: 3, RequestId: requestID})
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	put("shot.png", "aa", "r1")
	put("shot.png", "aa", "r1") // a replay adds nothing
	put("mesh.glb", "bb", "r1")
	put("shot.png", "cc", "r2")
	put("in.obj", "dd", "")
	if a, err := s.Artifact("s1", "shot.png", ""); err != nil || a.GetSha256() != "cc" {
		t.Fatalf("newest shot.png: %v %v", a, err)
	}
	if a, err := s.Artifact("s1", "shot.png", "aa"); err != nil || a.GetRequestId() != "r1" {
		t.Fatalf("shot.png version aa: %v %v", a, err)
	}
	if _, err := s.Artifact("s1", "shot.png", "ee"); !errors.Is(err, ErrArtifactNotFound) {
		t.Fatalf("unknown version: %v", err)
	}
	if _, err := s.Artifact("s2", "shot.png", ""); !errors.Is(err, ErrArtifactNotFound) {
		t.Fatalf("other session: %v", err)
	}
	list := func(requestID string, size int) []string {
		var names []string
		var after uint64
		for {
			page, next, err := s.ListArtifacts("s1", requestID, after, size)
			if err != nil {
				t.Fatal(err)
			}
			for _, a := range page {
				names = append(names, a.GetName()+"@"+a.GetSha256())
			}
			if next == 0 {
				return names
			}
			after = next
		}
	}
	if got := fmt.Sprint(list("", 2)); got != "[shot.png@aa mesh.glb@bb shot.png@cc in.obj@dd]" {
		t.Fatalf("all artifacts %s", got)
	}
	if got := fmt.Sprint(list("r1", 1)); got != "[shot.png@aa mesh.glb@bb]" {
		t.Fatalf("r1's artifacts %s", got)
	}
}

// TestMigratesSchema1 opens a database as the first release wrote it (no
// audit buckets) and checks that it is upgraded and keeps working.
func TestMigratesSchema1(t *testing.T) {
	path := filepath.Join(t.TempDir(), "v1.db")
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Update(func(tx *bolt.Tx) error {
		meta, _ := tx.CreateBucket(bucketMeta)
		if err := migrations[0](tx); err != nil {
			return err
		}
		return meta.Put(keySchemaVersion, u64(1))
	}); err != nil {
		t.Fatal(err)
	}
	db.Close()
	s, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ref := PlanRef{LegacyOwner, "r1"}
	if _, err := s.CreatePlan(testPlan(LegacyOwner, "r1")); err != nil {
		t.Fatal(err)
	}
	p, _ := s.Plan(ref)
	if err := s.Commit(ref, p, []*cpv1.Receipt{{Sequence: 1}}); err != nil {
		t.Fatalf("commit after migration: %v", err)
	}
	if recs, _, _ := s.AuditRecords(AuditFilter{Owner: LegacyOwner, RequestID: "r1"}, 0, 10); len(recs) != 1 {
		t.Fatalf("audit after migration: %v", recs)
	}
}

// TestMigratesSchema2 writes a database in the schema 2 layout (sessions
// as loose keys, plans keyed by request id alone) and checks that schema 3
// keeps every session, plan, receipt and audit record, under LegacyOwner.
func TestMigratesSchema2(t *testing.T) {
	path := filepath.Join(t.TempDir(), "v2.db")
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	contract := &cpv1.SessionContract{SessionId: "s1", AgentId: "agent-1", BaselineSceneHash: "base",
		CreateTime: timestamppb.New(time.Unix(1000, 0)), ToolRegistryRef: &cpv1.ToolRegistryRef{Fingerprint: "f"}}
	put := func(b *bolt.Bucket, k string, m proto.Message) {
		raw, _ := proto.Marshal(m)
		if err := b.Put([]byte(k), raw); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.Update(func(tx *bolt.Tx) error {
		meta, _ := tx.CreateBucket(bucketMeta)
		for _, m := range migrations[:2] {
			if err := m(tx); err != nil {
				return err
			}
		}
		sb, _ := tx.Bucket(bucketSessions).CreateBucket([]byte("s1"))
		put(sb, "contract", contract)
		put(sb, "registry", &cpv1.ToolRegistry{Fingerprint: "f"})
		sb.Put([]byte("agent_address"), []byte("127.0.0.1:7401"))
		sb.Put([]byte("runtime_id"), []byte("rt"))
		for i, id := range []string{"done", "running"} {
			pb, _ := tx.Bucket(bucketPlans).CreateBucket([]byte(id))
			rb, _ := pb.CreateBucket(bucketReceipts)
			state := cpv1.Plan_STATE_SUCCEEDED
			if id == "running" {
				state = cpv1.Plan_STATE_RUNNING
				tx.Bucket(bucketActive).Put(u64(uint64(i+1)), []byte(id))
			}
			put(pb, "plan", &cpv1.Plan{RequestId: id, SessionId: "s1", State: state, ReceiptCount: 1})
			put(pb, "request", &cpv1.SubmitPlanRequest{RequestId: id, SessionId: "s1", Operations: []*cpv1.Operation{{OperationId: "a"}}})
			pb.Put(keySchedule, []byte{0, 0, 0, 0})
			pb.Put(keyDigest, []byte("d-"+id))
			put(rb, string(u64(1)), &cpv1.Receipt{Sequence: 1, OperationId: "a"})
			seq, _ := tx.Bucket(bucketAudit).NextSequence()
			put(tx.Bucket(bucketAudit), string(u64(seq)), &cpv1.AuditRecord{Sequence: int64(seq), RequestId: id, BlenderMutationId: "mut-" + id})
			idx, _ := tx.Bucket(bucketAuditIdx).CreateBucket([]byte(id))
			idx.Put(u64(seq), nil)
		}
		return meta.Put(keySchemaVersion, u64(2))
	}); err != nil {
		t.Fatal(err)
	}
	db.Close()

	s, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	sess, err := s.Session("s1")
	if err != nil {
		t.Fatal(err)
	}
	if sess.Owner != LegacyOwner || sess.Info.GetAgentId() != "agent-1" || sess.Info.GetRuntimeId() != "rt" ||
		sess.Info.GetState() != cpv1.Session_STATE_OPEN || sess.Info.GetSceneHash() != "base" ||
		sess.Info.GetPlanCount() != 2 || sess.Info.GetActivePlanCount() != 1 || !proto.Equal(sess.Info.GetContract(), contract) {
		t.Fatalf("migrated session %+v", sess)
	}
	if reg, err := s.Registry("f"); err != nil || reg.GetFingerprint() != "f" {
		t.Fatalf("migrated registry: %v %v", reg, err)
	}
	if list, _, _ := s.ListSessions(LegacyOwner, 0, 10, func(Session) bool { return true }); len(list) != 1 {
		t.Fatalf("session order: %v", list)
	}
	for _, id := range []string{"done", "running"} {
		ref := PlanRef{LegacyOwner, id}
		p, err := s.Plan(ref)
		if err != nil || fmt.Sprint(p.GetSchedule()) != "[a]" {
			t.Fatalf("plan %s: %v %v", id, p, err)
		}
		if rs, err := s.Receipts(ref, 1, 10); err != nil || len(rs) != 1 {
			t.Fatalf("receipts of %s: %v %v", id, rs, err)
		}
		if recs, _, _ := s.AuditRecords(AuditFilter{Owner: LegacyOwner, RequestID: id}, 0, 10); len(recs) != 1 {
			t.Fatalf("audit of %s: %v", id, recs)
		}
		if _, err := s.CreatePlan(testPlan(LegacyOwner, id)); !errors.Is(err, ErrPlanExists) {
			t.Fatalf("request id %s free again after migration: %v", id, err)
		}
	}
	if refs, _ := s.ActivePlans(); fmt.Sprint(refs) != fmt.Sprint([]PlanRef{{LegacyOwner, "running"}}) {
		t.Fatalf("active plans %v", refs)
	}
	if recs, _, _ := s.AuditRecords(AuditFilter{Owner: LegacyOwner}, 0, 10); len(recs) != 2 {
		t.Fatalf("owner audit %v", recs)
	}
	// Schema 7 indexed the audit log by mutation id…
	if recs, _, err := s.AuditRecords(AuditFilter{MutationID: "mut-running"}, 0, 10); err != nil || len(recs) != 1 || recs[0].GetRequestId() != "running" {
		t.Fatalf("mutation index after migration: %v %v", recs, err)
	}
	// …and the plans by session (equal create times: by id).
	if list, next, err := s.SessionPlans("s1", "", 0, 10); err != nil || next != 0 || len(list) != 2 ||
		list[0].GetRequestId() != "running" || list[1].GetRequestId() != "done" || list[0].GetOwner() != LegacyOwner {
		t.Fatalf("session plans after migration: %v %d %v", list, next, err)
	}
}

// TestSessionPlans: a session's plans newest first, a page at a time, one
// owner's or everyone's; new plans after a page do not shift the next one.
func TestSessionPlans(t *testing.T) {
	s, _ := openTest(t)
	for _, ref := range []PlanRef{{"alice", "r1"}, {"bob", "b1"}, {"alice", "r2"}, {"alice", "r3"}, {"alice", "r4"}} {
		if _, err := s.CreatePlan(testPlan(ref.Owner, ref.RequestID)); err != nil {
			t.Fatal(err)
		}
	}
	page := func(owner string, before uint64, n int) ([]string, uint64) {
		t.Helper()
		list, next, err := s.SessionPlans("s1", owner, before, n)
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, p := range list {
			ids = append(ids, p.GetOwner()+"/"+p.GetRequestId())
		}
		return ids, next
	}
	first, next := page("alice", 0, 2)
	if fmt.Sprint(first) != "[alice/r4 alice/r3]" || next == 0 {
		t.Fatalf("first page %v next %d", first, next)
	}
	if _, err := s.CreatePlan(testPlan("alice", "r5")); err != nil {
		t.Fatal(err)
	}
	second, next := page("alice", next, 2)
	if fmt.Sprint(second) != "[alice/r2 alice/r1]" || next != 0 {
		t.Fatalf("second page %v next %d", second, next)
	}
	if all, _ := page("", 0, 10); fmt.Sprint(all) != "[alice/r5 alice/r4 alice/r3 alice/r2 bob/b1 alice/r1]" {
		t.Fatalf("everyone's: %v", all)
	}
	if none, _ := page("carol", 0, 10); len(none) != 0 {
		t.Fatalf("carol's: %v", none)
	}
	if list, _, err := s.SessionPlans("nope", "", 0, 10); err != nil || len(list) != 0 {
		t.Fatalf("unknown session: %v %v", list, err)
	}
}

func TestTokens(t *testing.T) {
	s, _ := openTest(t)
	for _, name := range []string{"carol", "alice", "bob"} {
		if err := s.PutToken(&cpv1.Token{Name: name, Scopes: []string{"plans"}}, "h-"+name); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.PutToken(&cpv1.Token{Name: "alice"}, "h-other"); !errors.Is(err, ErrTokenExists) {
		t.Fatalf("a second alice: %v", err)
	}
	if tok, err := s.TokenByHash("h-bob"); err != nil || tok.GetName() != "bob" {
		t.Fatalf("by hash: %v %v", tok, err)
	}
	if _, err := s.TokenByHash("h-nobody"); !errors.Is(err, ErrTokenNotFound) {
		t.Fatalf("unknown hash: %v", err)
	}
	revoked, err := s.RevokeToken("bob", "root", time.Unix(5000, 0))
	if err != nil || revoked.GetRevokeTime().AsTime().Unix() != 5000 {
		t.Fatalf("revoke: %v %v", revoked, err)
	}
	if again, _ := s.RevokeToken("bob", "root", time.Unix(6000, 0)); again.GetRevokeTime().AsTime().Unix() != 5000 {
		t.Fatalf("revoking again moved the time: %v", again)
	}
	if tok, _ := s.TokenByHash("h-bob"); tok.GetRevokeTime() == nil {
		t.Fatal("the revocation is not seen through the hash")
	}
	if _, err := s.RevokeToken("nobody", "root", time.Now()); !errors.Is(err, ErrTokenNotFound) {
		t.Fatalf("revoke unknown: %v", err)
	}
	var names []string
	after := ""
	for {
		page, next, err := s.ListTokens(after, 2)
		if err != nil {
			t.Fatal(err)
		}
		for _, tok := range page {
			names = append(names, tok.GetName())
		}
		if next == "" {
			break
		}
		after = next
	}
	if fmt.Sprint(names) != "[alice bob carol]" {
		t.Fatalf("tokens %v", names)
	}
}

// TestTokenEvents: creating a token (by someone), revoking it and deleting
// a policy rule are audit records of the principal who did it, naming what
// it acted on; a refused revocation is none.
func TestTokenEvents(t *testing.T) {
	s, _ := openTest(t)
	for _, tok := range []*cpv1.Token{{Name: "admin", Scopes: []string{"admin"}}, {Name: "ana", Scopes: []string{"plans"}, CreatedBy: "admin"}} {
		if err := s.PutToken(tok, "h-"+tok.GetName()); err != nil {
			t.Fatal(err)
		}
	}
	if tok, err := s.RevokeToken("ana", "admin", time.Unix(5000, 0)); err != nil || tok.GetRevokedBy() != "admin" {
		t.Fatalf("revoke: %v %v", tok, err)
	}
	s.RevokeToken("ana", "other", time.Unix(6000, 0)) // revoked already: no second record
	if _, err := s.RevokeToken("admin", "admin", time.Unix(6000, 0)); !errors.Is(err, ErrLastAdmin) {
		t.Fatalf("the last admin: %v", err)
	}
	recs, _, err := s.AuditRecords(AuditFilter{}, 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range recs {
		got = append(got, r.GetPrincipal()+" "+r.GetEvent()+" "+r.GetSubject())
	}
	if want := "[admin token.created ana admin token.revoked ana]"; fmt.Sprint(got) != want {
		t.Fatalf("audit %v, want %s", got, want)
	}
	if mine, _, err := s.AuditRecords(AuditFilter{Owner: "admin"}, 0, 100); err != nil || len(mine) != 2 {
		t.Fatalf("the admin's own records: %v %v", mine, err)
	}
}

// TestLastAdmin: the last usable admin token cannot be revoked (no one
// could create tokens again); with another usable one it can, and an
// expired or revoked one does not count.
func TestLastAdmin(t *testing.T) {
	s, _ := openTest(t)
	now := time.Unix(10000, 0)
	for _, tok := range []*cpv1.Token{
		{Name: "admin", Scopes: []string{"admin"}},
		{Name: "old", Scopes: []string{"admin"}, ExpireTime: timestamppb.New(now.Add(-time.Hour))},
		{Name: "ops", Scopes: []string{"admin"}},
	} {
		if err := s.PutToken(tok, "h-"+tok.GetName()); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.RevokeToken("admin", "root", now); err != nil {
		t.Fatalf("revoking an admin token beside another: %v", err)
	}
	if _, err := s.RevokeToken("ops", "root", now); !errors.Is(err, ErrLastAdmin) {
		t.Fatalf("revoking the last usable admin token (another expired, another revoked): %v", err)
	}
	if tok, _ := s.TokenByHash("h-ops"); tok.GetRevokeTime() != nil {
		t.Fatal("the refused revocation was stored")
	}
	if _, err := s.RevokeToken("old", "root", now); err != nil {
		t.Fatalf("revoking an expired admin token: %v", err)
	}
}

// An agent id belongs to the first principal that registers it; the
// heartbeats after that only read (no durable commit each second per agent).
func TestBindAgent(t *testing.T) {
	s, _ := openTest(t)
	if owner, err := s.BindAgent("a1", "alice"); err != nil || owner != "alice" {
		t.Fatalf("first: %q %v", owner, err)
	}
	before := s.Commits()
	for range 3 {
		if owner, err := s.BindAgent("a1", "mallory"); err != nil || owner != "alice" {
			t.Fatalf("again: %q %v", owner, err)
		}
	}
	if n := s.Commits() - before; n != 0 {
		t.Fatalf("a bound agent's registrations committed %d transactions", n)
	}
}

// The in-memory tail of the newest commit answers exactly what the
// database does, for every cursor, while tails are evicted under the
// memory budget.
func TestReceiptsTailMatchesDatabase(t *testing.T) {
	s, _ := openTest(t)
	if err := s.PutSession(testSession("alice", "s1"), testRegistry); err != nil {
		t.Fatal(err)
	}
	big := strings.Repeat("x", tailBudget/40) // twenty plans of these overflow the budget
	var refs []PlanRef
	for p := range 20 {
		ref := PlanRef{"alice", fmt.Sprintf("r%d", p)}
		refs = append(refs, ref)
		if _, err := s.CreatePlan(testPlan("alice", ref.RequestID)); err != nil {
			t.Fatal(err)
		}
		plan, _ := s.Plan(ref)
		seq := int64(0)
		for batch := range 3 {
			var rs []*cpv1.Receipt
			for range batch + 1 {
				seq++
				rs = append(rs, &cpv1.Receipt{Sequence: seq, OperationId: fmt.Sprintf("op%d", seq), McpCallId: big})
			}
			if err := s.Commit(ref, plan, rs); err != nil {
				t.Fatal(err)
			}
		}
	}
	if s.tailBytes > tailBudget || len(s.tails) == 0 || len(s.tails) == len(refs) {
		t.Fatalf("tails: %d plans, %d bytes (budget %d)", len(s.tails), s.tailBytes, tailBudget)
	}
	served := 0
	for _, ref := range refs {
		if _, ok := s.fromTail(ref, 4, 10); ok {
			served++
		}
		for from := int64(0); from <= 7; from++ {
			for _, limit := range []int{1, 2, 10} {
				want, err := s.readReceipts(ref, from, limit)
				if err != nil {
					t.Fatal(err)
				}
				got, err := s.Receipts(ref, from, limit)
				if err != nil {
					t.Fatal(err)
				}
				if !slices.Equal(seqs(got), seqs(want)) || len(want) != min(limit, max(0, 7-int(max(from, 1)))) {
					t.Fatalf("%s from %d limit %d: got %v, the database has %v", ref, from, limit, seqs(got), seqs(want))
				}
			}
		}
	}
	if served != len(s.tails) {
		t.Fatalf("%d plans served from %d tails", served, len(s.tails))
	}
	// A commit whose receipts are over the per-batch bound drops the plan's tail.
	ref := refs[len(refs)-1]
	plan, _ := s.Plan(ref)
	huge := strings.Repeat("y", tailBudget/4)
	if err := s.Commit(ref, plan, []*cpv1.Receipt{{Sequence: 7, McpCallId: huge}}); err != nil {
		t.Fatal(err)
	}
	if _, ok := s.tails[ref]; ok {
		t.Fatal("an over-sized batch was kept in memory")
	}
	if got, _ := s.Receipts(ref, 6, 10); !slices.Equal(seqs(got), []int64{6, 7}) {
		t.Fatalf("after the big commit: %v", seqs(got))
	}
}

func seqs(rs []*cpv1.Receipt) []int64 {
	out := make([]int64, len(rs))
	for i, r := range rs {
		out[i] = r.GetSequence()
	}
	return out
}

// A move raises the session's epoch; receipts of the older epoch are then
// refused inside the commit, and change nothing.
func TestEpochFencing(t *testing.T) {
	s, _ := openTest(t)
	if err := s.PutSession(testSession("alice", "s1"), testRegistry); err != nil {
		t.Fatal(err)
	}
	ref := PlanRef{"alice", "r1"}
	if _, err := s.CreatePlan(testPlan("alice", "r1")); err != nil {
		t.Fatal(err)
	}
	plan, _ := s.Plan(ref)
	if err := s.Commit(ref, plan, []*cpv1.Receipt{{Sequence: 1, OperationId: "a", SessionEpoch: 1, SceneHashAfter: "h1"}}); err != nil {
		t.Fatal(err)
	}
	if sess, _ := s.Session("s1"); sess.Info.GetEpoch() != 1 || sess.Rebuilt != 1 {
		t.Fatalf("a new session: epoch %d, rebuilt %d", sess.Info.GetEpoch(), sess.Rebuilt)
	}
	epoch, err := s.MoveSession("s1", "agent-b", "rt-b")
	if err != nil || epoch != 2 {
		t.Fatalf("move: %d %v", epoch, err)
	}
	err = s.Commit(ref, plan, []*cpv1.Receipt{{Sequence: 2, OperationId: "b", SessionEpoch: 1, SceneHashAfter: "stale"}})
	if !errors.Is(err, ErrStaleEpoch) {
		t.Fatalf("a receipt of the old epoch: %v", err)
	}
	sess, _ := s.Session("s1")
	if sess.Info.GetAgentId() != "agent-b" || sess.Info.GetEpoch() != 2 || sess.Rebuilt != 1 || sess.Info.GetSceneHash() != "h1" {
		t.Fatalf("after the move and the refused receipt: %v rebuilt %d", sess.Info, sess.Rebuilt)
	}
	if err := s.Commit(ref, plan, []*cpv1.Receipt{{Sequence: 2, OperationId: "b", SessionEpoch: 2, SceneHashAfter: "h2"}}); err != nil {
		t.Fatalf("a receipt of the new epoch: %v", err)
	}
	if err := s.MarkRebuilt("s1", 2); err != nil {
		t.Fatal(err)
	}
	if hist, _ := s.SessionHistory("s1", 0, 10); len(hist) != 2 || hist[1].GetSceneHashAfter() != "h2" {
		t.Fatalf("the session's log: %v", hist)
	}
	if old, err := s.SetCheckpoint("s1", SessionCheckpoint{SHA256: "x", SceneHash: "h1", After: 1}); old != nil || err != nil {
		t.Fatalf("first checkpoint: %v %v", old, err)
	}
	if old, _ := s.SetCheckpoint("s1", SessionCheckpoint{SHA256: "y", SceneHash: "h2", After: 2}); old == nil || old.SHA256 != "x" {
		t.Fatalf("replaced checkpoint: %v", old)
	}
	if err := s.MarkBroken("s1"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.MoveSession("s1", "agent-c", "rt-c"); !errors.Is(err, ErrSessionBroken) {
		t.Fatalf("moving a broken session: %v", err)
	}
}

// LastInHistory reads a session's log from its newest record back: it
// finds the newest match, in one page or many, and nothing of another
// session's log.
func TestLastInHistory(t *testing.T) {
	s, _ := openTest(t)
	for _, id := range []string{"s1", "s2"} {
		if err := s.PutSession(testSession("alice", id), testRegistry); err != nil {
			t.Fatal(err)
		}
	}
	commit := func(session, request string, hashes ...string) {
		t.Helper()
		np := testPlan("alice", request)
		np.Plan.SessionId, np.Request.SessionId = session, session
		if _, err := s.CreatePlan(np); err != nil {
			t.Fatal(err)
		}
		ref := PlanRef{"alice", request}
		plan, _ := s.Plan(ref)
		for i, h := range hashes {
			r := &cpv1.Receipt{Sequence: int64(i + 1), OperationId: request + string(rune('a'+i)), SceneHashAfter: h}
			if err := s.Commit(ref, plan, []*cpv1.Receipt{r}); err != nil {
				t.Fatal(err)
			}
		}
	}
	commit("s1", "r1", "h1", "h2", "h1", "h3")
	commit("s2", "r2", "h1") // newer than all of s1's
	commit("s1", "r3", "h4", "h5", "h6")
	after := func(h string) func(*cpv1.AuditRecord) bool {
		return func(rec *cpv1.AuditRecord) bool { return rec.GetSceneHashAfter() == h }
	}
	hist, err := s.SessionHistory("s1", 0, 100)
	if err != nil || len(hist) < 7 {
		t.Fatalf("s1's history: %v %v", hist, err)
	}
	var want int64 // the audit sequence of r1's third receipt
	for _, rec := range hist {
		if rec.GetOperationId() == "r1c" {
			want = rec.GetSequence()
		}
	}
	defer func(page int) { historyPage = page }(historyPage)
	for _, page := range []int{1000, 2, 1} {
		historyPage = page
		if rec, err := s.LastInHistory("s1", after("h1")); err != nil || rec.GetOperationId() != "r1c" || rec.GetSequence() != want {
			t.Fatalf("page %d: newest h1 of s1: %v %v (want sequence %d)", page, rec, err, want)
		}
		if rec, err := s.LastInHistory("s2", after("h1")); err != nil || rec.GetOperationId() != "r2a" {
			t.Fatalf("page %d: newest h1 of s2: %v %v", page, rec, err)
		}
		if rec, err := s.LastInHistory("s1", after("h7")); err != nil || rec != nil {
			t.Fatalf("page %d: no h7: %v %v", page, rec, err)
		}
		if rec, err := s.LastInHistory("nobody", after("h1")); err != nil || rec != nil {
			t.Fatalf("page %d: no session: %v %v", page, rec, err)
		}
		for _, want := range hist { // every record is reached, none skipped
			rec, err := s.LastInHistory("s1", func(rec *cpv1.AuditRecord) bool { return rec.GetSequence() == want.GetSequence() })
			if err != nil || rec == nil {
				t.Fatalf("page %d: record %d not reached: %v", page, want.GetSequence(), err)
			}
		}
	}
}

// TestPlacement: Placement reads what Session says of where a session
// runs, through a move, a rebuild, a break and a close.
func TestPlacement(t *testing.T) {
	s, _ := openTest(t)
	if err := s.PutSession(testSession("alice", "s1"), testRegistry); err != nil {
		t.Fatal(err)
	}
	check := func(what string) {
		t.Helper()
		sess, err := s.Session("s1")
		if err != nil {
			t.Fatal(err)
		}
		want := Placement{AgentID: sess.Info.GetAgentId(), Epoch: sess.Info.GetEpoch(), Rebuilt: sess.Rebuilt, State: sess.Info.GetState()}
		if got, err := s.Placement("s1"); err != nil || got != want {
			t.Fatalf("%s: Placement %+v, %v; Session says %+v", what, got, err, want)
		}
	}
	check("negotiated")
	if _, err := s.MoveSession("s1", "agent-b", "rt-b"); err != nil {
		t.Fatal(err)
	}
	check("moved")
	if err := s.MarkRebuilt("s1", 2); err != nil {
		t.Fatal(err)
	}
	check("rebuilt")
	if err := s.MarkBroken("s1"); err != nil {
		t.Fatal(err)
	}
	check("broken")
	if got, _ := s.Placement("s1"); got.AgentID != "agent-b" || got.Epoch != 2 || got.Rebuilt != 2 || got.State != cpv1.Session_STATE_BROKEN {
		t.Fatalf("broken after a move and a rebuild: %+v", got)
	}
	if err := s.PutSession(testSession("alice", "s2"), testRegistry); err != nil {
		t.Fatal(err)
	}
	if _, err := s.CloseSession("s2", time.Now()); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.Placement("s2"); got.State != cpv1.Session_STATE_CLOSED || got.AgentID != "agent-1" || got.Epoch != 1 || got.Rebuilt != 1 {
		t.Fatalf("closed: %+v", got)
	}
	if _, err := s.Placement("nope"); !errors.Is(err, ErrSessionNotFound) {
		t.Fatalf("an unknown session: %v", err)
	}
}

// TestTerms: Terms reads what Session's contract says of constraints and
// feature flags, also from a session whose contract was encoded in parts
// (which proto.Unmarshal merges); Checkpoint reads what Session's does.
func TestTerms(t *testing.T) {
	s, _ := openTest(t)
	sess := testSession("alice", "s1")
	sess.Info.Contract.Constraints = &cpv1.Constraints{ToolTimeBudgetMs: 2500, MaxMemoryMib: 1024, SafetyRails: []string{"headless"}}
	sess.Info.Contract.Capabilities = &cpv1.Capabilities{Tools: []string{"object.create", "object.delete"}, FeatureFlags: []string{"a", "progress_events"}}
	if err := s.PutSession(sess, testRegistry); err != nil {
		t.Fatal(err)
	}
	check := func(id string) {
		t.Helper()
		full, err := s.Session(id)
		if err != nil {
			t.Fatal(err)
		}
		got, err := s.Terms(id)
		if err != nil {
			t.Fatal(err)
		}
		c := full.Info.GetContract()
		if !proto.Equal(got.Constraints, c.GetConstraints()) || !slices.Equal(got.FeatureFlags, c.GetCapabilities().GetFeatureFlags()) {
			t.Fatalf("%s: Terms %v %q; Session says %v %q", id, got.Constraints, got.FeatureFlags, c.GetConstraints(), c.GetCapabilities().GetFeatureFlags())
		}
	}
	check("s1")

	// The same session stored as two encodings one after the other: the
	// second's scalars win, its lists add to the first's.
	if err := s.PutSession(testSession("alice", "s2"), testRegistry); err != nil {
		t.Fatal(err)
	}
	first, _ := proto.Marshal(&cpv1.Session{SessionId: "s2", Contract: &cpv1.SessionContract{
		Constraints:  &cpv1.Constraints{ToolTimeBudgetMs: 1000, MaxMemoryMib: 512},
		Capabilities: &cpv1.Capabilities{FeatureFlags: []string{"x"}}}})
	second, _ := proto.Marshal(&cpv1.Session{Contract: &cpv1.SessionContract{
		Constraints:  &cpv1.Constraints{ToolTimeBudgetMs: 3000},
		Capabilities: &cpv1.Capabilities{Tools: []string{"t"}, FeatureFlags: []string{"y"}}}})
	if err := s.db.Update(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketSessions).Bucket([]byte("s2")).Put(keySession, append(first, second...))
	}); err != nil {
		t.Fatal(err)
	}
	check("s2")
	if got, _ := s.Terms("s2"); got.Constraints.GetToolTimeBudgetMs() != 3000 || got.Constraints.GetMaxMemoryMib() != 512 || !slices.Equal(got.FeatureFlags, []string{"x", "y"}) {
		t.Fatalf("merged: %v %q", got.Constraints, got.FeatureFlags)
	}

	if cp, err := s.Checkpoint("s1"); err != nil || cp != nil {
		t.Fatalf("no checkpoint yet: %v, %v", cp, err)
	}
	want := SessionCheckpoint{SHA256: "abc", SceneHash: "h1", After: 7}
	if _, err := s.SetCheckpoint("s1", want); err != nil {
		t.Fatal(err)
	}
	if cp, err := s.Checkpoint("s1"); err != nil || cp == nil || *cp != want {
		t.Fatalf("Checkpoint %v, %v; want %v", cp, err, want)
	}
	for _, read := range []func(string) error{
		func(id string) error { _, err := s.Terms(id); return err },
		func(id string) error { _, err := s.Checkpoint(id); return err },
	} {
		if err := read("nope"); !errors.Is(err, ErrSessionNotFound) {
			t.Fatalf("an unknown session: %v", err)
		}
	}
}

// TestAppendedBucketsFillTheirPages: the buckets a plan's receipts append
// to (its receipts, the audit log, its indexes by plan, owner and session,
// the mutation tail) and a plan's policy records fill their pages before
// splitting them, as bbolt does with FillPercent 1; at its default every
// page stays about half empty.
func TestAppendedBucketsFillTheirPages(t *testing.T) {
	s, _ := openTest(t)
	if err := s.PutSession(testSession("alice", "s1"), testRegistry); err != nil {
		t.Fatal(err)
	}
	ref := PlanRef{"alice", "r1"}
	plan := startPlan(t, s, ref)
	seq := int64(0)
	for range 100 { // groups of 32, as the executor's committers write them
		var rs []*cpv1.Receipt
		for range 32 {
			seq++
			rs = append(rs, testReceipt(seq, "object.set_transform"))
		}
		if err := s.Commit(ref, plan, rs); err != nil {
			t.Fatal(err)
		}
	}
	// A plan's policy records, written once.
	big := testPlan("alice", "r2")
	big.Policy = map[string]OpPolicy{}
	for j := range 2000 {
		big.Policy[fmt.Sprintf("op-%05d", j)] = OpPolicy{Decision: "allow", InputHash: randomHex(32)}
	}
	if _, err := s.CreatePlan(big); err != nil {
		t.Fatal(err)
	}
	s.db.View(func(tx *bolt.Tx) error {
		for name, b := range map[string]*bolt.Bucket{
			"receipts":         tx.Bucket(bucketPlans).Bucket([]byte("alice")).Bucket([]byte("r1")).Bucket(bucketReceipts),
			"audit":            tx.Bucket(bucketAudit),
			"audit_by_plan":    tx.Bucket(bucketAuditIdx).Bucket([]byte("alice")).Bucket([]byte("r1")),
			"audit_by_owner":   tx.Bucket(bucketAuditOwner).Bucket([]byte("alice")),
			"audit_by_session": tx.Bucket(bucketAuditSession).Bucket([]byte("s1")),
			"mutation tail":    tx.Bucket(bucketMutationTail),
			"policy":           tx.Bucket(bucketPlans).Bucket([]byte("alice")).Bucket([]byte("r2")).Bucket(bucketPlanBody).Bucket(bucketOpPolicy),
		} {
			st := b.Stats()
			if fill := float64(st.LeafInuse) / float64(st.LeafAlloc); st.LeafPageN < 2 || fill < 0.85 {
				t.Errorf("%s: %d leaf pages %.0f %% full, want them filled (≥ 85 %%)", name, st.LeafPageN, 100*fill)
			}
		}
		return nil
	})
}

// TestDamagedSchedule: a stored schedule that names an operation the plan
// does not hold is an error, not a panic of the executor at every start.
func TestDamagedSchedule(t *testing.T) {
	s, _ := openTest(t)
	if err := s.PutSession(testSession("alice", "s1"), testRegistry); err != nil {
		t.Fatal(err)
	}
	ref := PlanRef{Owner: "alice", RequestID: "r1"}
	if _, err := s.CreatePlan(testPlan(ref.Owner, ref.RequestID)); err != nil {
		t.Fatal(err)
	}
	if err := s.db.Update(func(tx *bolt.Tx) error {
		b, err := planBucket(tx, ref)
		if err != nil {
			return err
		}
		return b.Bucket(bucketPlanBody).Put(keySchedule, []byte{0, 0, 0, 7})
	}); err != nil {
		t.Fatal(err)
	}
	if _, _, _, err := s.PlanWork(ref); err == nil || !strings.Contains(err.Error(), "damaged") {
		t.Fatalf("PlanWork of a damaged schedule: %v", err)
	}
	if _, err := s.Plan(ref); err == nil || !strings.Contains(err.Error(), "damaged") {
		t.Fatalf("Plan of a damaged schedule: %v", err)
	}
}
