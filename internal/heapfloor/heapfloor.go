// Package heapfloor keeps a small heap from being collected too often.
//
// Go's default GC starts a collection each time the heap doubles its live
// bytes. A daemon whose live heap is a few MiB but that allocates per
// request (protobuf, bbolt's nodes, gRPC frames) then collects every hundred
// milliseconds under load, and each collection's mark workers take CPU from
// the Blenders and the other daemon on the same machine. A floor under the
// heap goal trades a few tens of MiB for far fewer collections; once the
// live heap is above half the floor, Go's default (GOGC=100) applies.
package heapfloor

import (
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync"
)

// Keep sets, after every collection, the GC percent that makes the next
// heap goal about floor bytes, or Go's default 100 if that gives more. It
// returns a function that stops it and puts Go's default back. An
// operator's GOGC (any non-empty value) wins: then Keep does nothing.
func Keep(floor uint64) (stop func()) {
	if os.Getenv("GOGC") != "" {
		return func() {}
	}
	var mu sync.Mutex // a cleanup running as stop is called sets no percent after it
	stopped := false
	sample := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	var arm func()
	arm = func() {
		// A cleanup runs after the collection that found its object
		// unreachable, on the runtime's cleanup goroutine: usually once per
		// cycle (it may lag a cycle under heavy churn; the cap in percentFor
		// bounds what a stale percent can do). Each run arms the next.
		runtime.AddCleanup(new(sentinel), func(struct{}) {
			mu.Lock()
			defer mu.Unlock()
			if stopped {
				return
			}
			metrics.Read(sample)
			debug.SetGCPercent(percentFor(sample[0].Value.Uint64(), floor))
			arm()
		}, struct{}{})
	}
	arm()
	runtime.GC() // the first cycle sets the percent for the heap as it is
	return func() {
		mu.Lock()
		defer mu.Unlock()
		stopped = true
		debug.SetGCPercent(goDefault)
	}
}

// sentinel holds a pointer so that it is a heap object of its own (the
// tiny allocator would batch a pointer-free one with others, and delay its
// cleanup by their lifetimes).
type sentinel struct{ _ *byte }

const (
	goDefault = 100
	// runtimeHeapMinimum is the Go runtime's least heap goal at GOGC=100
	// (defaultHeapMinimum, 4 MiB; 512 KiB under GOEXPERIMENT=heapminimum512kib).
	// The runtime scales it with the percent: a goal is never below
	// runtimeHeapMinimum × percent/100.
	runtimeHeapMinimum = 4 << 20
)

// percentFor is the GC percent whose goal, live × (1 + percent/100), reaches
// floor (rounded up), or Go's default if that is more. It is capped at the
// percent whose scaled runtime minimum is the floor: a smaller live heap
// then gets the floor from that minimum, where the uncapped percent would
// set a goal many times the floor (and, near zero live bytes, overflow
// the runtime's int32 into "GC off").
func percentFor(live, floor uint64) int {
	if live >= floor {
		return goDefault
	}
	live = max(live, 1)
	p := ((floor-live)*100 + live - 1) / live
	return max(goDefault, int(min(p, floor*100/runtimeHeapMinimum)))
}
