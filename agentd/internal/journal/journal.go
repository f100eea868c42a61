// Package journal is agentd's durable memory in a local bbolt file: the
// agent's identity and, per session, a redo log on top of the session's last
// .blend checkpoint.
//
// An operation is journaled twice: an intent when it starts, and after it
// ran, in one transaction, its receipt (with the compensating action that
// undoes it), a log entry if it changed the scene, and the new head. After a
// crash the session is rebuilt by loading the checkpoint and replaying the
// log entries after it; the result must hash to the head's scene hash. A
// retried idempotency key finds its committed record instead of running
// again.
//
// Records are appended in commit order (those from before schema 4 in key
// order), keyed by a sequence number, and found by idempotency key through
// an index in memory, read from every record when the journal opens (about
// 25 bytes per record, see keyIndex; a session's records stay until it
// closes). Keyed by idempotency key, a hash, as before schema 4, the 32
// records of a commit went to 32 random pages of the bucket, each written
// again: half of agentd's CPU per durable operation (BenchmarkCommit).
//
// Intents say which calls were in flight when agentd or its Blender died.
// Nothing is rebuilt from them (an effect lives only in Blender's memory
// until its receipt is journaled, and a call without a receipt is simply
// retried by key), so they live in a second bbolt file that is not fsynced
// (<name>-intents.db beside the journal): they survive a crash of agentd,
// which leaves the page cache, and cost the receipt's commit no wait.
//
// Bucket tree (every key is a named variable below):
//
//	meta/
//	  schema_version      → uint64, big endian (currently 4)
//	  agent_id            → the agent's identity, kept across restarts
//	sessions/
//	  <session_id>/
//	    runtime_id        → runtime the session runs in
//	    head              → uint64: index of the last log entry (0: none)
//	    head_hash         → scene hash after the head entry (baseline hash at first)
//	    epoch             → uint64: the newest placement epoch seen (absent: 0)
//	    checkpoint        → Checkpoint (JSON); absent: the baseline scene
//	    log/
//	      <index>         → Entry (JSON), index uint64 big endian, from 1
//	    records/
//	      <sequence>      → Record (protobuf wire format, see appendRecord):
//	                        idempotency key, receipt, undo, log index, rolled
//	                        back; sequence uint64 big endian, from 1
//
// and in the intents file:
//
//	intents/
//	  <session_id>/
//	    <idempotency_key> → RFC 3339 time the operation was started
package journal

import (
	"cmp"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"time"

	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	cpv1 "github.com/blendplane/blendplane/gen/blendplane/controlplane/v1"
	"github.com/blendplane/blendplane/internal/boltfile"
	"github.com/blendplane/blendplane/internal/boltschema"
	"github.com/blendplane/blendplane/internal/groupcommit"
	"github.com/blendplane/blendplane/internal/jcs"
	"github.com/blendplane/blendplane/internal/receiptwire"
)

var (
	bucketMeta     = []byte("meta")
	bucketSessions = []byte("sessions")
	bucketLog      = []byte("log")
	bucketOps      = []byte("ops") // records by idempotency key, before schema 4
	bucketRecords  = []byte("records")
	bucketIntents  = []byte("intents")

	keySchemaVersion = []byte("schema_version")
	keyAgentID       = []byte("agent_id")
	keyRuntimeID     = []byte("runtime_id")
	keyHead          = []byte("head")
	keyHeadHash      = []byte("head_hash")
	keyCheckpoint    = []byte("checkpoint")
	keyMemoryLimit   = []byte("memory_limit_mib")  // absent: no limit
	keyStorageLimit  = []byte("storage_limit_mib") // absent: no limit
	keyEpoch         = []byte("epoch")             // absent: 0
)

// ErrSessionNotFound: the journal has no such session.
var ErrSessionNotFound = errors.New("session not found in journal")

// ErrStaleEpoch: a call for a session carries an older epoch than one seen.
var ErrStaleEpoch = errors.New("stale epoch")

// Entry is one scene change in the redo log.
type Entry struct {
	// Kind is "op" (a tool ran) or "undo" (an op's compensation ran).
	Kind string `json:"kind"`
	// Key is the operation's idempotency key.
	Key  string         `json:"key"`
	Tool string         `json:"tool,omitempty"`
	Args map[string]any `json:"args,omitempty"`
	// MutationID is the op's blender_mutation_id, passed again on replay.
	MutationID string `json:"mutation_id,omitempty"`
	HashAfter  string `json:"hash_after"`
}

