package journal

import (
	"errors"
	"path/filepath"
	"testing"

	bolt "go.etcd.io/bbolt"

	cpv1 "github.com/blendplane/blendplane/gen/blendplane/controlplane/v1"
)

func TestIdentityAndReceiptsSurviveReopen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "agentd.db")
	j, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	id, err := j.AgentID()
	if err != nil || id == "" {
		t.Fatalf("agent id %q: %v", id, err)
	}
	if again, _ := j.AgentID(); again != id {
		t.Fatalf("agent id changed: %s → %s", id, again)
	}
	if err := j.Commit("s1", &cpv1.Receipt{IdempotencyKey: "k"}); !errors.Is(err, ErrSessionNotFound) {
		t.Fatalf("commit to unknown session: %v", err)
	}
	if err := j.OpenSession("s1", "rt"); err != nil {
		t.Fatal(err)
	}
	if err := j.Commit("s1", &cpv1.Receipt{IdempotencyKey: "k", OperationId: "a", BlenderMutationId: "m"}); err != nil {
		t.Fatal(err)
	}
	j.Close()

	j, err = Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	if again, _ := j.AgentID(); again != id {
		t.Fatalf("agent id not kept across reopen: %s → %s", id, again)
	}
	r, err := j.Receipt("s1", "k")
	if err != nil || r.GetBlenderMutationId() != "m" {
		t.Fatalf("receipt after reopen: %v %v", r, err)
	}
	if r, err := j.Receipt("s1", "other"); err != nil || r != nil {
		t.Fatalf("unknown key: %v %v", r, err)
	}
}

func TestRefusesNewerSchema(t *testing.T) {
	path := filepath.Join(t.TempDir(), "agentd.db")
	j, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	j.db.Update(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketMeta).Put(keySchemaVersion, []byte{0, 0, 0, 0, 0, 0, 0, 99})
	})
	j.Close()
	if _, err := Open(path); err == nil {
		t.Fatal("opened a journal from a newer schema")
	}
}
