package journal

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	bolt "go.etcd.io/bbolt"
	"google.golang.org/protobuf/proto"

	cpv1 "github.com/blendplane/blendplane/gen/blendplane/controlplane/v1"
	"github.com/blendplane/blendplane/internal/jsontest"
)

func open(t *testing.T, path string) *Journal {
	t.Helper()
	j, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	return j
}

func TestRedoLogSurvivesReopen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "agentd.db")
	j := open(t, path)
	id, err := j.AgentID()
	if err != nil || id == "" {
		t.Fatalf("agent id %q: %v", id, err)
	}
	if err := j.Commit("s1", nil); !errors.Is(err, ErrSessionNotFound) {
		t.Fatalf("commit to unknown session: %v", err)
	}
	if err := j.OpenSession("s1", "rt", "h0", Limits{}, 0); err != nil {
		t.Fatal(err)
	}
	if err := j.Intend("s1", []string{"k1", "k2", "k3"}); err != nil {
		t.Fatal(err)
	}
	err = j.Commit("s1", []Commit{
		{Receipt: &cpv1.Receipt{IdempotencyKey: "k1", BlenderMutationId: "m1"}, Undo: json.RawMessage(`{"op":"delete"}`),
			Entry: &Entry{Kind: "op", Key: "k1", Tool: "object.create", Args: map[string]any{"type": "cube"}, HashAfter: "h1"}},
		{Receipt: &cpv1.Receipt{IdempotencyKey: "k2"}}, // read-only: no entry
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := j.CommitUndo("s1", "k1", "h0"); err != nil {
		t.Fatal(err)
	}
	j.Close()

	j = open(t, path)
	defer j.Close()
	if again, _ := j.AgentID(); again != id {
		t.Fatalf("agent id not kept: %s → %s", id, again)
	}
	s, err := j.Session("s1")
	if err != nil || s.Head != 2 || s.HeadHash != "h0" || s.Checkpoint != nil {
		t.Fatalf("session %+v %v", s, err)
	}
	if keys, _ := j.Intents("s1"); len(keys) != 1 || keys[0] != "k3" {
		t.Fatalf("uncommitted intents %v, want [k3]", keys)
	}
	entries, err := j.Entries("s1", 0)
	if err != nil || len(entries) != 2 || entries[0].Kind != "op" || entries[0].Args["type"] != "cube" || entries[1].Kind != "undo" {
		t.Fatalf("entries %+v %v", entries, err)
	}
	rec, err := j.Lookup("s1", "k1")
	if err != nil || rec.Receipt.GetBlenderMutationId() != "m1" || !rec.RolledBack || rec.LogIndex != 1 || string(rec.Undo) != `{"op":"delete"}` {
		t.Fatalf("record %+v %v", rec, err)
	}
	if rec, err := j.Lookup("s1", "nope"); rec != nil || err != nil {
		t.Fatalf("unknown key: %v %v", rec, err)
	}

	// A checkpoint drops the entries it contains.
	if err := j.SetCheckpoint("s1", Checkpoint{Path: "/x.blend", Index: 1, SceneHash: "h1"}); err != nil {
		t.Fatal(err)
	}
	if entries, _ := j.Entries("s1", 0); len(entries) != 1 || entries[0].Kind != "undo" {
		t.Fatalf("after checkpoint: %+v", entries)
	}
	if s, _ := j.Session("s1"); s.Checkpoint == nil || s.Checkpoint.Index != 1 {
		t.Fatalf("checkpoint %+v", s.Checkpoint)
	}
	if all, _ := j.Sessions(); len(all) != 1 {
		t.Fatalf("sessions %v", all)
	}
	if err := j.CloseSession("s1"); err != nil {
		t.Fatal(err)
	}
	if _, err := j.Session("s1"); !errors.Is(err, ErrSessionNotFound) {
		t.Fatalf("closed session: %v", err)
	}
}

func TestRefusesNewerSchema(t *testing.T) {
	path := filepath.Join(t.TempDir(), "agentd.db")
	j := open(t, path)
	j.db.Update(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketMeta).Put(keySchemaVersion, u64(99))
	})
	j.Close()
	if _, err := Open(path); err == nil {
		t.Fatal("opened a journal from a newer schema")
	}
}

