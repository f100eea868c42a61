package store

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strings"

	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"
	"google.golang.org/protobuf/proto"

	cpv1 "github.com/blendplane/blendplane/gen/blendplane/controlplane/v1"
	"github.com/blendplane/blendplane/internal/boltschema"
)

// LegacyOwner owns the sessions and plans made before plans were keyed by
// their owner (schema 3); it is also the owner of calls that carry no
// principal.
const LegacyOwner = "anonymous"

// migrations[i] upgrades a database from schema version i to i+1, inside
// the transaction that records the new version.
var migrations = []func(tx *bolt.Tx) error{
	// 0 → 1: the initial bucket tree.
	func(tx *bolt.Tx) error {
		return createBuckets(tx, bucketSessions, bucketPlans, bucketActive)
	},
	// 1 → 2: the audit log, recorded from now on.
	func(tx *bolt.Tx) error {
		return createBuckets(tx, bucketAudit, bucketAuditIdx)
	},
	migrateOwners,
	// 3 → 4: bearer tokens, and the principals of agent ids.
	func(tx *bolt.Tx) error {
		return createBuckets(tx, bucketTokens, bucketTokenHashes, bucketAgentPrincipals)
	},
	// 4 → 5: approvals and persisted policy rules.
	func(tx *bolt.Tx) error {
		return createBuckets(tx, bucketApprovals, bucketRules, bucketRuleIndex)
	},
	migrateSessionAudit,
	// 6 → 7: plans by session (and audit records by Blender mutation id,
	// in a layout 7 → 8 replaces: it builds the index it makes now).
	migrateSessionPlans,
	migrateMutationAudit,
	migrateOpenSessions,
	migrateArtifactRefs,
	migrateOwnerBytes,
	migrateArtifactVersions,
	migratePreviewRenders,
}

func migrate(db *bolt.DB) error {
	return db.Update(func(tx *bolt.Tx) error {
		return boltschema.Migrate(tx, "store", bucketMeta, keySchemaVersion, migrations)
	})
}

func createBuckets(tx *bolt.Tx, names ...[]byte) error {
	for _, b := range names {
		if _, err := tx.CreateBucketIfNotExists(b); err != nil {
			return err
		}
	}
	return nil
}