// Record is what the journal keeps per idempotency key.
type Record struct {
	Receipt *cpv1.Receipt
	// Undo is the compensating action computed before the op ran.
	Undo json.RawMessage
	// LogIndex is the op's log entry; 0 if it did not change the scene.
	LogIndex   uint64
	RolledBack bool
}

// Checkpoint is a saved .blend and the log index it contains.
type Checkpoint struct {
	Path      string `json:"path"`
	Index     uint64 `json:"index"`
	SceneHash string `json:"scene_hash"`
}

// Session is a session's recovery state.
type Session struct {
	ID         string
	RuntimeID  string
	Head       uint64
	HeadHash   string
	Checkpoint *Checkpoint
	// Limits are the session's ceilings, kept so that a restarted agent
	// enforces them too.
	Limits Limits
	// Epoch is the newest placement epoch the control plane called it
	// with (0: none given).
	Epoch int64
}

// Limits are a session's ceilings: its Blender's memory and what its
// sandbox's files take on disk, in MiB (0: none).
type Limits struct {
	MemoryMiB  int64
	StorageMiB int64
}

// CheckpointIndex is the log index the session's checkpoint holds (0:
// none): replay starts after it.
func (s Session) CheckpointIndex() uint64 {
	if s.Checkpoint == nil {
		return 0
	}
	return s.Checkpoint.Index
}

// Journal is agentd's bbolt database, and its intents file.
type Journal struct {
	db      *bolt.DB
	intents *bolt.DB
	// writes commits the updates of every session in shared transactions
	// when they arrive together (receipts of concurrent batches).
	writes *groupcommit.DB

	// mu guards index: per session, where each idempotency key's record is
	// (keyIndex). A commit adds its keys before its transaction commits, so
	// that whoever sees its log entries finds their records; so the index
	// may run ahead of the file, and keep the keys of a commit that failed
	// (taking them out could hide a record committed before under the same
	// key). Whoever reads through it checks that its snapshot holds the
	// record, under that key (getRecord, hasRecord).
	mu    sync.RWMutex
	index map[string]*keyIndex
}

// update runs fn in a durable transaction of the journal, maybe shared
// with other updates: fn may run more than once (groupcommit.DB.Update).
func (j *Journal) update(fn func(*bolt.Tx) error) error {
	return j.writes.Update(fn)
}

// Commits counts the journal's durable transactions so far.
func (j *Journal) Commits() uint64 { return j.writes.Commits() }

// migrations[i] upgrades a journal from schema version i to i+1.
var migrations = []func(tx *bolt.Tx) error{
	// 0 → 1: the initial bucket tree.
	func(tx *bolt.Tx) error {
		_, err := tx.CreateBucketIfNotExists(bucketSessions)
		return err
	},
	// 1 → 2: intents move to the intents file; those left were calls lost
	// in the last run, which their callers retry by key.
	func(tx *bolt.Tx) error {
		sessions := tx.Bucket(bucketSessions)
		return sessions.ForEachBucket(func(k []byte) error {
			err := sessions.Bucket(k).DeleteBucket(bucketIntents)
			if errors.Is(err, berrors.ErrBucketNotFound) {
				return nil
			}
			return err
		})
	},
	// 2 → 3: records from JSON (the receipt's protobuf in base64 within)
	// to protobuf wire format: one encoding pass per commit, not three.
	func(tx *bolt.Tx) error {
		sessions := tx.Bucket(bucketSessions)
		return sessions.ForEachBucket(func(id []byte) error {
			ops := sessions.Bucket(id).Bucket(bucketOps)
			type entry struct{ key, raw []byte }
			var todo []entry
			if err := ops.ForEach(func(k, v []byte) error {
				var old struct {
					Receipt    []byte          `json:"receipt"`
					Undo       json.RawMessage `json:"undo"`
					LogIndex   uint64          `json:"log_index"`
					RolledBack bool            `json:"rolled_back"`
				}
				if err := json.Unmarshal(v, &old); err != nil {
					return fmt.Errorf("session %s record %s: %w", id, k, err)
				}
				todo = append(todo, entry{k, appendBody(nil, old.Receipt, old.Undo, old.LogIndex, old.RolledBack)})
				return nil
			}); err != nil {
				return err
			}
			for _, e := range todo {
				if err := ops.Put(e.key, e.raw); err != nil {
					return err
				}
			}
			return nil
		})
	},
	// 3 → 4: records keyed by sequence (appended), not by idempotency key;
	// the key moves into the record.
	func(tx *bolt.Tx) error {
		sessions := tx.Bucket(bucketSessions)
		return sessions.ForEachBucket(func(id []byte) error {
			b := sessions.Bucket(id)
			records, err := b.CreateBucketIfNotExists(bucketRecords)
			if err != nil {
				return err
			}
			records.FillPercent = 1
			ops := b.Bucket(bucketOps)
			if ops == nil {
				return nil
			}
			if err := ops.ForEach(func(k, v []byte) error {
				seq, err := records.NextSequence()
				if err != nil {
					return err
				}
				return records.Put(u64(seq), append(appendKey(nil, string(k)), v...)) // v: fields 1–4
			}); err != nil {
				return err
			}
			return b.DeleteBucket(bucketOps)
		})
	},
}