// Fence keeps the newest epoch durably and refuses older ones; 0 is not
// checked.
func TestFence(t *testing.T) {
	path := filepath.Join(t.TempDir(), "agentd.db")
	j := open(t, path)
	if err := j.OpenSession("s1", "rt", "h0", Limits{}, 2); err != nil {
		t.Fatal(err)
	}
	for _, e := range []int64{0, 2, 3} {
		if err := j.Fence("s1", e); err != nil {
			t.Fatalf("epoch %d: %v", e, err)
		}
	}
	j.Close()
	j = open(t, path)
	defer j.Close()
	if s, _ := j.Session("s1"); s.Epoch != 3 {
		t.Fatalf("epoch after reopen: %d", s.Epoch)
	}
	if err := j.Fence("s1", 2); !errors.Is(err, ErrStaleEpoch) {
		t.Fatalf("older epoch: %v", err)
	}
	if err := j.Fence("nope", 1); !errors.Is(err, ErrSessionNotFound) {
		t.Fatalf("unknown session: %v", err)
	}
}

// TestMigratesJSONRecords: a schema 2 journal's records (JSON, the receipt's
// protobuf in base64) read the same after the move to protobuf records.
func TestMigratesJSONRecords(t *testing.T) {
	path := filepath.Join(t.TempDir(), "agentd.db")
	j := open(t, path)
	if err := j.OpenSession("s1", "rt", "h0", Limits{}, 0); err != nil {
		t.Fatal(err)
	}
	receipt, err := proto.Marshal(&cpv1.Receipt{IdempotencyKey: "k1", BlenderMutationId: "m1", SceneHashAfter: "h1"})
	if err != nil {
		t.Fatal(err)
	}
	old := map[string]any{"receipt": receipt, "undo": json.RawMessage(`{"v":1,"tool":"object.create"}`), "log_index": 7, "rolled_back": true}
	raw, _ := json.Marshal(old)
	plain, _ := json.Marshal(map[string]any{"receipt": receipt}) // a read-only call's record
	j.db.Update(func(tx *bolt.Tx) error {
		ops, _ := tx.Bucket(bucketSessions).Bucket([]byte("s1")).CreateBucketIfNotExists(bucketOps)
		ops.Put([]byte("k1"), raw)
		ops.Put([]byte("k2"), plain)
		return tx.Bucket(bucketMeta).Put(keySchemaVersion, u64(2))
	})
	j.Close()

	j = open(t, path)
	defer j.Close()
	rec, err := j.Lookup("s1", "k1")
	if err != nil || rec.Receipt.GetBlenderMutationId() != "m1" || rec.Receipt.GetSceneHashAfter() != "h1" ||
		!rec.RolledBack || rec.LogIndex != 7 || string(rec.Undo) != `{"v":1,"tool":"object.create"}` {
		t.Fatalf("migrated record %+v %v", rec, err)
	}
	rec, err = j.Lookup("s1", "k2")
	if err != nil || rec.Receipt.GetIdempotencyKey() != "k1" || rec.RolledBack || rec.LogIndex != 0 || rec.Undo != nil {
		t.Fatalf("migrated record without undo %+v %v", rec, err)
	}
	var version uint64
	j.db.View(func(tx *bolt.Tx) error {
		version = binary.BigEndian.Uint64(tx.Bucket(bucketMeta).Get(keySchemaVersion))
		return nil
	})
	if version != uint64(len(migrations)) {
		t.Fatalf("schema version %d after migration, want %d", version, len(migrations))
	}
}