// migrateOwners (2 → 3) makes sessions resources with a state and an owner,
// keys plans and their audit index by owner (LegacyOwner for every existing
// one), and adds the session order, release queue, owner audit index and
// artifact buckets.
func migrateOwners(tx *bolt.Tx) error {
	if err := createBuckets(tx, bucketRegistries, bucketSessionState, bucketSessionOrder, bucketReleasing, bucketAuditOwner, bucketArtifacts, bucketArtifactNames); err != nil {
		return err
	}
	// Sessions: contract, agent_address, runtime_id, registry → session,
	// owner, order; registries are kept once, by fingerprint.
	sessions := tx.Bucket(bucketSessions)
	order, err := tx.Bucket(bucketSessionOrder).CreateBucketIfNotExists([]byte(LegacyOwner))
	if err != nil {
		return err
	}
	var ids [][]byte
	if err := sessions.ForEachBucket(func(k []byte) error { ids = append(ids, append([]byte(nil), k...)); return nil }); err != nil {
		return err
	}
	for _, id := range ids {
		b := sessions.Bucket(id)
		c := &cpv1.SessionContract{}
		if err := getProto(b, []byte("contract"), c); err != nil {
			return fmt.Errorf("session %s: %w", id, err)
		}
		info := &cpv1.Session{
			SessionId: string(id), State: cpv1.Session_STATE_OPEN, Contract: c,
			AgentId: c.GetAgentId(), RuntimeId: string(b.Get([]byte("runtime_id"))), CreateTime: c.GetCreateTime(),
		}
		if err := putProto(b, keySession, info); err != nil {
			return err
		}
		seq, err := order.NextSequence()
		if err != nil {
			return err
		}
		for _, kv := range [][2][]byte{{keyOwner, []byte(LegacyOwner)}, {keyOrder, u64(seq)}} {
			if err := b.Put(kv[0], kv[1]); err != nil {
				return err
			}
		}
		state, err := tx.Bucket(bucketSessionState).CreateBucket(id)
		if err != nil {
			return err
		}
		if err := state.Put(keySceneHash, []byte(c.GetBaselineSceneHash())); err != nil {
			return err
		}
		if err := order.Put(u64(seq), id); err != nil {
			return err
		}
		reg := &cpv1.ToolRegistry{}
		if err := getProto(b, []byte("registry"), reg); err != nil {
			return fmt.Errorf("session %s: %w", id, err)
		}
		if err := putRegistry(tx, reg); err != nil {
			return err
		}
		for _, old := range []string{"contract", "agent_address", "runtime_id", "registry"} {
			if err := b.Delete([]byte(old)); err != nil {
				return err
			}
		}
	}
	// Plans and their audit index move under the legacy owner.
	if err := nestUnder(tx, bucketPlans, LegacyOwner); err != nil {
		return err
	}
	if err := nestUnder(tx, bucketAuditIdx, LegacyOwner); err != nil {
		return err
	}
	// Each plan's request and schedule move into its body; each session
	// counts its plans.
	plans := tx.Bucket(bucketPlans).Bucket([]byte(LegacyOwner))
	err = plans.ForEachBucket(func(k []byte) error {
		pb := plans.Bucket(k)
		body, err := pb.CreateBucket(bucketPlanBody)
		if err != nil {
			return err
		}
		for _, key := range [][]byte{keyRequest, keySchedule} {
			if err := body.Put(key, pb.Get(key)); err != nil {
				return err
			}
			if err := pb.Delete(key); err != nil {
				return err
			}
		}
		p := &cpv1.Plan{}
		if err := getProto(pb, keyPlan, p); err != nil {
			return err
		}
		sb := tx.Bucket(bucketSessionState).Bucket([]byte(p.GetSessionId()))
		if sb == nil {
			return nil
		}
		if err := addU64(sb, keyPlanCount, 1); err != nil {
			return err
		}
		if !IsTerminal(p.GetState()) {
			return addU64(sb, keyActiveCount, 1)
		}
		return nil
	})
	if err != nil {
		return err
	}
	// The active queue names plans by owner too.
	active := tx.Bucket(bucketActive)
	var keys, vals [][]byte
	if err := active.ForEach(func(k, v []byte) error {
		keys, vals = append(keys, append([]byte(nil), k...)), append(vals, append([]byte(nil), v...))
		return nil
	}); err != nil {
		return err
	}
	for i, k := range keys {
		if err := active.Put(k, []byte(PlanRef{Owner: LegacyOwner, RequestID: string(vals[i])}.String())); err != nil {
			return err
		}
	}
	// Every existing audit record belongs to the legacy owner.
	owner, err := tx.Bucket(bucketAuditOwner).CreateBucketIfNotExists([]byte(LegacyOwner))
	if err != nil {
		return err
	}
	return tx.Bucket(bucketAudit).ForEach(func(k, _ []byte) error {
		if len(k) != 8 {
			return nil
		}
		return owner.Put(k, nil)
	})
}

// nestUnder moves every child bucket of the root bucket name into
// name/owner/, keeping their keys: name/x/ becomes name/owner/x/. (They go
// through a temporary root bucket: a bucket cannot be renamed.)
func nestUnder(tx *bolt.Tx, name []byte, owner string) error {
	tmpName := append(append([]byte(nil), name...), ".v3"...)
	tmp, err := tx.CreateBucket(tmpName)
	if err != nil {
		return err
	}
	if err := moveChildren(tx, tx.Bucket(name), tmp); err != nil {
		return err
	}
	if err := tx.DeleteBucket(name); err != nil {
		return err
	}
	root, err := tx.CreateBucket(name)
	if err != nil {
		return err
	}
	dst, err := root.CreateBucket([]byte(owner))
	if err != nil {
		return err
	}
	if err := moveChildren(tx, tmp, dst); err != nil {
		return err
	}
	return tx.DeleteBucket(tmpName)
}

// moveChildren moves every child bucket of src into dst.
func moveChildren(tx *bolt.Tx, src, dst *bolt.Bucket) error {
	var children [][]byte
	if err := src.ForEachBucket(func(k []byte) error { children = append(children, append([]byte(nil), k...)); return nil }); err != nil {
		return err
	}
	for _, k := range children {
		if err := tx.MoveBucket(k, src, dst); err != nil {
			return fmt.Errorf("move bucket %s: %w", k, err)
		}
	}
	return nil
}