// IntentsPath is the intents file of the journal at path.
func IntentsPath(path string) string {
	return strings.TrimSuffix(path, filepath.Ext(path)) + "-intents" + filepath.Ext(path)
}

// Open opens (creating if needed) the journal at path, and its intents
// file, and migrates it.
func Open(path string) (*Journal, error) {
	intents, err := boltfile.Open(IntentsPath(path), &bolt.Options{NoSync: true})
	if err != nil {
		return nil, fmt.Errorf("open journal intents %s: %w", IntentsPath(path), err)
	}
	if err := intents.Update(func(tx *bolt.Tx) error {
		_, err := tx.CreateBucketIfNotExists(bucketIntents)
		return err
	}); err != nil {
		intents.Close()
		return nil, fmt.Errorf("journal intents: %w", err)
	}
	db, err := boltfile.Open(path, nil)
	if err != nil {
		intents.Close()
		return nil, fmt.Errorf("open journal %s: %w", path, err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		return boltschema.Migrate(tx, "journal", bucketMeta, keySchemaVersion, migrations)
	})
	if err != nil {
		db.Close()
		intents.Close()
		return nil, err
	}
	j := &Journal{db: db, intents: intents, writes: groupcommit.New(db), index: map[string]*keyIndex{}}
	if err := j.loadIndex(); err != nil {
		j.Close()
		return nil, err
	}
	return j, nil
}

// loadIndex reads every session's record keys into the index.
func (j *Journal) loadIndex() error {
	return j.db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketSessions).ForEachBucket(func(id []byte) error {
			return j.loadSession(tx, string(id))
		})
	})
}