// journalOps commits n operations to session s of j, one entry each, in
// groups of 100.
func journalOps(tb testing.TB, j *Journal, s string, n int) {
	tb.Helper()
	for lo := 0; lo < n; lo += 100 {
		var cs []Commit
		for i := lo; i < min(n, lo+100); i++ {
			k := fmt.Sprintf("k%06d", i)
			cs = append(cs, Commit{Receipt: &cpv1.Receipt{IdempotencyKey: k, BlenderMutationId: "m" + k},
				Entry: &Entry{Kind: "op", Key: k, Tool: "object.set_transform", Args: map[string]any{"name": "Cube"}, HashAfter: "h" + k}})
		}
		if err := j.Commit(s, cs); err != nil {
			tb.Fatal(err)
		}
	}
}

// TestCheckpointDropsCovered: a checkpoint drops exactly the entries it
// covers, however many leaves of the log they fill, and keeps the rest.
func TestCheckpointDropsCovered(t *testing.T) {
	j := open(t, filepath.Join(t.TempDir(), "agentd.db"))
	defer j.Close()
	if err := j.OpenSession("s1", "rt", "h0", Limits{}, 0); err != nil {
		t.Fatal(err)
	}
	journalOps(t, j, "s1", 2500)
	for _, at := range []uint64{1700, 1700, 2500} {
		if err := j.SetCheckpoint("s1", Checkpoint{Path: "/x.blend", Index: at, SceneHash: "h"}); err != nil {
			t.Fatal(err)
		}
		entries, err := j.Entries("s1", 0)
		if err != nil || len(entries) != 2500-int(at) {
			t.Fatalf("checkpoint at %d: %d entries left, %v", at, len(entries), err)
		}
		if len(entries) > 0 && entries[0].Key != fmt.Sprintf("k%06d", at) {
			t.Fatalf("checkpoint at %d: the first left is %s", at, entries[0].Key)
		}
	}
}

// BenchmarkCheckpointDrop: a checkpoint that drops 10,000 entries (an idle
// checkpoint after a session built 10,000 objects).
func BenchmarkCheckpointDrop(b *testing.B) {
	for b.Loop() {
		b.StopTimer()
		j, err := Open(filepath.Join(b.TempDir(), "agentd.db"))
		if err != nil {
			b.Fatal(err)
		}
		if err := j.OpenSession("s1", "rt", "h0", Limits{}, 0); err != nil {
			b.Fatal(err)
		}
		journalOps(b, j, "s1", 10000)
		b.StartTimer()
		if err := j.SetCheckpoint("s1", Checkpoint{Path: "/x.blend", Index: 10000, SceneHash: "h"}); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		j.Close()
		b.StartTimer()
	}
}

// TestLogFillsItsPages: the redo log and the records, whose keys only grow,
// fill their pages before splitting them (bbolt's default leaves every page
// half empty).
func TestLogFillsItsPages(t *testing.T) {
	j := open(t, filepath.Join(t.TempDir(), "agentd.db"))
	defer j.Close()
	if err := j.OpenSession("s1", "rt", "h0", Limits{}, 0); err != nil {
		t.Fatal(err)
	}
	for g := range 100 { // groups of 32, as the session manager commits them
		commits := make([]Commit, 32)
		for i := range commits {
			k := fmt.Sprintf("k%05d", g*32+i)
			commits[i] = Commit{Receipt: &cpv1.Receipt{IdempotencyKey: k}, Undo: json.RawMessage(`{"object":"P00001","location":[1,2,3]}`),
				Entry: &Entry{Kind: "op", Key: k, Tool: "object.set_transform", Args: map[string]any{"name": "P00001", "location": []any{1.0, 2.0, 3.0}}, HashAfter: k}}
		}
		if err := j.Commit("s1", commits); err != nil {
			t.Fatal(err)
		}
	}
	j.db.View(func(tx *bolt.Tx) error {
		for _, name := range [][]byte{bucketLog, bucketRecords} {
			st := tx.Bucket(bucketSessions).Bucket([]byte("s1")).Bucket(name).Stats()
			if fill := float64(st.LeafInuse) / float64(st.LeafAlloc); st.LeafPageN < 2 || fill < 0.85 {
				t.Errorf("%s: %d leaf pages %.0f %% full, want them filled (≥ 85 %%)", name, st.LeafPageN, 100*fill)
			}
		}
		return nil
	})
}

