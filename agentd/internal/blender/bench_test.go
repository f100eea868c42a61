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