// loadSession reads a session's record keys into the index (none if the
// session is not in tx).
func (j *Journal) loadSession(tx *bolt.Tx, id string) error {
	keys := newKeyIndex()
	if b := tx.Bucket(bucketSessions).Bucket([]byte(id)); b != nil {
		var err error
		if keys, err = readIndex(b.Bucket(bucketRecords)); err != nil {
			return fmt.Errorf("session %s: %w", id, err)
		}
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	j.index[id] = keys
	return nil
}

// readIndex indexes every record of a session, in sequence order (of a
// key stored twice, the later wins).
func readIndex(records *bolt.Bucket) (*keyIndex, error) {
	keys, at := newKeyIndex(), keyAt(records)
	err := records.ForEach(func(k, v []byte) error {
		key, err := storedKey(v)
		if err != nil {
			return fmt.Errorf("record %d: %w", binary.BigEndian.Uint64(k), err)
		}
		keys.set(key, binary.BigEndian.Uint64(k), at)
		return nil
	})
	return keys, err
}

// keyAt reads the key of the record at a sequence ("" if none).
func keyAt(records *bolt.Bucket) func(uint64) string {
	return func(seq uint64) string {
		key, _ := storedKey(records.Get(u64(seq)))
		return key
	}
}

// seqs returns the sequence of each key's record in a session (0: none).
func (j *Journal) seqs(sessionID string, keys []string) []uint64 {
	j.mu.RLock()
	defer j.mu.RUnlock()
	out := make([]uint64, len(keys))
	if index := j.index[sessionID]; index != nil {
		for i, k := range keys {
			out[i] = index.get(k)
		}
	}
	return out
}

// Close closes the journal.
func (j *Journal) Close() error {
	return errors.Join(j.db.Close(), j.intents.Close())
}

// AgentID returns the agent's identity, creating it on first use.
func (j *Journal) AgentID() (string, error) {
	var id string
	err := j.update(func(tx *bolt.Tx) error {
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

// OpenSession records a new session starting from the baseline scene, with
// its ceilings. Opening a known session changes nothing.
func (j *Journal) OpenSession(sessionID, runtimeID, baselineHash string, limits Limits, epoch int64) error {
	return j.update(func(tx *bolt.Tx) error {
		sessions := tx.Bucket(bucketSessions)
		if sessions.Bucket([]byte(sessionID)) != nil {
			return nil
		}
		b, err := sessions.CreateBucket([]byte(sessionID))
		if err != nil {
			return err
		}
		for _, name := range [][]byte{bucketLog, bucketRecords} {
			if _, err := b.CreateBucket(name); err != nil {
				return err
			}
		}
		if err := b.Put(keyRuntimeID, []byte(runtimeID)); err != nil {
			return err
		}
		if err := b.Put(keyHead, u64(0)); err != nil {
			return err
		}
		if limits.MemoryMiB > 0 {
			if err := b.Put(keyMemoryLimit, u64(uint64(limits.MemoryMiB))); err != nil {
				return err
			}
		}
		if limits.StorageMiB > 0 {
			if err := b.Put(keyStorageLimit, u64(uint64(limits.StorageMiB))); err != nil {
				return err
			}
		}
		if epoch > 0 {
			if err := b.Put(keyEpoch, u64(uint64(epoch))); err != nil {
				return err
			}
		}
		return b.Put(keyHeadHash, []byte(baselineHash))
	})
}

// Fence checks a call's epoch against the newest the session has seen: an
// older one is ErrStaleEpoch, a newer one is recorded (durably, before the
// call runs). 0 is not checked.
func (j *Journal) Fence(sessionID string, epoch int64) error {
	if epoch <= 0 {
		return nil
	}
	seen, err := j.Session(sessionID)
	if err != nil || seen.Epoch == epoch {
		return err
	}
	return j.update(func(tx *bolt.Tx) error {
		b, err := sessionBucket(tx, sessionID)
		if err != nil {
			return err
		}
		var seen int64
		if raw := b.Get(keyEpoch); len(raw) == 8 {
			seen = int64(binary.BigEndian.Uint64(raw))
		}
		if epoch < seen {
			return fmt.Errorf("%w: session %s is at epoch %d, the call carries %d", ErrStaleEpoch, sessionID, seen, epoch)
		}
		return b.Put(keyEpoch, u64(uint64(epoch)))
	})
}

// CloseSession forgets a session.
func (j *Journal) CloseSession(sessionID string) error {
	if _, err := j.ClearIntents(sessionID); err != nil {
		return err
	}
	err := j.update(func(tx *bolt.Tx) error {
		err := tx.Bucket(bucketSessions).DeleteBucket([]byte(sessionID))
		if errors.Is(err, berrors.ErrBucketNotFound) {
			return fmt.Errorf("%s: %w", sessionID, ErrSessionNotFound)
		}
		if err == nil {
			// In the transaction: a session opened again under the same id
			// right after it commits keeps its own keys.
			j.mu.Lock()
			delete(j.index, sessionID)
			j.mu.Unlock()
		}
		return err
	})
	if err != nil && !errors.Is(err, ErrSessionNotFound) {
		// Not closed after all: its keys back from the file, in a write
		// transaction (after any commit that indexSet rebuilt them in).
		err = errors.Join(err, j.update(func(tx *bolt.Tx) error {
			j.mu.RLock()
			_, ok := j.index[sessionID]
			j.mu.RUnlock()
			if ok {
				return nil
			}
			return j.loadSession(tx, sessionID)
		}))
	}
	return err
}

// Sessions returns the recovery state of every open session.
func (j *Journal) Sessions() ([]Session, error) {
	var out []Session
	err := j.db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketSessions).ForEachBucket(func(k []byte) error {
			s, err := readSession(tx, string(k))
			out = append(out, s)
			return err
		})
	})
	return out, err
}

// Session returns one session's recovery state.
func (j *Journal) Session(sessionID string) (Session, error) {
	var s Session
	err := j.db.View(func(tx *bolt.Tx) error {
		var err error
		s, err = readSession(tx, sessionID)
		return err
	})
	return s, err
}

// head is the index of a session's last log entry; a journal damaged there
// is an error, not a panic of whichever goroutine reads it (a heartbeat's).
func head(b *bolt.Bucket, id string) (uint64, error) {
	v := b.Get(keyHead)
	if len(v) != 8 {
		return 0, fmt.Errorf("the journal of session %q is damaged: its head is %d bytes", id, len(v))
	}
	return binary.BigEndian.Uint64(v), nil
}

func readSession(tx *bolt.Tx, id string) (Session, error) {
	b, err := sessionBucket(tx, id)
	if err != nil {
		return Session{}, err
	}
	h, err := head(b, id)
	if err != nil {
		return Session{}, err
	}
	s := Session{
		ID:        id,
		RuntimeID: string(b.Get(keyRuntimeID)),
		Head:      h,
		HeadHash:  string(b.Get(keyHeadHash)),
	}
	if raw := b.Get(keyMemoryLimit); len(raw) == 8 {
		s.Limits.MemoryMiB = int64(binary.BigEndian.Uint64(raw))
	}
	if raw := b.Get(keyStorageLimit); len(raw) == 8 {
		s.Limits.StorageMiB = int64(binary.BigEndian.Uint64(raw))
	}
	if raw := b.Get(keyEpoch); len(raw) == 8 {
		s.Epoch = int64(binary.BigEndian.Uint64(raw))
	}
	if raw := b.Get(keyCheckpoint); raw != nil {
		s.Checkpoint = &Checkpoint{}
		if err := json.Unmarshal(raw, s.Checkpoint); err != nil {
			return s, fmt.Errorf("session %s checkpoint: %w", id, err)
		}
	}
	return s, nil
}

// Intend records that operations are about to run, in one transaction of
// the intents file (not fsynced: see the package doc).
func (j *Journal) Intend(sessionID string, keys []string) error {
	now := []byte(time.Now().UTC().Format(time.RFC3339Nano))
	return j.intents.Update(func(tx *bolt.Tx) error {
		b, err := tx.Bucket(bucketIntents).CreateBucketIfNotExists([]byte(sessionID))
		if err != nil {
			return err
		}
		for _, k := range keys {
			if err := b.Put([]byte(k), now); err != nil {
				return err
			}
		}
		return nil
	})
}

// Intents lists operations that started but never committed: what was in
// flight when the agent or its Blender died. Intents of committed keys,
// which stay until their batch ends, are left out.
func (j *Journal) Intents(sessionID string) ([]string, error) {
	var started []string
	err := j.intents.View(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketIntents).Bucket([]byte(sessionID))
		if b == nil {
			return nil
		}
		return b.ForEach(func(k, _ []byte) error {
			started = append(started, string(k))
			return nil
		})
	})
	if err != nil || len(started) == 0 {
		return nil, err
	}
	var keys []string
	seqs := j.seqs(sessionID, started)
	err = j.db.View(func(tx *bolt.Tx) error {
		var records *bolt.Bucket
		if b := tx.Bucket(bucketSessions).Bucket([]byte(sessionID)); b != nil {
			records = b.Bucket(bucketRecords)
		}
		for i, k := range started {
			if records == nil || !hasRecord(records, seqs[i], k) {
				keys = append(keys, k)
			}
		}
		return nil
	})
	return keys, err
}

