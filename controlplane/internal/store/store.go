// Package store keeps the control plane's durable state in one bbolt file:
// sessions, plans, their receipts, the audit log, the queue of plans still
// to finish and the index of artifacts (whose content lives in a
// content-addressed directory, see package blob).
//
// Bucket tree (every key is a named variable below):
//
//	meta/
//	  schema_version        → uint64, big endian (currently 7)
//	sessions/
//	  <session_id>/
//	    session             → Session (proto): contract, placement, state OPEN or CLOSED, times
//	    owner               → the principal that negotiated it
//	    order               → uint64: its position in session_order
//	session_state/          (schema 3; apart from sessions/, so that a commit rewrites small pages only)
//	  <session_id>/
//	    scene_hash          → scene hash after its last committed operation
//	    plans               → uint64: plans accepted
//	    active_plans        → uint64: plans accepted and not terminal
//	    update_time         → int64 unix nanoseconds: last plan accepted or ended
//	registries/             (schema 3)
//	  <fingerprint>         → ToolRegistry (proto) that session contracts name: plans are checked against it
//	session_order/          (schema 3)
//	  <owner>/
//	    <order>             → session_id, in negotiation order (uint64 big endian)
//	releasing/              (schema 3)
//	  <session_id>          → empty: closed, not yet released on its agent
//	plans/
//	  <owner>/              (schema 3: request ids are unique per owner)
//	    <request_id>/
//	      plan              → Plan (proto) without its schedule
//	      digest            → content digest, to tell a resubmission from a conflict
//	      body/             (schema 3; apart from plan, which every commit rewrites)
//	        request         → SubmitPlanRequest (proto) as accepted
//	        schedule        → operation indices in execution order, uint32 big endian each
//	      receipts/
//	        <sequence>      → Receipt (proto), key uint64 big endian
//	active/
//	  <order>               → "<owner>/<request_id>" of a plan not terminal yet, in submission order
//	audit/                  (schema 2)
//	  <sequence>            → AuditRecord (proto), append-only, key uint64 big endian
//	audit_by_plan/          (schema 2; schema 3 nests it by owner)
//	  <owner>/
//	    <request_id>/
//	      <sequence>        → empty: index of the plan's audit records
//	audit_by_owner/         (schema 3)
//	  <owner>/
//	    <sequence>          → empty: index of the owner's audit records
//	artifacts/              (schema 3)
//	  <session_id>/
//	    <sequence>          → Artifact (proto), append-only per session
//	artifact_names/         (schema 3)
//	  <session_id>/
//	    <name>              → uint64: sequence of the name's newest version
//	tokens/                 (schema 4)
//	  <name>                → Token (proto): principal, scopes, times
//	token_hashes/           (schema 4)
//	  <sha256 of secret>    → name: how a call's bearer token finds its principal
//	agent_principals/       (schema 4)
//	  <agent_id>            → the principal that registered it first, who alone may again
//	approvals/              (schema 5)
//	  <sequence>            → Approval (proto) "apr-<sequence>", with its preview
//	policy_rules/           (schema 5)
//	  <sequence>            → PolicyRule (proto) "rule-<sequence>", persisted by always-allow
//	policy_rule_index/      (schema 5)
//	  <principal>\0<tool>\0<target> → rule id
//	audit_by_session/       (schema 6)
//	  <session_id>/
//	    <sequence>          → empty: the session's redo log, in commit order
//	plans_by_session/       (schema 7)
//	  <session_id>/
//	    <order>             → "<owner>/<request_id>", in submission order
//	audit_by_mutation/      (schema 7)
//	  <blender_mutation_id>/
//	    <sequence>          → empty: the records of a mutation (its receipt, a rollback's)
//
// A plan's body also keeps, from schema 5, policy/<operation_id> →
// "decision\0input_hash" for its operations' audit records.
//
// Receipts are committed before anyone can read them; Watch lets a stream
// wait for the next commit of a plan without polling.
package store

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sync"

	bolt "go.etcd.io/bbolt"
	"google.golang.org/protobuf/proto"

	cpv1 "github.com/blendplane/blendplane/gen/blendplane/controlplane/v1"
	"github.com/blendplane/blendplane/internal/boltfile"
	"github.com/blendplane/blendplane/internal/groupcommit"
)

