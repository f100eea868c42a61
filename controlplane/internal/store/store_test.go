package store

import (
	"errors"
	"fmt"
	"path/filepath"
	"testing"

	bolt "go.etcd.io/bbolt"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

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

func testPlan(id string) NewPlan {
	args, _ := structpb.NewStruct(map[string]any{"type": "cube"})
	return NewPlan{
		Plan: &cpv1.Plan{RequestId: id, SessionId: "s1", State: cpv1.Plan_STATE_PENDING},
		Request: &cpv1.SubmitPlanRequest{SessionId: "s1", RequestId: id, Operations: []*cpv1.Operation{
			{OperationId: "b", ToolName: "object.create", Args: args},
			{OperationId: "a", ToolName: "object.create", Args: args},
		}},
		Schedule: []int{1, 0},
		Digest:   "d-" + id,
	}
}

func TestSessionRoundTrip(t *testing.T) {
	s, _ := openTest(t)
	in := Session{
		Contract:     &cpv1.SessionContract{SessionId: "s1", ContractVersion: "1.0.0"},
		AgentAddress: "127.0.0.1:7401",
		RuntimeID:    "rt",
		Registry:     &cpv1.ToolRegistry{Fingerprint: "f"},
	}
	if err := s.PutSession(in); err != nil {
		t.Fatal(err)
	}
	got, err := s.Session("s1")
	if err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(got.Contract, in.Contract) || got.AgentAddress != in.AgentAddress || got.RuntimeID != "rt" || got.Registry.GetFingerprint() != "f" {
		t.Fatalf("got %+v", got)
	}
	if _, err := s.Session("nope"); !errors.Is(err, ErrSessionNotFound) {
		t.Fatalf("missing session: %v", err)
	}
}

func TestPlanLifecycle(t *testing.T) {
	s, path := openTest(t)
	if _, err := s.CreatePlan(testPlan("r1")); err != nil {
		t.Fatal(err)
	}
	if d, err := s.CreatePlan(testPlan("r1")); !errors.Is(err, ErrPlanExists) || d != "d-r1" {
		t.Fatalf("duplicate create: %q %v", d, err)
	}
	plan, err := s.Plan("r1")
	if err != nil {
		t.Fatal(err)
	}
	if got := plan.GetSchedule(); len(got) != 2 || got[0] != "a" || got[1] != "b" {
		t.Fatalf("schedule %v", got)
	}
	if ids, _ := s.ActivePlans(); len(ids) != 1 || ids[0] != "r1" {
		t.Fatalf("active %v", ids)
	}

	watch := s.Watch("r1")
	plan.State = cpv1.Plan_STATE_RUNNING
	if err := s.Commit(plan, []*cpv1.Receipt{{Sequence: 1, OperationId: "a"}}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-watch:
	default:
		t.Fatal("watcher not woken by commit")
	}
	// A gap in the sequence is refused and changes nothing.
	if err := s.Commit(plan, []*cpv1.Receipt{{Sequence: 3}}); err == nil {
		t.Fatal("gap accepted")
	}
	plan.State = cpv1.Plan_STATE_SUCCEEDED
	if err := s.Commit(plan, []*cpv1.Receipt{{Sequence: 2, OperationId: "b"}}); err != nil {
		t.Fatal(err)
	}
	if ids, _ := s.ActivePlans(); len(ids) != 0 {
		t.Fatalf("terminal plan still active: %v", ids)
	}

	// Everything survives a reopen.
	s.Close()
	s2, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	st, err := s2.PlanState("r1")
	if err != nil || st.GetReceiptCount() != 2 || st.GetState() != cpv1.Plan_STATE_SUCCEEDED {
		t.Fatalf("after reopen: %v %v", st, err)
	}
	rs, err := s2.Receipts("r1", 2, 10)
	if err != nil || len(rs) != 1 || rs[0].GetOperationId() != "b" {
		t.Fatalf("receipts from 2: %v %v", rs, err)
	}
}

func TestRefusesNewerSchema(t *testing.T) {
	s, path := openTest(t)
	if err := s.db.Update(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketMeta).Put(keySchemaVersion, u64(schemaVersion+1))
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
	for _, id := range []string{"r1", "r2"} {
		if _, err := s.CreatePlan(testPlan(id)); err != nil {
			t.Fatal(err)
		}
	}
	p1, _ := s.Plan("r1")
	p2, _ := s.Plan("r2")
	// Interleave the two plans' receipts in the global log.
	for seq := int64(1); seq <= 3; seq++ {
		for _, p := range []*cpv1.Plan{p1, p2} {
			if err := s.Commit(p, []*cpv1.Receipt{{Sequence: seq, OperationId: fmt.Sprint("op", seq), McpCallId: "c"}}); err != nil {
				t.Fatal(err)
			}
		}
	}
	all, next, err := s.AuditRecords("", 0, 100)
	if err != nil || len(all) != 6 || next != 0 {
		t.Fatalf("all: %d records, next %d, %v", len(all), next, err)
	}
	var got []string
	var after uint64
	for {
		page, next, err := s.AuditRecords("r2", after, 2)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range page {
			if r.GetRequestId() != "r2" || r.GetSessionId() != "s1" || r.GetTimestamp() == nil {
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
		t.Fatalf("paged r2 records %v", got)
	}
}

// TestMigratesSchema1 opens a database as the first release wrote it (no
// audit buckets) and checks that it is upgraded and keeps its plans.
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
	if _, err := s.CreatePlan(testPlan("r1")); err != nil {
		t.Fatal(err)
	}
	p, _ := s.Plan("r1")
	if err := s.Commit(p, []*cpv1.Receipt{{Sequence: 1}}); err != nil {
		t.Fatalf("commit after migration: %v", err)
	}
	if recs, _, _ := s.AuditRecords("r1", 0, 10); len(recs) != 1 {
		t.Fatalf("audit after migration: %v", recs)
	}
}