// ClearIntents drops every intent of a session: calls that were cancelled,
// lost with their stream or with a crash, and whose callers retry them by
// key. It returns how many there were.
func (j *Journal) ClearIntents(sessionID string) (int, error) {
	keys, err := j.Intents(sessionID)
	if err != nil {
		return 0, err
	}
	err = j.intents.Update(func(tx *bolt.Tx) error {
		err := tx.Bucket(bucketIntents).DeleteBucket([]byte(sessionID))
		if errors.Is(err, berrors.ErrBucketNotFound) {
			return nil
		}
		return err
	})
	return len(keys), err
}

// Lookup returns the committed record of an idempotency key, or nil.
func (j *Journal) Lookup(sessionID, key string) (*Record, error) {
	recs, err := j.LookupAll(sessionID, []string{key})
	if err != nil {
		return nil, err
	}
	return recs[0], nil
}

// LookupAll returns the committed record of each key (nil: none), read in
// one transaction.
func (j *Journal) LookupAll(sessionID string, keys []string) ([]*Record, error) {
	recs := make([]*Record, len(keys))
	seqs := j.seqs(sessionID, keys)
	err := j.db.View(func(tx *bolt.Tx) error {
		b, err := sessionBucket(tx, sessionID)
		if err != nil {
			return err
		}
		records := b.Bucket(bucketRecords)
		for i, seq := range seqs {
			if recs[i], err = getRecord(records, seq, keys[i]); err != nil {
				return err
			}
		}
		return nil
	})
	return recs, err
}

// Commit is one executed operation to journal.
type Commit struct {
	Receipt *cpv1.Receipt
	Undo    json.RawMessage
	// Entry is the log entry, nil when the scene did not change.
	Entry *Entry
}

