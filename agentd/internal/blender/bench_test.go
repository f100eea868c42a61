package blender

import (
	"context"
	"testing"
)

// BenchmarkExecuteObjectCreate measures one object.create round trip
// (Go -> bridge -> bpy.data -> incremental hash -> Go) per runtime.
func BenchmarkExecuteObjectCreate(b *testing.B) {
	for _, r := range testRuntimes() {
		b.Run(r.name, func(b *testing.B) {
			if !isExecutable(r.rt.Path) {
				b.Skipf("runtime %s not installed", r.name)
			}
			p := startTestProcess(b, r.rt)
			ctx := context.Background()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if _, err := p.Execute(ctx, Call{Tool: "object.create", Args: map[string]any{"type": "cube"}}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkExecuteBatchObjectCreate is BenchmarkExecuteObjectCreate through
// ExecuteBatch (requests pipelined), in batches of 256.
func BenchmarkExecuteBatchObjectCreate(b *testing.B) {
	for _, r := range testRuntimes() {
		b.Run(r.name, func(b *testing.B) {
			if !isExecutable(r.rt.Path) {
				b.Skipf("runtime %s not installed", r.name)
			}
			p := startTestProcess(b, r.rt)
			b.ResetTimer()
			runBatches(b, p, func(int) Call { return Call{Tool: "object.create", Args: map[string]any{"type": "cube"}} })
		})
	}
}

// BenchmarkExecuteBatchSetTransform is the pipe's ceiling for durable
// throughput: object.set_transform of one object through ExecuteBatch (no
// daemons, no journal), in batches of 256.
func BenchmarkExecuteBatchSetTransform(b *testing.B) {
	for _, r := range testRuntimes() {
		b.Run(r.name, func(b *testing.B) {
			if !isExecutable(r.rt.Path) {
				b.Skipf("runtime %s not installed", r.name)
			}
			p := startTestProcess(b, r.rt)
			ctx := context.Background()
			if _, err := p.Execute(ctx, Call{Tool: "object.create", Args: map[string]any{"type": "plane", "name": "P"}}); err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			runBatches(b, p, func(i int) Call {
				return Call{Tool: "object.set_transform", Args: map[string]any{"name": "P", "location": []any{float64(i) * 0.001, 0.0, 0.0}}}
			})
		})
	}
}

// runBatches runs b.N calls (call(i) the i-th) through ExecuteBatch, 256 at
// a time.
func runBatches(b *testing.B, p *Process, call func(i int) Call) {
	for done := 0; done < b.N; {
		calls := make([]Call, min(256, b.N-done))
		for i := range calls {
			calls[i] = call(done + i)
		}
		p.ExecuteBatch(context.Background(), calls, func(i int, r BatchResult) bool {
			if r.Err != nil {
				b.Fatal(r.Err)
			}
			return true
		})
		done += len(calls)
	}
}
