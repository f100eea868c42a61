package store

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"syscall"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	cpv1 "github.com/blendplane/blendplane/gen/blendplane/controlplane/v1"
)

// BenchmarkCommitGroups commits a plan's 400 receipts in groups of 1, 8 and
// 32 and reports the CPU per receipt (the process's, user and system: a
// commit's fdatasyncs cost CPU in the kernel too). It is what sizes the
// receipt committers' groups (groupcommit.GroupTarget, GroupLinger).
func BenchmarkCommitGroups(b *testing.B) {
	for _, size := range []int{1, 8, 32} {
		b.Run(fmt.Sprint(size), func(b *testing.B) {
			s, _ := openTest(b)
			if err := s.PutSession(testSession("alice", "s1"), testRegistry); err != nil {
				b.Fatal(err)
			}
			var cpu time.Duration
			for i := 0; i < b.N; i++ {
				ref := PlanRef{"alice", fmt.Sprint("r", i)}
				plan := startPlan(b, s, ref)
				groups := make([][]*cpv1.Receipt, 400/size)
				for g := range groups {
					for j := range size {
						groups[g] = append(groups[g], testReceipt(int64(g*size+j+1), "object.create"))
					}
				}
				start := processCPU(b)
				for _, g := range groups {
					if err := s.Commit(ref, plan, g); err != nil {
						b.Fatal(err)
					}
				}
				cpu += processCPU(b) - start
			}
			b.ReportMetric(float64(cpu.Microseconds())/float64(b.N*400), "us-cpu/receipt")
		})
	}
}

func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// startPlan stores testPlan(ref) and returns it running, ready for Commit.
func startPlan(tb testing.TB, s *Store, ref PlanRef) *cpv1.Plan {
	tb.Helper()
	if _, err := s.CreatePlan(testPlan(ref.Owner, ref.RequestID)); err != nil {
		tb.Fatal(err)
	}
	plan, err := s.Plan(ref)
	if err != nil {
		tb.Fatal(err)
	}
	plan.State = cpv1.Plan_STATE_RUNNING
	return plan
}

// testReceipt is a succeeded receipt of sequence seq, its ids and hashes
// random.
func testReceipt(seq int64, tool string) *cpv1.Receipt {
	return &cpv1.Receipt{Sequence: seq, OperationId: fmt.Sprintf("op-%05d", seq),
		ToolName: tool, Status: cpv1.Receipt_STATUS_SUCCEEDED, BlenderMutationId: randomHex(16),
		IdempotencyKey: randomHex(32), SceneHashBefore: randomHex(32), SceneHashAfter: randomHex(32),
		CompleteTime: timestamppb.Now()}
}

func randomHex(n int) string {
	raw := make([]byte, n)
	rand.Read(raw)
	return hex.EncodeToString(raw)
}

// BenchmarkCreatePlan stores plans of 400, 2,000, 20,000 and 100,000 operations, each
// with its policy record (CreatePlan), and reports the time per operation:
// it should not grow with the plan's size.
func BenchmarkCreatePlan(b *testing.B) {
	for _, n := range []int{400, 2000, 20000, 100000} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			s, _ := openTest(b)
			if err := s.PutSession(testSession("alice", "s1"), testRegistry); err != nil {
				b.Fatal(err)
			}
			policy := make(map[string]OpPolicy, n)
			for j := range n {
				policy[fmt.Sprintf("m%05d", j)] = OpPolicy{Decision: "allow", InputHash: randomHex(32)}
			}
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				p := testPlan("alice", fmt.Sprint("r", i))
				p.Policy = policy
				if _, err := s.CreatePlan(p); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N*n), "us/op")
		})
	}
}
