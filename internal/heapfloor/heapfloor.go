// Package heapfloor keeps a small heap from being collected too often.
//
// Go's default GC starts a collection each time the heap doubles its live
// bytes. A daemon whose live heap is ~10 MiB but that allocates per request
// (protobuf, bbolt's nodes, gRPC frames) then collects every hundred
// milliseconds under load, and each collection's mark workers take CPU
// from the Blenders and the other daemon on the same machine. A floor under
// the heap goal trades a few tens of MiB for far fewer collections; once
// the live heap is above half the floor the runtime's own setting applies.
package heapfloor

import (
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
)

// Keep sets, after every collection, the GC percent that makes the next
// heap goal at least floor bytes (never below Go's default, 100). An
// operator's GOGC wins: with GOGC set, Keep does nothing.
func Keep(floor uint64) {
	if _, set := os.LookupEnv("GOGC"); set {
		return
	}
	sample := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	var arm func()
	arm = func() {
		// A cleanup runs once the collection that found its object
		// unreachable is over: once per GC cycle, re-armed each time.
		runtime.AddCleanup(new(sentinel), func(struct{}) {
			metrics.Read(sample)
			debug.SetGCPercent(percentFor(sample[0].Value.Uint64(), floor))
			arm()
		}, struct{}{})
	}
	arm()
	runtime.GC() // the first cycle sets the percent for the heap as it is
}

// sentinel holds a pointer so that it is a heap object of its own (the
// tiny allocator would batch a pointer-free one with others, and delay its
// cleanup by their lifetimes).
type sentinel struct{ _ *byte }

// percentFor is the GC percent whose goal, live × (1 + percent/100), reaches
// floor, or Go's default if that is more.
func percentFor(live, floor uint64) int {
	const goDefault = 100
	if live >= floor {
		return goDefault
	}
	return max(goDefault, int((floor-live)*100/max(live, 1)))
}
