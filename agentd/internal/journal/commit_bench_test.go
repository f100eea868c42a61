package journal

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	cpv1 "github.com/blendplane/blendplane/gen/blendplane/controlplane/v1"
)

// BenchmarkCommit: 100 groups of 32 object.set_transform commits per
// iteration (as the session manager groups them) into a session that
// already journaled `before` operations, their keys hashes as the control
// plane makes them; time and CPU (fdatasyncs included) per record.
func BenchmarkCommit(b *testing.B) {
	const perIteration = 100
	for _, before := range []int{0, 10000} {
		b.Run(fmt.Sprintf("before=%d", before), func(b *testing.B) {
			j, err := Open(filepath.Join(b.TempDir(), "agentd.db"))
			if err != nil {
				b.Fatal(err)
			}
			defer j.Close()
			if err := j.OpenSession("s1", "rt", "h0", Limits{}, 0); err != nil {
				b.Fatal(err)
			}
			groups := func(from, n int) [][]Commit {
				out := make([][]Commit, n)
				for g := range out {
					out[g] = make([]Commit, 32)
					for i := range out[g] {
						out[g][i] = benchCommit(from + 32*g + i)
					}
				}
				return out
			}
			commit := func(groups [][]Commit) {
				for _, g := range groups {
					if err := j.Commit("s1", g); err != nil {
						b.Fatal(err)
					}
				}
			}
			commit(groups(0, before/32))
			timed := groups(before, perIteration*b.N)
			cpu := processCPU(b)
			b.ResetTimer()
			commit(timed)
			b.StopTimer()
			records := float64(32 * perIteration * b.N)
			b.ReportMetric(float64(b.Elapsed().Microseconds())/records, "us/op")
			b.ReportMetric(float64((processCPU(b)-cpu).Microseconds())/records, "us-cpu/op")
		})
	}
}

// benchCommit is the n-th object.set_transform's commit, with a receipt
// as the bridge returns it.
func benchCommit(n int) Commit {
	sum := sha256.Sum256([]byte(fmt.Sprint("op", n)))
	key := hex.EncodeToString(sum[:])
	hash := func(i int) string {
		s := sha256.Sum256([]byte(fmt.Sprint("scene", i)))
		return hex.EncodeToString(s[:])
	}
	result, _ := structpb.NewStruct(map[string]any{"name": fmt.Sprintf("P%05d", n%100), "location": []any{float64(n % 1000), 1.0, 1.0}})
	r := &cpv1.Receipt{RequestId: "plan-0123456789abcdef", OperationId: fmt.Sprintf("op-%06d", n), ToolName: "object.set_transform",
		Status: cpv1.Receipt_STATUS_SUCCEEDED, Result: result, McpCallId: fmt.Sprintf("call-%016x", n),
		BlenderMutationId: fmt.Sprintf("mut-%016x", n), SceneHashBefore: hash(n), SceneHashAfter: hash(n + 1),
		SafetyLevel: cpv1.SafetyLevel_SAFETY_LEVEL_SAFE_WRITE, IdempotencyKey: key, CompleteTime: timestamppb.Now(),
		DeterminismClass: "exact", Verified: true}
	return Commit{Receipt: r, Undo: json.RawMessage(fmt.Sprintf(`{"object":"P%05d","location":[1,2,3],"rotation":[0,0,0],"scale":[1,1,1]}`, n%100)),
		Entry: &Entry{Kind: "op", Key: key, Tool: "object.set_transform", Args: map[string]any{"name": fmt.Sprintf("P%05d", n%100), "location": []any{float64(n % 1000), 1.0, 1.0}},
			MutationID: r.BlenderMutationId, HashAfter: r.SceneHashAfter}}
}

// processCPU is the CPU this process used so far, user and system.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkEncodeEntry: an object.set_transform's log entry, as appendEntry
// encodes it, against encoding/json's.
func BenchmarkEncodeEntry(b *testing.B) {
	e := benchCommit(42).Entry
	b.Run("jcs", func(b *testing.B) {
		encodeMany(b, func() error { _, err := encodeEntry(e); return err })
	})
	b.Run("encoding-json", func(b *testing.B) {
		encodeMany(b, func() error { _, err := json.Marshal(e); return err })
	})
}

// encodeMany times 10,000 encodings per iteration (make bench runs each
// benchmark once) and reports the time of one.
func encodeMany(b *testing.B, encode func() error) {
	for b.Loop() {
		for range 10000 {
			if err := encode(); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(10000*b.N), "ns/entry")
}
