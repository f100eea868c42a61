// Package boltschema upgrades the schema of a bbolt database in place: the
// control plane's store and agentd's journal each keep a version number and a
// list of migrations, and open through Migrate.
package boltschema

import (
	"encoding/binary"
	"fmt"

	bolt "go.etcd.io/bbolt"
)

// Migrate brings the schema version stored under meta/key in tx up to
// len(steps), running steps[v] to go from version v to v+1 (a new database
// is at version 0 and runs them all). A version newer than len(steps) (a
// database written by a newer binary) and a version that is not 8 bytes are
// refused and nothing changes. what names the database in errors.
func Migrate(tx *bolt.Tx, what string, meta, key []byte, steps []func(*bolt.Tx) error) error {
	b, err := tx.CreateBucketIfNotExists(meta)
	if err != nil {
		return err
	}
	var version uint64
	if v := b.Get(key); v != nil {
		if len(v) != 8 {
			return fmt.Errorf("%s schema version is %d bytes, not 8: not a database of this program", what, len(v))
		}
		version = binary.BigEndian.Uint64(v)
	}
	latest := uint64(len(steps))
	if version > latest {
		return fmt.Errorf("%s schema version %d is newer than this binary's %d", what, version, latest)
	}
	for ; version < latest; version++ {
		if err := steps[version](tx); err != nil {
			return fmt.Errorf("migrate %s to version %d: %w", what, version+1, err)
		}
	}
	return b.Put(key, binary.BigEndian.AppendUint64(nil, version))
}