var (
	bucketMeta            = []byte("meta")
	bucketSessions        = []byte("sessions")
	bucketSessionState    = []byte("session_state")
	bucketPlanBody        = []byte("body")
	bucketRegistries      = []byte("registries")
	bucketSessionOrder    = []byte("session_order")
	bucketReleasing       = []byte("releasing")
	bucketPlans           = []byte("plans")
	bucketActive          = []byte("active")
	bucketReceipts        = []byte("receipts")
	bucketAudit           = []byte("audit")
	bucketAuditIdx        = []byte("audit_by_plan")
	bucketAuditOwner      = []byte("audit_by_owner")
	bucketArtifacts       = []byte("artifacts")
	bucketArtifactNames   = []byte("artifact_names")
	bucketTokens          = []byte("tokens")
	bucketTokenHashes     = []byte("token_hashes")
	bucketAgentPrincipals = []byte("agent_principals")
	bucketApprovals       = []byte("approvals")
	bucketRules           = []byte("policy_rules")
	bucketRuleIndex       = []byte("policy_rule_index")
	bucketOpPolicy        = []byte("policy")
	bucketAuditSession    = []byte("audit_by_session")
	bucketSessionPlans    = []byte("plans_by_session")
	bucketAuditMutation   = []byte("audit_by_mutation") // schema 7; runs and a tail since 8
	bucketMutationTail    = []byte("audit_by_mutation_tail")
	bucketMutationRuns    = []byte("audit_by_mutation_runs")
	bucketOpenSessions    = []byte("open_sessions")     // owner → session id: what a principal holds
	bucketArtifactRefs    = []byte("artifact_refs")     // sha256 → how many artifact records name it
	bucketClosedSessions  = []byte("closed_sessions")   // close time (unix ns) + session id: what may expire
	bucketBlobGarbage     = []byte("blob_garbage")      // sha256: blobs no artifact names since an expiry
	bucketOwnerBytes      = []byte("artifact_bytes")    // owner → the bytes of its sessions' artifact versions
	bucketArtifactVersion = []byte("artifact_versions") // session → name NUL sha256 → its last record's position, and 1 once its content is kept

	keySchemaVersion = []byte("schema_version")
	keySession       = []byte("session")
	keyOwner         = []byte("owner")
	keyOrder         = []byte("order")
	keySceneHash     = []byte("scene_hash")
	keyPlanCount     = []byte("plans")
	keyActiveCount   = []byte("active_plans")
	keyUpdateTime    = []byte("update_time")
	keyPlan          = []byte("plan")
	keyRequest       = []byte("request")
	keySchedule      = []byte("schedule")
	keyDigest        = []byte("digest")
)

var (
	// ErrSessionNotFound: no session with that id.
	ErrSessionNotFound = errors.New("session not found")
	// ErrPlanNotFound: no plan with that request id.
	ErrPlanNotFound = errors.New("plan not found")
	// ErrPlanExists: a plan with that request id was already accepted.
	ErrPlanExists = errors.New("plan already exists")
	// ErrSessionClosed: the session was closed; it takes no more plans.
	ErrSessionClosed = errors.New("session closed")
	// ErrArtifactNotFound: no artifact with that name (or version).
	ErrArtifactNotFound = errors.New("artifact not found")
)