// Commit journals executed operations in one transaction: each record, its
// log entry and the new head. Their intents stay until the batch ends
// (ClearIntents): Intents leaves out keys that have a record. Every
// operation needs its idempotency key.
func (j *Journal) Commit(sessionID string, commits []Commit) error {
	keys := make([]string, len(commits))
	for i, c := range commits {
		if keys[i] = c.Receipt.GetIdempotencyKey(); keys[i] == "" {
			return fmt.Errorf("commit of operation %q without an idempotency key", c.Receipt.GetOperationId())
		}
	}
	return j.update(func(tx *bolt.Tx) error {
		b, err := sessionBucket(tx, sessionID)
		if err != nil {
			return err
		}
		// The records' keys only grow: bbolt fills a page before it
		// splits it.
		records := b.Bucket(bucketRecords)
		records.FillPercent = 1
		placed := map[string]uint64{}
		seqs := j.seqs(sessionID, keys)
		for i, c := range commits {
			rec := &Record{Receipt: c.Receipt, Undo: c.Undo}
			if c.Entry != nil {
				if rec.LogIndex, err = appendEntry(b, sessionID, c.Entry); err != nil {
					return err
				}
			}
			seq, err := place(records, cmp.Or(placed[keys[i]], seqs[i]), keys[i])
			if err != nil {
				return err
			}
			placed[keys[i]] = seq
			if err := putRecord(records, seq, keys[i], rec); err != nil {
				return err
			}
		}
		return j.indexSet(sessionID, placed, records)
	})
}

// place returns where key's record goes: where it is (a key committed
// again replaces its record), or the next sequence. seq is where the index
// says it is, which the transaction checks.
func place(records *bolt.Bucket, seq uint64, key string) (uint64, error) {
	if hasRecord(records, seq, key) {
		return seq, nil
	}
	return records.NextSequence()
}

// hasRecord says whether key's record is at seq in this transaction (see
// Journal.index), without decoding it.
func hasRecord(records *bolt.Bucket, seq uint64, key string) bool {
	if seq == 0 {
		return false
	}
	stored, err := storedKey(records.Get(u64(seq)))
	return err == nil && stored == key
}

// indexSet adds a session's placed keys to the index, from a transaction
// in which the session exists.
func (j *Journal) indexSet(sessionID string, placed map[string]uint64, records *bolt.Bucket) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	index := j.index[sessionID]
	if index == nil { // a new session's first records, or a close that failed
		var err error
		if index, err = readIndex(records); err != nil {
			return err
		}
		j.index[sessionID] = index
	}
	at := keyAt(records)
	for key, seq := range placed {
		index.set(key, seq, at)
	}
	return nil
}

// CommitUndo journals that an operation's compensation ran: the record is
// marked rolled back and an undo entry joins the log.
func (j *Journal) CommitUndo(sessionID, key, hashAfter string) error {
	return j.update(func(tx *bolt.Tx) error {
		b, err := sessionBucket(tx, sessionID)
		if err != nil {
			return err
		}
		seq := j.seqs(sessionID, []string{key})[0]
		records := b.Bucket(bucketRecords)
		rec, err := getRecord(records, seq, key)
		if err != nil {
			return err
		}
		if rec == nil {
			return fmt.Errorf("undo of unknown operation %s", key)
		}
		if _, err := appendEntry(b, sessionID, &Entry{Kind: "undo", Key: key, HashAfter: hashAfter}); err != nil {
			return err
		}
		rec.RolledBack = true
		return putRecord(records, seq, key, rec)
	})
}

// SetCheckpoint records a durable checkpoint and drops the log entries it
// contains: recovery starts from the checkpoint.
func (j *Journal) SetCheckpoint(sessionID string, cp Checkpoint) error {
	raw, err := json.Marshal(cp)
	if err != nil {
		return err
	}
	return j.update(func(tx *bolt.Tx) error {
		b, err := sessionBucket(tx, sessionID)
		if err != nil {
			return err
		}
		if err := b.Put(keyCheckpoint, raw); err != nil {
			return err
		}
		// The covered entries are listed first, then deleted: a First after
		// each delete walks every leaf the deletes emptied so far, which made
		// dropping n entries cost n².
		log := b.Bucket(bucketLog)
		var covered []uint64
		c := log.Cursor()
		for k, _ := c.First(); k != nil && binary.BigEndian.Uint64(k) <= cp.Index; k, _ = c.Next() {
			covered = append(covered, binary.BigEndian.Uint64(k))
		}
		for _, i := range covered {
			if err := log.Delete(u64(i)); err != nil {
				return err
			}
		}
		return nil
	})
}