// TestRecordsFoundByKey: records are appended in commit order and found by
// idempotency key, after a reopen too; a key committed again replaces its
// record in place; a closed session's keys are gone with it.
func TestRecordsFoundByKey(t *testing.T) {
	path := filepath.Join(t.TempDir(), "agentd.db")
	j := open(t, path)
	if err := j.OpenSession("s1", "rt", "h0", Limits{}, 0); err != nil {
		t.Fatal(err)
	}
	if err := j.OpenSession("s2", "rt", "h0", Limits{}, 0); err != nil {
		t.Fatal(err)
	}
	journalOps(t, j, "s1", 250)
	again := []Commit{{Receipt: &cpv1.Receipt{IdempotencyKey: "k000007", BlenderMutationId: "again"}}}
	if err := j.Commit("s1", again); err != nil {
		t.Fatal(err)
	}
	if err := j.Commit("s2", []Commit{{Receipt: &cpv1.Receipt{IdempotencyKey: "k000001", BlenderMutationId: "s2"}}}); err != nil {
		t.Fatal(err)
	}
	mutation := func(rec *Record) string {
		if rec == nil {
			return ""
		}
		return rec.Receipt.GetBlenderMutationId()
	}
	records := 250
	check := func(when string) {
		t.Helper()
		keys := []string{"k000000", "k000007", "k000249", "k000250", "nope"}
		recs, err := j.LookupAll("s1", keys)
		if err != nil {
			t.Fatalf("%s: %v", when, err)
		}
		want := []string{"mk000000", "again", "mk000249", "", ""}
		for i, rec := range recs {
			if got := mutation(rec); got != want[i] {
				t.Errorf("%s: %s's record has mutation %q, want %q", when, keys[i], got, want[i])
			}
		}
		if rec, _ := j.Lookup("s2", "k000001"); mutation(rec) != "s2" {
			t.Errorf("%s: s2's k000001 is %+v", when, rec)
		}
		var n int
		j.db.View(func(tx *bolt.Tx) error {
			n = tx.Bucket(bucketSessions).Bucket([]byte("s1")).Bucket(bucketRecords).Stats().KeyN
			return nil
		})
		if n != records {
			t.Errorf("%s: s1 holds %d records, want %d", when, n, records)
		}
	}
	check("before reopen")

	// The index may point a key at another's record (a commit that failed
	// left it, and its sequence went to the next): readers see no record,
	// and committing the key appends it rather than overwrite the other.
	j.index["s1"].byHash[hashKey("ghost")] = 3
	if rec, err := j.Lookup("s1", "ghost"); rec != nil || err != nil {
		t.Fatalf("a stale index entry reads another key's record: %+v %v", rec, err)
	}
	if err := j.Commit("s1", []Commit{{Receipt: &cpv1.Receipt{IdempotencyKey: "ghost", BlenderMutationId: "ghost"}}}); err != nil {
		t.Fatal(err)
	}
	if rec, _ := j.Lookup("s1", "k000002"); mutation(rec) != "mk000002" {
		t.Fatalf("committing over a stale index entry overwrote k000002: %+v", rec)
	}
	if rec, _ := j.Lookup("s1", "ghost"); mutation(rec) != "ghost" {
		t.Fatalf("ghost: %+v", rec)
	}
	records++
	j.Close()
	j = open(t, path)
	defer j.Close()
	check("after reopen")

	if err := j.CloseSession("s1"); err != nil {
		t.Fatal(err)
	}
	if err := j.OpenSession("s1", "rt", "h0", Limits{}, 0); err != nil {
		t.Fatal(err)
	}
	if rec, err := j.Lookup("s1", "k000000"); rec != nil || err != nil {
		t.Fatalf("a reopened session finds a closed one's record: %+v %v", rec, err)
	}
	if err := j.CommitUndo("s1", "k000000", "h"); err == nil {
		t.Fatal("undo of an operation the session never ran")
	}
}