// Store is the control plane's bbolt database.
type Store struct {
	db *bolt.DB
	// writes runs every write: concurrent ones (plans accepted, receipts
	// of different plans) share transactions instead of queueing for
	// bbolt's one writer, each behind the others' fsyncs.
	writes *groupcommit.DB

	mu        sync.Mutex
	watchers  map[PlanRef]chan struct{}
	progress  map[PlanRef]*cpv1.Progress // live only
	tails     map[PlanRef]tail           // see tail.go
	tailBytes int

	// Observe, if set, is told of every commit of receipts or of a plan's
	// end, after it is durable (metrics). It must not block.
	Observe func(plan *cpv1.Plan, receipts []*cpv1.Receipt, ended bool)
}

func (s *Store) observe(plan *cpv1.Plan, receipts []*cpv1.Receipt, ended bool) {
	if s.Observe != nil && (len(receipts) > 0 || ended) {
		s.Observe(plan, receipts, ended)
	}
}

// Open opens (creating if needed) the database at path and migrates it.
func Open(path string) (*Store, error) {
	db, err := boltfile.Open(path, &bolt.Options{InitialMmapSize: mmapSize})
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	s := &Store{db: db, writes: groupcommit.New(db), watchers: map[PlanRef]chan struct{}{}, progress: map[PlanRef]*cpv1.Progress{},
		tails: map[PlanRef]tail{}}
	if err := migrate(db); err != nil {
		db.Close()
		return nil, err
	}
	return s, nil
}

// update runs fn in a durable write transaction, maybe shared with other
// writes: fn may run more than once, so it assigns what it returns and
// never accumulates (groupcommit.DB.Update).
func (s *Store) update(fn func(*bolt.Tx) error) error { return s.writes.Update(fn) }

// Commits is how many durable transactions the store has committed.
func (s *Store) Commits() uint64 { return s.writes.Commits() }

// Close closes the database.
func (s *Store) Close() error { return s.db.Close() }

func putProto(b *bolt.Bucket, key []byte, m proto.Message) error {
	raw, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
	if err != nil {
		return fmt.Errorf("encode %s: %w", key, err)
	}
	return b.Put(key, raw)
}

func getProto(b *bolt.Bucket, key []byte, m proto.Message) error {
	raw := b.Get(key)
	if raw == nil {
		return fmt.Errorf("missing key %s", key)
	}
	if err := proto.Unmarshal(raw, m); err != nil {
		return fmt.Errorf("decode %s: %w", key, err)
	}
	return nil
}

func unmarshal(raw []byte, m proto.Message) error {
	if err := proto.Unmarshal(raw, m); err != nil {
		return fmt.Errorf("decode %T: %w", m, err)
	}
	return nil
}

// mmapSize is the database's first memory map. bbolt maps the file anew
// each time it outgrows the map (doubling it, up to 1 GiB), and a remap
// waits for every read transaction to end and copies the writing one's
// nodes out of the old map: a 100,000-operation plan stored in a new
// database remapped it at every doubling (store.BenchmarkCreatePlan's
// 100,000: 0.38–0.45 s → 0.24–0.28 s). Address space only: pages are read
// in as they are used.
const mmapSize = 256 << 20

// appending readies a bucket whose keys only grow (sequence numbers) for
// this transaction's puts: bbolt then fills a page before it splits it,
// where its default splits at half, leaving every page of an appended
// bucket half empty: twice the file, and more pages written per commit.
func appending(b *bolt.Bucket) *bolt.Bucket {
	b.FillPercent = 1
	return b
}

func u64(v uint64) []byte {
	b := make([]byte, 8)
	binary.BigEndian.PutUint64(b, v)
	return b
}

// getU64 reads a uint64 value; a missing key is 0.
func getU64(b *bolt.Bucket, key []byte) uint64 {
	if v := b.Get(key); len(v) == 8 {
		return binary.BigEndian.Uint64(v)
	}
	return 0
}

// addU64 adds delta to a uint64 value, never below 0.
func addU64(b *bolt.Bucket, key []byte, delta int64) error {
	v := int64(getU64(b, key)) + delta
	return b.Put(key, u64(uint64(max(v, 0))))
}