// StartFrom makes a session that has journaled nothing start from cp (at
// log index 0) instead of its baseline scene: its head hash becomes cp's.
func (j *Journal) StartFrom(sessionID string, cp Checkpoint) error {
	raw, err := json.Marshal(cp)
	if err != nil {
		return err
	}
	return j.update(func(tx *bolt.Tx) error {
		b, err := sessionBucket(tx, sessionID)
		if err != nil {
			return err
		}
		if h, err := head(b, sessionID); err != nil || h != 0 {
			return cmp.Or(err, fmt.Errorf("session %s has journaled operations", sessionID))
		}
		if err := b.Put(keyCheckpoint, raw); err != nil {
			return err
		}
		return b.Put(keyHeadHash, []byte(cp.SceneHash))
	})
}

// Entries returns the log entries after index from, in order.
func (j *Journal) Entries(sessionID string, from uint64) ([]Entry, error) {
	var out []Entry
	err := j.db.View(func(tx *bolt.Tx) error {
		b, err := sessionBucket(tx, sessionID)
		if err != nil {
			return err
		}
		c := b.Bucket(bucketLog).Cursor()
		for k, v := c.Seek(u64(from + 1)); k != nil; k, v = c.Next() {
			var e Entry
			if err := json.Unmarshal(v, &e); err != nil {
				return fmt.Errorf("log entry %d: %w", binary.BigEndian.Uint64(k), err)
			}
			out = append(out, e)
		}
		return nil
	})
	return out, err
}

func appendEntry(b *bolt.Bucket, sessionID string, e *Entry) (uint64, error) {
	raw, err := encodeEntry(e)
	if err != nil {
		return 0, err
	}
	index, err := head(b, sessionID)
	if err != nil {
		return 0, err
	}
	index++
	// The log's keys only grow: bbolt fills a page before it splits it
	// (its default splits at half, leaving every page half empty).
	log := b.Bucket(bucketLog)
	log.FillPercent = 1
	if err := log.Put(u64(index), raw); err != nil {
		return 0, err
	}
	if err := b.Put(keyHead, u64(index)); err != nil {
		return 0, err
	}
	return index, b.Put(keyHeadHash, []byte(e.HashAfter))
}

// encodeEntry is e's JSON: what json.Marshal gives (Entries decodes it with
// encoding/json), less its reflection over the args, which took 4 % of
// agentd's CPU under durable load: args through jcs, and encoding/json for
// what jcs refuses (Go types other than JSON's, invalid UTF-8).
func encodeEntry(e *Entry) ([]byte, error) {
	if raw, err := appendEntryJSON(make([]byte, 0, 512), e); err == nil {
		return raw, nil
	}
	return json.Marshal(e)
}

func appendEntryJSON(b []byte, e *Entry) ([]byte, error) {
	b = append(b, `{"kind":`...)
	b, err := jcs.AppendString(b, e.Kind)
	if err != nil {
		return nil, err
	}
	b = append(b, `,"key":`...)
	if b, err = jcs.AppendString(b, e.Key); err != nil {
		return nil, err
	}
	if b, err = jcs.AppendFields(b, [2]string{"tool", e.Tool}); err != nil {
		return nil, err
	}
	if len(e.Args) > 0 {
		b = append(b, `,"args":`...)
		if b, err = jcs.Append(b, e.Args, true); err != nil {
			return nil, err
		}
	}
	if b, err = jcs.AppendFields(b, [2]string{"mutation_id", e.MutationID}); err != nil {
		return nil, err
	}
	b = append(b, `,"hash_after":`...)
	if b, err = jcs.AppendString(b, e.HashAfter); err != nil {
		return nil, err
	}
	return append(b, '}'), nil
}

func putRecord(records *bolt.Bucket, seq uint64, key string, rec *Record) error {
	receipt, err := proto.MarshalOptions{Deterministic: true}.Marshal(rec.Receipt)
	if err != nil {
		return err
	}
	return records.Put(u64(seq), appendRecord(make([]byte, 0, len(key)+len(receipt)+len(rec.Undo)+32), key, receipt, rec.Undo, rec.LogIndex, rec.RolledBack))
}

// A record is stored as a protobuf message (written with protowire, as
// there is no schema to share):
//
//	string key         = 5; // the idempotency key, first (storedKey)
//	bytes  receipt     = 1; // the Receipt, deterministic encoding
//	bytes  undo        = 2; // the bridge's undo record (JSON); absent: none
//	uint64 log_index   = 3;
//	bool   rolled_back = 4;
const (
	recordReceipt    protowire.Number = 1
	recordUndo       protowire.Number = 2
	recordLogIndex   protowire.Number = 3
	recordRolledBack protowire.Number = 4
	recordKey        protowire.Number = 5
)

