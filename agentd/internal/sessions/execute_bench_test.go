package sessions

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/blendplane/blendplane/agentd/internal/blender"
	cpv1 "github.com/blendplane/blendplane/gen/blendplane/controlplane/v1"
)

// BenchmarkExecuteDurable is agentd's share of the durable throughput
// (Scale/Durable in e2e) without the control plane: one batch of 2,000
// object.set_transform through Manager.Execute on a real Blender and a real
// journal, every receipt committed (fsynced) before it is emitted, their
// keys hashes as the control plane's; and agentd's own CPU per operation.
func BenchmarkExecuteDurable(b *testing.B) {
	const objects, ops = 100, 2000
	m, _, rt := newManager(b)
	ctx := context.Background()
	if _, _, err := m.Open(ctx, "s1", rt, blender.Limits{}, 0); err != nil {
		b.Fatal(err)
	}
	batch := make([]Operation, objects)
	for i := range batch {
		batch[i] = create(fmt.Sprintf("c%d", i), fmt.Sprintf("P%05d", i))
	}
	execute(b, m, "setup", batch)
	moved := 0
	cpu := selfCPU(b)
	b.ResetTimer()
	for n := 0; n < b.N; n++ {
		batch := make([]Operation, ops)
		for j := range batch {
			id := fmt.Sprintf("m%d", moved)
			batch[j] = Operation{OperationID: id, Tool: "object.set_transform", IdempotencyKey: hashKey(id),
				Safety: cpv1.SafetyLevel_SAFETY_LEVEL_SAFE_WRITE,
				Args: map[string]any{"name": fmt.Sprintf("P%05d", moved*37%objects),
					"location": []any{float64(moved % 1000), float64(moved / 1000), 1.0}}}
			moved++
		}
		execute(b, m, fmt.Sprintf("plan-%d", n), batch)
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N*ops)/b.Elapsed().Seconds(), "ops/s")
	// agentd's own CPU (this process; Blender is a child, not counted).
	b.ReportMetric(float64((selfCPU(b)-cpu).Microseconds())/float64(b.N*ops), "us-cpu/op-agentd")
}

// hashKey is an idempotency key as the control plane makes them: a hash.
func hashKey(id string) string {
	sum := sha256.Sum256([]byte(id))
	return hex.EncodeToString(sum[:])
}

// selfCPU is the CPU this process used so far, user and system, its
// children (Blender) apart.
func selfCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// execute runs ops as one batch and fails unless every receipt succeeded.
func execute(b testing.TB, m *Manager, requestID string, ops []Operation) {
	b.Helper()
	n := 0
	err := m.Execute(context.Background(), "s1", requestID, ops, func(r *cpv1.Receipt) error {
		if r.GetStatus() != cpv1.Receipt_STATUS_SUCCEEDED {
			return fmt.Errorf("%s: %s", r.GetOperationId(), r.GetError().GetMessage())
		}
		n++
		return nil
	}, nil)
	if err != nil || n != len(ops) {
		b.Fatalf("%s: %d of %d receipts: %v", requestID, n, len(ops), err)
	}
}