// TestEntriesFindTheirRecords: whoever reads a log entry finds its record,
// while commits go on (a refresh or a recovery replays entries by their
// records).
func TestEntriesFindTheirRecords(t *testing.T) {
	j := open(t, filepath.Join(t.TempDir(), "agentd.db"))
	defer j.Close()
	if err := j.OpenSession("s1", "rt", "h0", Limits{}, 0); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		for g := range 200 {
			k := fmt.Sprintf("k%06d", g)
			err := j.Commit("s1", []Commit{{Receipt: &cpv1.Receipt{IdempotencyKey: k},
				Entry: &Entry{Kind: "op", Key: k, Tool: "object.create", HashAfter: k}}})
			if err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	for {
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
			return
		default:
		}
		entries, err := j.Entries("s1", 0)
		if err != nil {
			t.Fatal(err)
		}
		if len(entries) == 0 {
			continue
		}
		last := entries[len(entries)-1]
		if rec, err := j.Lookup("s1", last.Key); rec == nil || err != nil {
			t.Fatalf("entry %s has no record: %v", last.Key, err)
		}
	}
}

// TestFailedCommitKeepsRecords: a commit that fails changes nothing, not
// even what a key committed before reads; an operation without a key is
// refused, and the journal still opens.
func TestFailedCommitKeepsRecords(t *testing.T) {
	path := filepath.Join(t.TempDir(), "agentd.db")
	j := open(t, path)
	if err := j.OpenSession("s1", "rt", "h0", Limits{}, 0); err != nil {
		t.Fatal(err)
	}
	if err := j.Commit("s1", []Commit{{Receipt: &cpv1.Receipt{IdempotencyKey: "k1", BlenderMutationId: "m1"}}}); err != nil {
		t.Fatal(err)
	}
	err := j.Commit("s1", []Commit{
		{Receipt: &cpv1.Receipt{IdempotencyKey: "k1", BlenderMutationId: "again"}},
		{Receipt: &cpv1.Receipt{IdempotencyKey: "k2"}, Entry: &Entry{Kind: "op", Key: "k2", Args: map[string]any{"x": math.NaN()}}},
	})
	if err == nil {
		t.Fatal("an entry JSON cannot hold was journaled")
	}
	if err := j.Commit("s1", []Commit{{Receipt: &cpv1.Receipt{OperationId: "op-1"}}}); err == nil {
		t.Fatal("an operation without an idempotency key was journaled")
	}
	check := func(when string) {
		t.Helper()
		recs, err := j.LookupAll("s1", []string{"k1", "k2"})
		if err != nil || recs[0] == nil || recs[0].Receipt.GetBlenderMutationId() != "m1" || recs[1] != nil {
			t.Fatalf("%s: k1 %+v, k2 %+v, %v; want k1's first record and no k2", when, recs[0], recs[1], err)
		}
		if s, _ := j.Session("s1"); s.Head != 0 {
			t.Fatalf("%s: head %d, want 0", when, s.Head)
		}
	}
	check("after the failed commits")
	j.Close()
	j = open(t, path)
	defer j.Close()
	check("after reopen")
	if err := j.Commit("s1", []Commit{{Receipt: &cpv1.Receipt{IdempotencyKey: "k2", BlenderMutationId: "m2"}}}); err != nil {
		t.Fatal(err)
	}
	if rec, _ := j.Lookup("s1", "k2"); rec == nil || rec.Receipt.GetBlenderMutationId() != "m2" {
		t.Fatalf("k2 after its commit: %+v", rec)
	}
}

