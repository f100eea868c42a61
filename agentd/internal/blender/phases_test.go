package blender

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"
)

// bridgePhases is the answer of the bridge's phases method (bridge/phases.py).
type bridgePhases struct {
	Calls int              `json:"calls"`
	NS    map[string]int64 `json:"ns"`
}

// phaseNames are the phases in the order an execute passes them.
var phaseNames = []string{"request", "schema", "tool", "reply", "records", "hashing", "answer", "write"}

func takePhases(t testing.TB, p *Process) bridgePhases {
	t.Helper()
	var out bridgePhases
	if err := p.call(callCtx(t), "phases", struct{}{}, &out, nil); err != nil {
		t.Fatal(err)
	}
	return out
}

// cubeCall is ObjectCreate400's operation (e2e): a named cube at a place.
func cubeCall(name string, j int) Call {
	return Call{Tool: "object.create", Args: map[string]any{"type": "cube", "name": name,
		"location": []any{float64(j % 20 * 3), float64(j / 20 % 20 * 3), float64(j / 400 * 3)}}}
}

// TestBridgePhases: with the "phases" test fault the bridge times every
// execute that succeeds, each phase apart, within the time Go saw the
// calls take; a failed call is not counted, a take starts the totals
// again, and without the fault the method is refused.
func TestBridgePhases(t *testing.T) {
	forEachRuntime(t, func(t *testing.T, rt Runtime) {
		var out bridgePhases
		var te *ToolError
		if err := startTestProcess(t, rt).call(callCtx(t), "phases", struct{}{}, &out, nil); !errors.As(err, &te) || te.Code != CodeInvalidInput {
			t.Fatalf("phases without the fault: %v, want invalid_input", err)
		}

		p := startTestProcess(t, rt, "phases")
		if got := takePhases(t, p); got.Calls != 0 {
			t.Fatalf("before any execute: %+v", got)
		}
		start := time.Now()
		for i := range 10 {
			if _, err := p.Execute(callCtx(t), cubeCall(fmt.Sprintf("C%02d", i), i)); err != nil {
				t.Fatal(err)
			}
		}
		wall := time.Since(start)
		wantToolError(t, p, "object.set_transform", map[string]any{"name": "Nope", "location": []any{1.0, 0.0, 0.0}}, CodeNotFound)
		got := takePhases(t, p)
		if got.Calls != 10 || len(got.NS) != len(phaseNames) {
			t.Fatalf("phases of 10 creates and a failed call: %+v", got)
		}
		var sum int64
		for _, name := range phaseNames {
			if got.NS[name] <= 0 {
				t.Errorf("phase %s: %d ns", name, got.NS[name])
			}
			sum += got.NS[name]
		}
		if sum <= 0 || time.Duration(sum) > wall {
			t.Errorf("the phases add up to %v, the 10 calls took %v in Go", time.Duration(sum), wall)
		}
		if again := takePhases(t, p); again.Calls != 0 || again.NS["tool"] != 0 {
			t.Errorf("a second take: %+v", again)
		}
	})
}

// BenchmarkBridgePhases: ObjectCreate400's creates (400 named cubes) through
// ExecuteBatch, pipelined as agentd sends a plan's operations, with the
// bridge timing each phase of every execute (bridge/phases.py): per call,
// each phase, their sum (the bridge's time), the wall time, and the rest
// (pipe: what Blender waited for between its answer and the next request,
// with Go's encoding and decoding). set_transform: the same for 400
// object.set_transform of those cubes, a new location each (Scale/Durable's
// operation, e2e).
func BenchmarkBridgePhases(b *testing.B) {
	const warm, ops = 20, 400
	for _, r := range testRuntimes() {
		b.Run(r.name, func(b *testing.B) {
			if !isExecutable(r.rt.Path) {
				b.Skipf("runtime %s not installed", r.name)
			}
			p := startTestProcess(b, r.rt, "phases")
			// batch runs call(j) for j < n through ExecuteBatch.
			batch := func(b *testing.B, n int, call func(j int) Call) time.Duration {
				calls := make([]Call, n)
				for j := range calls {
					calls[j] = call(j)
				}
				start := time.Now()
				p.ExecuteBatch(context.Background(), calls, func(_ int, r BatchResult) bool {
					if r.Err != nil {
						b.Fatal(r.Err)
					}
					return true
				})
				return time.Since(start)
			}
			created, moved := 0, 0
			create := func(b *testing.B, n int) time.Duration {
				base := created
				created += n
				return batch(b, n, func(j int) Call { return cubeCall(fmt.Sprintf("C%05d", base+j), j) })
			}
			move := func(b *testing.B, n int) time.Duration {
				base := moved
				moved += n
				return batch(b, n, func(j int) Call {
					m := base + j
					return Call{Tool: "object.set_transform", Args: map[string]any{"name": fmt.Sprintf("C%05d", m*7919%created),
						"location": []any{float64(m % 1000), float64(m / 1000), 1.0}}}
				})
			}
			create(b, ops) // the cubes set_transform moves, whichever runs
			for _, k := range []struct {
				name string
				run  func(b *testing.B, n int) time.Duration
			}{{"create", create}, {"set_transform", move}} {
				b.Run(k.name, func(b *testing.B) {
					k.run(b, warm)
					takePhases(b, p)
					var wall time.Duration
					b.ResetTimer()
					for i := 0; i < b.N; i++ {
						wall += k.run(b, ops)
					}
					b.StopTimer()
					reportPhases(b, takePhases(b, p), b.N*ops, wall)
				})
			}
		})
	}
}

// reportPhases reports the bridge's phases of n executes that took wall.
func reportPhases(b *testing.B, got bridgePhases, n int, wall time.Duration) {
	if got.Calls != n {
		b.Fatalf("%d executes timed, want %d", got.Calls, n)
	}
	perOp := func(ns int64) float64 { return float64(ns) / 1e6 / float64(got.Calls) }
	var sum int64
	for _, name := range phaseNames {
		b.ReportMetric(perOp(got.NS[name]), "ms/op-"+name)
		sum += got.NS[name]
	}
	b.ReportMetric(perOp(sum), "ms/op-bridge")
	b.ReportMetric(perOp(wall.Nanoseconds()), "ms/op-wall")
	b.ReportMetric(perOp(wall.Nanoseconds()-sum), "ms/op-pipe")
}
