// Package undecoded carries a request that did not decode from a server's
// gRPC codec to the interceptor that refuses it. gRPC answers a codec's
// error INTERNAL, so the daemons' codecs fail nothing: they empty the
// message, record why, and their validation, which sees the same message
// next, refuses it with a structured code.
package undecoded

import (
	"sync"

	"google.golang.org/protobuf/proto"
)

// Requests holds why each recorded message did not decode, until taken.
type Requests struct{ m sync.Map }

// Record empties m and keeps why it did not decode.
func (r *Requests) Record(m proto.Message, why error) {
	proto.Reset(m)
	r.m.Store(m, why)
}

// Take returns, and forgets, why m did not decode; nil if it did (or r is
// nil).
func (r *Requests) Take(m any) error {
	if r == nil {
		return nil
	}
	if why, ok := r.m.LoadAndDelete(m); ok {
		return why.(error)
	}
	return nil
}