// TestMigratesKeyedRecords: a schema 3 journal's records, keyed by
// idempotency key, read the same from their sequences; the keyed bucket is
// gone and new records follow the migrated ones.
func TestMigratesKeyedRecords(t *testing.T) {
	path := filepath.Join(t.TempDir(), "agentd.db")
	j := open(t, path)
	if err := j.OpenSession("s1", "rt", "h0", Limits{}, 0); err != nil {
		t.Fatal(err)
	}
	j.db.Update(func(tx *bolt.Tx) error { // the layout of schema 3
		b := tx.Bucket(bucketSessions).Bucket([]byte("s1"))
		if err := b.DeleteBucket(bucketRecords); err != nil {
			return err
		}
		ops, err := b.CreateBucket(bucketOps)
		if err != nil {
			return err
		}
		for i := range 300 {
			k := fmt.Sprintf("k%03d", i)
			receipt, _ := proto.Marshal(&cpv1.Receipt{IdempotencyKey: k, BlenderMutationId: "m" + k})
			ops.Put([]byte(k), appendBody(nil, receipt, json.RawMessage(`{"v":1}`), uint64(i+1), i == 7))
		}
		return tx.Bucket(bucketMeta).Put(keySchemaVersion, u64(3))
	})
	j.Close()

	j = open(t, path)
	defer j.Close()
	for _, i := range []int{0, 7, 299} {
		k := fmt.Sprintf("k%03d", i)
		rec, err := j.Lookup("s1", k)
		if err != nil || rec == nil || rec.Receipt.GetBlenderMutationId() != "m"+k || rec.LogIndex != uint64(i+1) || rec.RolledBack != (i == 7) || string(rec.Undo) != `{"v":1}` {
			t.Fatalf("migrated %s: %+v %v", k, rec, err)
		}
	}
	if err := j.Commit("s1", []Commit{{Receipt: &cpv1.Receipt{IdempotencyKey: "new"}}}); err != nil {
		t.Fatal(err)
	}
	j.db.View(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketSessions).Bucket([]byte("s1"))
		if b.Bucket(bucketOps) != nil {
			t.Error("the keyed bucket is still there")
		}
		if n := b.Bucket(bucketRecords).Stats().KeyN; n != 301 {
			t.Errorf("%d records, want 301", n)
		}
		if k, _ := b.Bucket(bucketRecords).Cursor().Last(); binary.BigEndian.Uint64(k) != 301 {
			t.Errorf("the new record is at %d, want 301", binary.BigEndian.Uint64(k))
		}
		return nil
	})
}

// TestKeysOfOneHash: keys whose hashes collide (here every key's) are each
// found, after a reopen too; committed again, replaced in place; undone.
func TestKeysOfOneHash(t *testing.T) {
	defer func(h func(string) uint64) { hashKey = h }(hashKey)
	hashKey = func(string) uint64 { return 7 }
	path := filepath.Join(t.TempDir(), "agentd.db")
	j := open(t, path)
	if err := j.OpenSession("s1", "rt", "h0", Limits{}, 0); err != nil {
		t.Fatal(err)
	}
	journalOps(t, j, "s1", 150)
	if err := j.Commit("s1", []Commit{{Receipt: &cpv1.Receipt{IdempotencyKey: "k000003", BlenderMutationId: "again"}}}); err != nil {
		t.Fatal(err)
	}
	if err := j.CommitUndo("s1", "k000005", "h"); err != nil {
		t.Fatal(err)
	}
	check := func(when string) {
		t.Helper()
		keys := make([]string, 151)
		for i := range keys {
			keys[i] = fmt.Sprintf("k%06d", i)
		}
		recs, err := j.LookupAll("s1", keys)
		if err != nil {
			t.Fatal(err)
		}
		for i, rec := range recs[:150] {
			want := "m" + keys[i]
			if i == 3 {
				want = "again"
			}
			if rec == nil || rec.Receipt.GetBlenderMutationId() != want || rec.RolledBack != (i == 5) {
				t.Fatalf("%s: %s's record %+v, want mutation %s", when, keys[i], rec, want)
			}
		}
		if recs[150] != nil {
			t.Fatalf("%s: a key never committed has a record", when)
		}
		var n int
		j.db.View(func(tx *bolt.Tx) error {
			n = tx.Bucket(bucketSessions).Bucket([]byte("s1")).Bucket(bucketRecords).Stats().KeyN
			return nil
		})
		if n != 150 {
			t.Fatalf("%s: %d records, want 150", when, n)
		}
	}
	check("before reopen")
	j.Close()
	j = open(t, path)
	defer j.Close()
	check("after reopen")
}

