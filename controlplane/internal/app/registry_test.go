package app

import (
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/structpb"

	"github.com/blendplane/blendplane/controlplane/internal/plan"
	"github.com/blendplane/blendplane/controlplane/internal/store"
	cpv1 "github.com/blendplane/blendplane/gen/blendplane/controlplane/v1"
)

// TestRegistriesCompileOnce: a registry is compiled once per fingerprint,
// a broken one too (its error is kept, not recompiled at every heartbeat),
// and a slow compile holds up no other registry.
func TestRegistriesCompileOnce(t *testing.T) {
	r := newRegistries(slog.New(slog.DiscardHandler))
	var compiles atomic.Int32
	release := make(chan struct{})
	r.compile = func(tr *cpv1.ToolRegistry) (*plan.Registry, error) {
		compiles.Add(1)
		switch tr.GetFingerprint() {
		case "slow":
			<-release
		case "broken":
			return nil, errors.New("bad schema")
		}
		return plan.NewRegistry(nil)
	}
	go r.get("slow", known(&cpv1.ToolRegistry{Fingerprint: "slow"}))
	done := make(chan error)
	go func() {
		_, err := r.get("fast", known(&cpv1.ToolRegistry{Fingerprint: "fast"}))
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a slow compile of another registry held this one up")
	}
	close(release)
	for i := 0; i < 5; i++ { // heartbeats
		if _, err := r.get("broken", known(&cpv1.ToolRegistry{Fingerprint: "broken"})); !errors.Is(err, ErrRegistryInvalid) {
			t.Fatalf("broken registry: %v", err)
		}
		if _, err := r.get("slow", known(&cpv1.ToolRegistry{Fingerprint: "slow"})); err != nil {
			t.Fatal(err)
		}
	}
	if n := compiles.Load(); n != 3 {
		t.Fatalf("%d compiles for 3 registries", n)
	}
}

// TestRegistryLoadedAgain: a registry the store could not read is read
// again at the next get, not refused for good.
func TestRegistryLoadedAgain(t *testing.T) {
	r := newRegistries(slog.New(slog.DiscardHandler))
	r.compile = func(*cpv1.ToolRegistry) (*plan.Registry, error) { return plan.NewRegistry(nil) }
	reads := 0
	load := func() (*cpv1.ToolRegistry, error) {
		reads++
		if reads == 1 {
			return nil, errors.New("store: read failed")
		}
		return &cpv1.ToolRegistry{Fingerprint: "fp"}, nil
	}
	if _, err := r.get("fp", load); err == nil {
		t.Fatal("a failed read gave a registry")
	}
	if reg, err := r.get("fp", load); err != nil || reg == nil || reads != 2 {
		t.Fatalf("the next get: %v %v, %d reads", reg, err, reads)
	}
	if _, err := r.get("fp", load); err != nil || reads != 2 {
		t.Fatalf("once read, kept: %v, %d reads", err, reads)
	}
}

func FuzzPageToken(f *testing.F) {
	f.Add(encodePageToken("audit", 42, "r1"), "audit", "r1")
	f.Add(encodePageToken("sessions", 7, ""), "sessions", "")
	f.Add("djE6eDpy", "audit", "r")
	f.Add("", "artifacts", "x")
	f.Fuzz(func(t *testing.T, token, kind, query string) {
		after, err := decodePageToken(token, kind, query)
		if err != nil {
			if !errors.Is(err, ErrBadPageToken) {
				t.Fatalf("error %v is not ErrBadPageToken", err)
			}
			return
		}
		if token == "" {
			if after != 0 {
				t.Fatalf("empty token decoded to %d", after)
			}
			return
		}
		again, err := decodePageToken(encodePageToken(kind, after, query), kind, query)
		if err != nil || again != after {
			t.Fatalf("token %q decoded to %d but does not round trip: %d %v", token, after, again, err)
		}
	})
}

// TestRegistriesBounded: registries made up by registrations do not grow
// the cache without bound; the ones in use stay.
func TestRegistriesBounded(t *testing.T) {
	r := newRegistries(slog.New(slog.DiscardHandler))
	var compiles atomic.Int32
	r.compile = func(*cpv1.ToolRegistry) (*plan.Registry, error) {
		compiles.Add(1)
		return plan.NewRegistry(nil)
	}
	for i := 0; i < 10*maxRegistries; i++ {
		fp := fmt.Sprint("made-up-", i)
		r.get(fp, known(&cpv1.ToolRegistry{Fingerprint: fp}))
		r.get("real", known(&cpv1.ToolRegistry{Fingerprint: "real"}))
	}
	if n := len(r.byFP); n > maxRegistries {
		t.Fatalf("%d registries kept, at most %d", n, maxRegistries)
	}
	if _, ok := r.byFP["real"]; !ok {
		t.Fatal("the registry in use was dropped")
	}
	if n := compiles.Load(); n != 10*maxRegistries+1 {
		t.Fatalf("%d compiles: the registry in use was compiled again", n)
	}
}

