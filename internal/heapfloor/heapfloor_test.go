package heapfloor

import (
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"testing"
	"time"
)

// TestKeepLeavesGOGC runs first: a Keep stays armed for the rest of the
// process.
func TestKeepLeavesGOGC(t *testing.T) {
	t.Setenv("GOGC", "100")
	defer debug.SetGCPercent(debug.SetGCPercent(100))
	Keep(1 << 30)
	runtime.GC()
	runtime.GC()
	if g := heapGoal(); g >= 1<<30 {
		t.Fatalf("heap goal %d MiB: Keep changed the GC though GOGC was set", g>>20)
	}
}

// TestKeep: with a small live heap the goal rises to the floor after a
// collection; with a live heap above the floor, Go's default applies again.
func TestKeep(t *testing.T) {
	t.Setenv("GOGC", "") // restored after the test
	os.Unsetenv("GOGC")
	defer debug.SetGCPercent(debug.SetGCPercent(100))
	const floor = 256 << 20
	Keep(floor)
	if g := waitGoal(t, func(goal uint64) bool { return goal >= floor }); g < floor {
		t.Fatalf("heap goal %d MiB with a small live heap, want ≥ %d MiB", g>>20, floor>>20)
	}
	big := make([][]byte, 0, 320)
	for range 320 { // 320 MiB live, above the floor
		big = append(big, make([]byte, 1<<20))
	}
	if p := currentPercent(t, &big); p != 100 {
		t.Fatalf("GC percent %d with %d MiB live, above the floor; want Go's default 100", p, len(big))
	}
	big = nil
	if g := waitGoal(t, func(goal uint64) bool { return goal >= floor }); g < floor {
		t.Fatalf("heap goal %d MiB once the live heap shrank, want ≥ %d MiB again", g>>20, floor>>20)
	}
}

func TestPercentFor(t *testing.T) {
	for _, c := range []struct {
		live, floor uint64
		want        int
	}{
		{10 << 20, 64 << 20, 540},
		{0, 64 << 20, 64 << 20 * 100},
		{40 << 20, 64 << 20, 100}, // 60 % would lower the goal below Go's own
		{64 << 20, 64 << 20, 100},
		{1 << 30, 64 << 20, 100},
	} {
		if got := percentFor(c.live, c.floor); got != c.want {
			t.Errorf("percentFor(%d, %d) = %d, want %d", c.live, c.floor, got, c.want)
		}
	}
}

// waitGoal runs collections until cond holds for the heap goal (a cleanup
// runs on its own goroutine after the cycle) or a second has passed.
func waitGoal(t *testing.T, cond func(uint64) bool) uint64 {
	t.Helper()
	var g uint64
	for deadline := time.Now().Add(time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		runtime.GC()
		if g = heapGoal(); cond(g) {
			break
		}
	}
	return g
}

// currentPercent collects (keeping *live reachable) until the cleanup has
// set the percent for the heap as it is now, and returns it.
func currentPercent(t *testing.T, live *[][]byte) int {
	t.Helper()
	var p int
	for deadline := time.Now().Add(time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		runtime.GC()
		p = debug.SetGCPercent(-1)
		debug.SetGCPercent(p)
		if p == 100 {
			break
		}
	}
	runtime.KeepAlive(live)
	return p
}

func heapGoal() uint64 {
	s := []metrics.Sample{{Name: "/gc/heap/goal:bytes"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}
