package heapfloor

import (
	"os"
	"runtime"
	"runtime/metrics"
	"testing"
	"time"
)

// TestKeep: with a small live heap the goal is the floor (not below it, and
// not many times it); with a live heap above the floor, Go's default
// applies; once the heap shrinks, the floor again.
func TestKeep(t *testing.T) {
	unsetGOGC(t)
	const floor = 32 << 20
	defer Keep(floor)()
	near := func(goal uint64) bool { return goal >= floor && goal <= floor+floor/8 }
	if g := waitGoal(near); !near(g) {
		t.Fatalf("heap goal %.1f MiB with a small live heap, want %d–%d MiB", mib(g), floor>>20, (floor+floor/8)>>20)
	}
	big := make([][]byte, 0, 40)
	for range cap(big) { // 40 MiB live, above the floor
		big = append(big, make([]byte, 1<<20))
	}
	if p := waitPercent(goDefault); p != goDefault {
		t.Fatalf("GC percent %d with %d MiB live, above the floor; want Go's default %d", p, len(big), goDefault)
	}
	runtime.KeepAlive(big)
	big = nil
	if g := waitGoal(near); !near(g) {
		t.Fatalf("heap goal %.1f MiB once the live heap shrank, want %d–%d MiB again", mib(g), floor>>20, (floor+floor/8)>>20)
	}
}

// TestKeepTinyHeap: a live heap far below the floor does not get a goal
// far above it (the runtime scales its own minimum with the percent).
func TestKeepTinyHeap(t *testing.T) {
	unsetGOGC(t)
	const floor = 256 << 20 // the test binary's live heap is ~1/100 of it
	defer Keep(floor)()
	near := func(goal uint64) bool { return goal >= floor && goal <= floor+floor/8 }
	if g := waitGoal(near); !near(g) {
		t.Fatalf("heap goal %.1f MiB, want %d–%d MiB", mib(g), floor>>20, (floor+floor/8)>>20)
	}
}

func TestKeepLeavesGOGC(t *testing.T) {
	t.Setenv("GOGC", "100")
	defer Keep(1 << 30)()
	runtime.GC()
	runtime.GC()
	if g := heapGoal(); g >= 1<<30 {
		t.Fatalf("heap goal %.1f MiB: Keep changed the GC though GOGC was set", mib(g))
	}
}

func TestKeepStops(t *testing.T) {
	unsetGOGC(t)
	Keep(1 << 30)()
	for range 3 {
		runtime.GC()
	}
	time.Sleep(10 * time.Millisecond) // a cleanup queued before the stop runs
	runtime.GC()
	if p := currentPercent(); p != goDefault {
		t.Fatalf("GC percent %d after stop, want %d", p, goDefault)
	}
}

func TestPercentFor(t *testing.T) {
	for _, c := range []struct {
		live, floor uint64
		want        int
	}{
		{10 << 20, 64 << 20, 540},
		{3 << 20, 64 << 20, 1600}, // capped: the runtime's minimum × 16 is the floor
		{0, 64 << 20, 1600},       // not an int32 overflow ("GC off")
		{40 << 20, 64 << 20, 100}, // 60 % would lower the goal below Go's own
		{64 << 20, 64 << 20, 100},
		{1 << 30, 64 << 20, 100},
		{3 << 20, 10 << 20, 234}, // 233.3…, rounded up: the goal reaches the floor
		{1 << 20, 2 << 20, 100},  // a floor under the runtime's minimum: Go's default
	} {
		if got := percentFor(c.live, c.floor); got != c.want {
			t.Errorf("percentFor(%d, %d) = %d, want %d", c.live, c.floor, got, c.want)
		}
	}
}

// unsetGOGC unsets GOGC for the test (t.Setenv restores it after).
func unsetGOGC(t *testing.T) {
	t.Setenv("GOGC", "")
	os.Unsetenv("GOGC")
}

// waitGoal runs collections until cond holds for the heap goal (a cleanup
// runs on its own goroutine after the cycle) or a second has passed.
func waitGoal(cond func(uint64) bool) uint64 {
	var g uint64
	for deadline := time.Now().Add(time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		runtime.GC()
		if g = heapGoal(); cond(g) {
			break
		}
	}
	return g
}

// waitPercent collects until the cleanup has set the percent want, or a
// second has passed, and returns the percent.
func waitPercent(want int) int {
	var p int
	for deadline := time.Now().Add(time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		runtime.GC()
		if p = currentPercent(); p == want {
			break
		}
	}
	return p
}

func currentPercent() int {
	s := []metrics.Sample{{Name: "/gc/gogc:percent"}}
	metrics.Read(s)
	return int(s[0].Value.Uint64())
}

func heapGoal() uint64 {
	s := []metrics.Sample{{Name: "/gc/heap/goal:bytes"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

func mib(b uint64) float64 { return float64(b) / (1 << 20) }