// split covers the range exactly, in order, in nearly equal parts.
func TestSplit(t *testing.T) {
	for _, tc := range []struct {
		first, last, n int
		want           []frameRange
	}{
		{1, 10, 3, []frameRange{{1, 4}, {5, 7}, {8, 10}}},
		{5, 6, 3, []frameRange{{5, 5}, {6, 6}}},
		{0, 0, 2, []frameRange{{0, 0}}},
		{1, 4, 0, []frameRange{{1, 4}}},
	} {
		if got := split(tc.first, tc.last, tc.n); !slices.Equal(got, tc.want) {
			t.Errorf("split(%d, %d, %d) = %v, want %v", tc.first, tc.last, tc.n, got, tc.want)
		}
	}
}

// The redo log holds what changed the scene: committed operations (an
// operation whose only committed receipt is SKIPPED_IDEMPOTENT included)
// and rollbacks; not reads, failures or approval events.
func TestChangesScene(t *testing.T) {
	rec := func(st cpv1.Receipt_Status, before, after, event string) *cpv1.AuditRecord {
		return &cpv1.AuditRecord{Status: st, SceneHashBefore: before, SceneHashAfter: after, Event: event}
	}
	for _, tc := range []struct {
		rec  *cpv1.AuditRecord
		want bool
	}{
		{rec(cpv1.Receipt_STATUS_SUCCEEDED, "a", "b", ""), true},
		{rec(cpv1.Receipt_STATUS_SKIPPED_IDEMPOTENT, "a", "b", ""), true},
		{rec(cpv1.Receipt_STATUS_ROLLED_BACK, "b", "a", ""), true},
		{rec(cpv1.Receipt_STATUS_SUCCEEDED, "a", "a", ""), false},
		{rec(cpv1.Receipt_STATUS_FAILED, "a", "b", ""), false},
		{rec(cpv1.Receipt_STATUS_NOT_RUN, "", "", ""), false},
		{rec(cpv1.Receipt_STATUS_UNSPECIFIED, "", "", "approved"), false},
	} {
		if got := changesScene(tc.rec); got != tc.want {
			t.Errorf("changesScene(%v) = %v, want %v", tc.rec, got, tc.want)
		}
	}
}

// The redo log's positions: logPosition finds the last record that left a
// scene hash; a rollback after a checkpoint's position forces a whole
// replay; an unfinished atomic plan with committed operations does too.
func TestRedoLogPositions(t *testing.T) {
	a := newTestApp(t)
	ref := store.PlanRef{Owner: "alice", RequestID: "r1"}
	args, _ := structpb.NewStruct(map[string]any{"type": "cube"})
	plan := &cpv1.Plan{RequestId: "r1", SessionId: "s1", State: cpv1.Plan_STATE_PENDING, Atomic: true}
	if _, err := a.store.CreatePlan(store.NewPlan{Owner: "alice", Plan: plan, Digest: "d",
		Request: &cpv1.SubmitPlanRequest{SessionId: "s1", RequestId: "r1", Atomic: true, Operations: []*cpv1.Operation{
			{OperationId: "a", ToolName: "object.create", Args: args}, {OperationId: "b", ToolName: "object.create", Args: args}}},
		Schedule: []int{0, 1}}); err != nil {
		t.Fatal(err)
	}
	if a.undoPending("s1") {
		t.Fatal("undo pending before anything committed")
	}
	plan.State = cpv1.Plan_STATE_RUNNING
	commit := func(seq int64, op string, st cpv1.Receipt_Status, before, after string) {
		t.Helper()
		if err := a.store.Commit(ref, plan, []*cpv1.Receipt{{Sequence: seq, OperationId: op, Status: st, SceneHashBefore: before, SceneHashAfter: after}}); err != nil {
			t.Fatal(err)
		}
	}
	commit(1, "a", cpv1.Receipt_STATUS_SUCCEEDED, "h0", "h1")
	commit(2, "b", cpv1.Receipt_STATUS_SUCCEEDED, "h1", "h2")
	if !a.undoPending("s1") {
		t.Fatal("an unfinished atomic plan with committed operations: undo may be needed")
	}
	after, found, err := a.logPosition("s1", "h1")
	if err != nil || !found || after != 1 {
		t.Fatalf("position of h1: %d %v %v", after, found, err)
	}
	if _, found, _ := a.logPosition("s1", "h9"); found {
		t.Fatal("a hash the log never reached was found")
	}
	if a.rolledBackAfter("s1", 1) {
		t.Fatal("no rollback yet")
	}
	commit(3, "b", cpv1.Receipt_STATUS_ROLLED_BACK, "h2", "h1")
	if !a.rolledBackAfter("s1", 1) || a.rolledBackAfter("s1", 3) {
		t.Fatal("a rollback after position 1 is not seen, or one is seen after 3")
	}
	if after, _, _ := a.logPosition("s1", "h1"); after != 3 {
		t.Fatalf("the last record leaving h1 is 3, got %d", after)
	}
}

// TestRegistryCompilePanics: a compiler's panic on a registry is that
// registry's error, every time; it took the control plane down (a
// registration compiles on a goroutine of its own).
func TestRegistryCompilePanics(t *testing.T) {
	r := newRegistries(slog.New(slog.DiscardHandler))
	r.compile = func(*cpv1.ToolRegistry) (*plan.Registry, error) { panic("a validator's bug") }
	for range 2 {
		if reg, err := r.get("fp", known(&cpv1.ToolRegistry{Fingerprint: "fp"})); reg != nil || !errors.Is(err, ErrRegistryInvalid) {
			t.Fatalf("a registry whose compile panics: %v %v", reg, err)
		}
	}
}
