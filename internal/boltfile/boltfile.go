// Package boltfile opens the daemons' bbolt files. bbolt locks a file for
// one process and, past its timeout, says only "timeout"; here that says
// what it means: another process, most likely a second daemon started on
// the same --data-dir, has the file open.
package boltfile

import (
	"errors"
	"fmt"
	"time"

	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"
)

// wait is how long Open waits for another process to let go of the file
// (a daemon restarting while its old process still exits); a variable for
// the tests.
var wait = 5 * time.Second

// Open opens (creating if needed) the bbolt file at path; opts may be nil.
func Open(path string, opts *bolt.Options) (*bolt.DB, error) {
	o := bolt.Options{}
	if opts != nil {
		o = *opts
	}
	o.Timeout = wait
	db, err := bolt.Open(path, 0o600, &o)
	if errors.Is(err, berrors.ErrTimeout) {
		return nil, fmt.Errorf("%s is in use by another process (another daemon on the same --data-dir?); waited %s for it", path, wait)
	}
	return db, err
}