// TestEncodeEntryAgrees: a log entry's JSON decodes to what encoding/json's
// does (what Entries reads back), for the entries below and 3,000 with
// random args and fields; args jcs refuses are encoded by encoding/json
// itself, byte for byte.
func TestEncodeEntryAgrees(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	str := func() string { return jsontest.Strings[r.IntN(len(jsontest.Strings))] }
	random := make([]Entry, 3000)
	for i := range random {
		random[i] = Entry{Kind: str(), Key: "r" + str(), Tool: str(), Args: jsontest.Object(r, 0), MutationID: str(), HashAfter: str()}
	}
	for _, e := range append([]Entry{
		{Kind: "op", Key: "k1", Tool: "object.create", MutationID: "m1", HashAfter: "h1",
			Args: map[string]any{"name": `<a "b"> & \ ` + "\u2028\x01é😀", "location": []any{0.0, math.Copysign(0, -1), 1e-7, 1e21, 1.0 / 3, 1 << 53},
				"nested": map[string]any{"z": nil, "a": true, "": []any{}}}},
		{Kind: "undo", Key: "k2", HashAfter: "h2"},
		{Kind: "op", Key: "k3", Tool: "scene.clear", Args: map[string]any{}, HashAfter: "h3"},
		{Kind: "op", Key: "k4", Args: map[string]any{"location": []float64{1, 2}}, HashAfter: "h4"}, // a Go type of its own
		{Kind: "op", Key: "k5", Args: map[string]any{"name": "bad \xff"}, HashAfter: "h5"},          // invalid UTF-8
	}, random...) {
		got, err := encodeEntry(&e)
		want, werr := json.Marshal(&e)
		if err != nil || werr != nil {
			t.Fatalf("%+v: %v, %v", e, err, werr)
		}
		var a, b Entry
		if err := json.Unmarshal(got, &a); err != nil {
			t.Fatalf("%s: %v", got, err)
		}
		json.Unmarshal(want, &b)
		if !reflect.DeepEqual(a, b) {
			t.Fatalf("%s\ndecodes other than\n%s", got, want)
		}
		if (e.Key == "k4" || e.Key == "k5") && !bytes.Equal(got, want) {
			t.Fatalf("%s: %s, want encoding/json's %s", e.Key, got, want)
		}
	}
	if _, err := encodeEntry(&Entry{Kind: "op", Key: "k", Args: map[string]any{"x": math.NaN()}}); err == nil {
		t.Fatal("NaN encoded")
	}
}

// TestDamagedHead: a session whose head is damaged in the file is an
// error to whoever reads it (a heartbeat lists sessions), not a panic.
func TestDamagedHead(t *testing.T) {
	j := open(t, filepath.Join(t.TempDir(), "agentd.db"))
	defer j.Close()
	if err := j.OpenSession("s1", "rt", "h0", Limits{}, 0); err != nil {
		t.Fatal(err)
	}
	if err := j.db.Update(func(tx *bolt.Tx) error {
		b, err := sessionBucket(tx, "s1")
		if err != nil {
			return err
		}
		return b.Put(keyHead, []byte{1})
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := j.Session("s1"); err == nil || !strings.Contains(err.Error(), "damaged") {
		t.Fatalf("a damaged head: %v", err)
	}
}
