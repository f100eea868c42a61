// Package journal is agentd's durable memory in a local bbolt file: the
// agent's identity and, per session, the committed receipt of every
// operation by its idempotency key, so that a retried operation returns its
// receipt instead of running twice.
//
// Bucket tree (every key is a named variable below):
//
//	meta/
//	  schema_version   → uint64, big endian (currently 1)
//	  agent_id         → the agent's identity, kept across restarts
//	sessions/
//	  <session_id>/
//	    runtime_id     → runtime the session runs in
//	    receipts/
//	      <idempotency_key> → Receipt (proto), as committed
package journal

import (
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	bolt "go.etcd.io/bbolt"
	"google.golang.org/protobuf/proto"

	cpv1 "github.com/blendplane/blendplane/gen/blendplane/controlplane/v1"
)

var (
	bucketMeta     = []byte("meta")
	bucketSessions = []byte("sessions")
	bucketReceipts = []byte("receipts")

	keySchemaVersion = []byte("schema_version")
	keyAgentID       = []byte("agent_id")
	keyRuntimeID     = []byte("runtime_id")
)

// ErrSessionNotFound: the journal has no such session.
var ErrSessionNotFound = errors.New("session not found in journal")

// Journal is agentd's bbolt database.
type Journal struct {
	db *bolt.DB
}

// migrations[i] upgrades a journal from schema version i to i+1.
var migrations = []func(tx *bolt.Tx) error{
	// 0 → 1: the initial bucket tree.
	func(tx *bolt.Tx) error {
		_, err := tx.CreateBucketIfNotExists(bucketSessions)
		return err
	},
}

// Open opens (creating if needed) the journal at path and migrates it.
func Open(path string) (*Journal, error) {
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: 5 * time.Second})
	if err != nil {
		return nil, fmt.Errorf("open journal %s: %w", path, err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		meta, err := tx.CreateBucketIfNotExists(bucketMeta)
		if err != nil {
			return err
		}
		var version uint64
		if v := meta.Get(keySchemaVersion); v != nil {
			version = binary.BigEndian.Uint64(v)
		}
		if version > uint64(len(migrations)) {
			return fmt.Errorf("journal schema version %d is newer than this binary's %d", version, len(migrations))
		}
		for ; version < uint64(len(migrations)); version++ {
			if err := migrations[version](tx); err != nil {
				return fmt.Errorf("migrate journal to version %d: %w", version+1, err)
			}
		}
		v := make([]byte, 8)
		binary.BigEndian.PutUint64(v, version)
		return meta.Put(keySchemaVersion, v)
	})
	if err != nil {
		db.Close()
		return nil, err
	}
	return &Journal{db: db}, nil
}

// Close closes the journal.
func (j *Journal) Close() error { return j.db.Close() }

// AgentID returns the agent's identity, creating it on first use.
func (j *Journal) AgentID() (string, error) {
	var id string
	err := j.db.Update(func(tx *bolt.Tx) error {
		meta := tx.Bucket(bucketMeta)
		if v := meta.Get(keyAgentID); v != nil {
			id = string(v)
			return nil
		}
		var b [6]byte
		if _, err := rand.Read(b[:]); err != nil {
			return err
		}
		id = "agent-" + hex.EncodeToString(b[:])
		return meta.Put(keyAgentID, []byte(id))
	})
	return id, err
}

// OpenSession records a session; opening it again is harmless.
func (j *Journal) OpenSession(sessionID, runtimeID string) error {
	return j.db.Update(func(tx *bolt.Tx) error {
		b, err := tx.Bucket(bucketSessions).CreateBucketIfNotExists([]byte(sessionID))
		if err != nil {
			return err
		}
		if _, err := b.CreateBucketIfNotExists(bucketReceipts); err != nil {
			return err
		}
		return b.Put(keyRuntimeID, []byte(runtimeID))
	})
}

// Receipt returns the committed receipt for an idempotency key, or nil.
func (j *Journal) Receipt(sessionID, key string) (*cpv1.Receipt, error) {
	var r *cpv1.Receipt
	err := j.db.View(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketSessions).Bucket([]byte(sessionID))
		if b == nil {
			return fmt.Errorf("%s: %w", sessionID, ErrSessionNotFound)
		}
		raw := b.Bucket(bucketReceipts).Get([]byte(key))
		if raw == nil {
			return nil
		}
		r = &cpv1.Receipt{}
		return proto.Unmarshal(raw, r)
	})
	return r, err
}

// Commit stores an operation's receipt under its idempotency key.
func (j *Journal) Commit(sessionID string, r *cpv1.Receipt) error {
	raw, err := proto.MarshalOptions{Deterministic: true}.Marshal(r)
	if err != nil {
		return err
	}
	return j.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketSessions).Bucket([]byte(sessionID))
		if b == nil {
			return fmt.Errorf("%s: %w", sessionID, ErrSessionNotFound)
		}
		return b.Bucket(bucketReceipts).Put([]byte(r.GetIdempotencyKey()), raw)
	})
}