// decodeU64 reads a big-endian uint64 key.
func decodeU64(k []byte) uint64 { return binary.BigEndian.Uint64(k) }

// migrateSessionAudit (5 → 6) indexes the audit log by session: in commit
// order, a session's records are its redo log, from which a session whose
// agent was lost is rebuilt on another.
func migrateSessionAudit(tx *bolt.Tx) error {
	if err := createBuckets(tx, bucketAuditSession); err != nil {
		return err
	}
	return eachAudit(tx, func(k []byte, rec *cpv1.AuditRecord) error {
		if rec.GetSessionId() == "" {
			return nil
		}
		b, err := tx.Bucket(bucketAuditSession).CreateBucketIfNotExists([]byte(rec.GetSessionId()))
		if err != nil {
			return err
		}
		return b.Put(k, nil)
	})
}

// migrateMutationAudit (7 → 8) indexes the audit log by Blender mutation
// id in sorted runs and a tail (indexMutation), replacing schema 7's
// bucket per mutation.
func migrateMutationAudit(tx *bolt.Tx) error {
	if err := tx.DeleteBucket(bucketAuditMutation); err != nil && !errors.Is(err, berrors.ErrBucketNotFound) {
		return err
	}
	if err := createBuckets(tx, bucketMutationTail, bucketMutationRuns); err != nil {
		return err
	}
	return eachAudit(tx, func(k []byte, rec *cpv1.AuditRecord) error {
		return indexMutation(tx, rec.GetBlenderMutationId(), k)
	})
}

// eachAudit calls fn with every audit record and its key, oldest first.
func eachAudit(tx *bolt.Tx, fn func(k []byte, rec *cpv1.AuditRecord) error) error {
	return tx.Bucket(bucketAudit).ForEach(func(k, v []byte) error {
		rec := &cpv1.AuditRecord{}
		if err := proto.Unmarshal(v, rec); err != nil {
			return fmt.Errorf("audit record %d: %w", binary.BigEndian.Uint64(k), err)
		}
		return fn(k, rec)
	})
}

// migrateSessionPlans (6 → 7) indexes plans by session, in the order they
// were accepted (create time; request id among equals).
func migrateSessionPlans(tx *bolt.Tx) error {
	if err := createBuckets(tx, bucketSessionPlans); err != nil {
		return err
	}
	type entry struct {
		ref  PlanRef
		plan *cpv1.Plan
	}
	var all []entry
	plans := tx.Bucket(bucketPlans)
	err := plans.ForEachBucket(func(owner []byte) error {
		return plans.Bucket(owner).ForEachBucket(func(id []byte) error {
			p := &cpv1.Plan{}
			if err := getProto(plans.Bucket(owner).Bucket(id), keyPlan, p); err != nil {
				return fmt.Errorf("plan %s/%s: %w", owner, id, err)
			}
			all = append(all, entry{PlanRef{string(owner), string(id)}, p})
			return nil
		})
	})
	if err != nil {
		return err
	}
	slices.SortStableFunc(all, func(a, b entry) int {
		if c := a.plan.GetCreateTime().AsTime().Compare(b.plan.GetCreateTime().AsTime()); c != 0 {
			return c
		}
		return strings.Compare(a.ref.String(), b.ref.String())
	})
	for _, e := range all {
		if err := indexSessionPlan(tx, e.plan.GetSessionId(), e.ref); err != nil {
			return err
		}
	}
	return nil
}

// migrateOpenSessions (8 → 9) indexes the sessions that are neither closed
// nor broken by their owner.
func migrateOpenSessions(tx *bolt.Tx) error {
	if err := createBuckets(tx, bucketOpenSessions); err != nil {
		return err
	}
	return tx.Bucket(bucketSessions).ForEachBucket(func(id []byte) error {
		sess, err := readSession(tx, string(id))
		if err != nil || sess.Closed() || sess.Broken() {
			return err
		}
		return markOpen(tx, sess.Owner, id)
	})
}

// migrateOwnerBytes (10 → 11) sums the sizes of each principal's artifact
// records, for its quota (ArtifactBytes).
func migrateOwnerBytes(tx *bolt.Tx) error {
	if err := createBuckets(tx, bucketOwnerBytes); err != nil {
		return err
	}
	return tx.Bucket(bucketArtifacts).ForEachBucket(func(id []byte) error {
		return tx.Bucket(bucketArtifacts).Bucket(id).ForEach(func(_, v []byte) error {
			a := &cpv1.Artifact{}
			if err := proto.Unmarshal(v, a); err != nil {
				return err
			}
			return addOwnerBytes(tx, a.GetSessionId(), a.GetSizeBytes())
		})
	})
}