func appendRecord(b []byte, key string, receipt, undo []byte, logIndex uint64, rolledBack bool) []byte {
	return appendBody(appendKey(b, key), receipt, undo, logIndex, rolledBack)
}

// appendKey appends a record's key field.
func appendKey(b []byte, key string) []byte {
	b = protowire.AppendTag(b, recordKey, protowire.BytesType)
	return protowire.AppendString(b, key)
}

// appendBody appends the fields after the key (all a record held before
// schema 4, when its key was the bucket's).
func appendBody(b, receipt, undo []byte, logIndex uint64, rolledBack bool) []byte {
	b = protowire.AppendTag(b, recordReceipt, protowire.BytesType)
	b = protowire.AppendBytes(b, receipt)
	if len(undo) > 0 {
		b = protowire.AppendTag(b, recordUndo, protowire.BytesType)
		b = protowire.AppendBytes(b, undo)
	}
	if logIndex > 0 {
		b = protowire.AppendTag(b, recordLogIndex, protowire.VarintType)
		b = protowire.AppendVarint(b, logIndex)
	}
	if rolledBack {
		b = protowire.AppendTag(b, recordRolledBack, protowire.VarintType)
		b = protowire.AppendVarint(b, 1)
	}
	return b
}

// storedKey reads the key of a stored record, its first field.
func storedKey(raw []byte) (string, error) {
	num, typ, n := protowire.ConsumeTag(raw)
	if n < 0 {
		return "", protowire.ParseError(n)
	}
	if num != recordKey || typ != protowire.BytesType {
		return "", fmt.Errorf("record starts with field %d, not its key", num)
	}
	key, m := protowire.ConsumeString(raw[n:])
	if m < 0 {
		return "", protowire.ParseError(m)
	}
	return key, nil
}

// getRecord reads key's record at seq, or returns nil if there is none
// there in this transaction (see Journal.index).
func getRecord(records *bolt.Bucket, seq uint64, key string) (*Record, error) {
	if seq == 0 {
		return nil, nil
	}
	raw := records.Get(u64(seq))
	if raw == nil {
		return nil, nil
	}
	if stored, err := storedKey(raw); err != nil {
		return nil, fmt.Errorf("record %d: %w", seq, err)
	} else if stored != key {
		return nil, nil
	}
	rec := &Record{Receipt: &cpv1.Receipt{}}
	var receipt []byte
	for len(raw) > 0 {
		num, typ, n := protowire.ConsumeTag(raw)
		if n < 0 {
			return nil, fmt.Errorf("record %d: %w", seq, protowire.ParseError(n))
		}
		raw = raw[n:]
		switch {
		case num == recordReceipt && typ == protowire.BytesType:
			receipt, n = protowire.ConsumeBytes(raw)
		case num == recordUndo && typ == protowire.BytesType:
			var undo []byte
			undo, n = protowire.ConsumeBytes(raw)
			rec.Undo = append(json.RawMessage(nil), undo...) // raw lives only as long as the transaction
		case num == recordLogIndex && typ == protowire.VarintType:
			rec.LogIndex, n = protowire.ConsumeVarint(raw)
		case num == recordRolledBack && typ == protowire.VarintType:
			var v uint64
			v, n = protowire.ConsumeVarint(raw)
			rec.RolledBack = v != 0
		case num == recordKey && typ == protowire.BytesType:
			n = protowire.ConsumeFieldValue(num, typ, raw)
		default:
			n = protowire.ConsumeFieldValue(num, typ, raw)
		}
		if n < 0 {
			return nil, fmt.Errorf("record %d: %w", seq, protowire.ParseError(n))
		}
		raw = raw[n:]
	}
	if err := receiptwire.Unmarshal(receipt, rec.Receipt); err != nil {
		return nil, fmt.Errorf("record %d receipt: %w", seq, err)
	}
	return rec, nil
}

func sessionBucket(tx *bolt.Tx, id string) (*bolt.Bucket, error) {
	b := tx.Bucket(bucketSessions).Bucket([]byte(id))
	if b == nil {
		return nil, fmt.Errorf("%s: %w", id, ErrSessionNotFound)
	}
	return b, nil
}

func u64(v uint64) []byte {
	b := make([]byte, 8)
	binary.BigEndian.PutUint64(b, v)
	return b
}
