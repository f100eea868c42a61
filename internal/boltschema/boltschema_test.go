package boltschema

import (
	"encoding/binary"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	bolt "go.etcd.io/bbolt"
)

var meta, key = []byte("meta"), []byte("schema_version")

func version(t *testing.T, db *bolt.DB) uint64 {
	t.Helper()
	var v uint64
	db.View(func(tx *bolt.Tx) error {
		v = binary.BigEndian.Uint64(tx.Bucket(meta).Get(key))
		return nil
	})
	return v
}

// Migrations run once each, in order, from the stored version; a newer or
// malformed version, and a failing step, are refused and change nothing.
func TestMigrate(t *testing.T) {
	db, err := bolt.Open(filepath.Join(t.TempDir(), "db"), 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var ran []int
	step := func(i int) func(*bolt.Tx) error {
		return func(tx *bolt.Tx) error {
			ran = append(ran, i)
			_, err := tx.CreateBucketIfNotExists([]byte{byte('a' + i)})
			return err
		}
	}
	migrate := func(steps ...func(*bolt.Tx) error) error {
		return db.Update(func(tx *bolt.Tx) error { return Migrate(tx, "test db", meta, key, steps) })
	}
	if err := migrate(step(0), step(1)); err != nil || version(t, db) != 2 || len(ran) != 2 {
		t.Fatalf("new database: %v, version %d, ran %v", err, version(t, db), ran)
	}
	ran = nil
	if err := migrate(step(0), step(1), step(2)); err != nil || version(t, db) != 3 || len(ran) != 1 || ran[0] != 2 {
		t.Fatalf("one step newer: %v, version %d, ran %v", err, version(t, db), ran)
	}
	if err := migrate(step(0)); err == nil || !strings.Contains(err.Error(), "test db schema version 3 is newer than this binary's 1") {
		t.Fatalf("older binary: %v", err)
	}
	boom := errors.New("boom")
	err = migrate(step(0), step(1), step(2), func(tx *bolt.Tx) error {
		tx.CreateBucketIfNotExists([]byte("half"))
		return boom
	})
	if !errors.Is(err, boom) || !strings.Contains(err.Error(), "migrate test db to version 4") || version(t, db) != 3 {
		t.Fatalf("failing step: %v, version %d", err, version(t, db))
	}
	db.View(func(tx *bolt.Tx) error {
		if tx.Bucket([]byte("half")) != nil {
			t.Error("a failed migration left its work")
		}
		return nil
	})
	db.Update(func(tx *bolt.Tx) error { return tx.Bucket(meta).Put(key, []byte("x")) })
	if err := migrate(step(0)); err == nil || !strings.Contains(err.Error(), "1 bytes, not 8") {
		t.Fatalf("malformed version: %v", err)
	}
}