// migrateArtifactVersions (11 → 12) indexes each session's artifact
// versions (a name and its content) and counts each principal's bytes
// again, a version once: migrateOwnerBytes counted every record.
func migrateArtifactVersions(tx *bolt.Tx) error {
	if err := tx.DeleteBucket(bucketOwnerBytes); err != nil {
		return err
	}
	if err := createBuckets(tx, bucketOwnerBytes, bucketArtifactVersion); err != nil {
		return err
	}
	return tx.Bucket(bucketArtifacts).ForEachBucket(func(id []byte) error {
		versions, err := tx.Bucket(bucketArtifactVersion).CreateBucketIfNotExists(id)
		if err != nil {
			return err
		}
		return tx.Bucket(bucketArtifacts).Bucket(id).ForEach(func(k, v []byte) error {
			a := &cpv1.Artifact{}
			if err := proto.Unmarshal(v, a); err != nil {
				return err
			}
			return addVersion(tx, versions, a, bytes.Clone(k))
		})
	})
}

// migratePreviewRenders (12 → 13) names, in the artifact record of each
// preview's render made before renders named their plan, the plan its
// approval is for: recorded with no plan and no operation, it read as an
// upload (pushed into rebuilt and forked sandboxes, labelled so).
func migratePreviewRenders(tx *bolt.Tx) error {
	approvals := tx.Bucket(bucketApprovals)
	var legacy [][]byte // updated after the walk: ForEach's bucket must not change under it
	err := approvals.ForEach(func(k, v []byte) error {
		ap := &cpv1.Approval{}
		if err := proto.Unmarshal(v, ap); err != nil {
			return err
		}
		if r := ap.GetPreview().GetRender(); r != nil && r.GetRequestId() == "" && r.GetOperationId() == "" {
			legacy = append(legacy, bytes.Clone(k))
		}
		return nil
	})
	if err != nil {
		return err
	}
	for _, k := range legacy {
		ap := &cpv1.Approval{}
		if err := getProto(approvals, k, ap); err != nil {
			return err
		}
		render := ap.GetPreview().GetRender()
		render.RequestId = ap.GetRequestId()
		if err := putProto(approvals, k, ap); err != nil {
			return err
		}
		list := tx.Bucket(bucketArtifacts).Bucket([]byte(render.GetSessionId()))
		versions := tx.Bucket(bucketArtifactVersion).Bucket([]byte(render.GetSessionId()))
		if list == nil || versions == nil {
			continue // expired
		}
		v, ok := readVersion(versions, render.GetName(), render.GetSha256())
		if !ok {
			continue
		}
		a := &cpv1.Artifact{}
		if err := getProto(list, v.seq, a); err != nil {
			return err
		}
		if a.GetRequestId() == "" && a.GetOperationId() == "" {
			a.RequestId = ap.GetRequestId()
			if err := putProto(list, bytes.Clone(v.seq), a); err != nil {
				return err
			}
		}
	}
	return nil
}

// migrateArtifactRefs (9 → 10) counts the artifact records naming each
// blob and indexes closed sessions by their close time, for the expiry of
// closed sessions' artifacts (ExpireArtifacts, Garbage).
func migrateArtifactRefs(tx *bolt.Tx) error {
	if err := createBuckets(tx, bucketArtifactRefs, bucketClosedSessions, bucketBlobGarbage); err != nil {
		return err
	}
	err := tx.Bucket(bucketArtifacts).ForEachBucket(func(id []byte) error {
		return tx.Bucket(bucketArtifacts).Bucket(id).ForEach(func(_, v []byte) error {
			a := &cpv1.Artifact{}
			if err := proto.Unmarshal(v, a); err != nil {
				return err
			}
			return addRef(tx, a.GetSha256(), 1)
		})
	})
	if err != nil {
		return err
	}
	return tx.Bucket(bucketSessions).ForEachBucket(func(id []byte) error {
		sess, err := readSession(tx, string(id))
		if err != nil || !sess.Closed() {
			return err
		}
		return markClosed(tx, string(id), sess.Info.GetCloseTime().AsTime())
	})
}
