package e2e

// Benchmarks of `make bench` (results and method: docs/BENCHMARKS.md). They
// measure; they never assert on wall-clock time. Each iteration is one full
// measurement, so run them with -benchtime 1x (and -count for the spread).

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	cpv1 "github.com/blendplane/blendplane/gen/blendplane/controlplane/v1"
)

const (
	benchOps    = 400 // timed object.create operations per iteration
	benchWarmup = 20  // untimed creates first, on both sides
)

// BenchmarkObjectCreate400 times 400 object.create cubes end to end through
// the real binaries (SubmitPlan until the 400th receipt arrives on
// StreamReceipts) and, side by side in the same run, the same 400 creates in a
// bare persistent Blender of the same runtime driven over a pipe
// (testdata/bare_blender.py), timed once before and once after the plan (a
// fresh process each time, same warm-up) and averaged. The plan's operations are independent (no
// depends_on): op-000 … op-399, scheduled in that order by the lexical
// tie-break, each a cube with a distinct name and location.
//
// Metrics: ms/op-e2e and ms/op-bare (wall time / 400), ratio (e2e / bare;
// target ≤ 3), ms/op-bridge (mean receipt duration_micros: agentd's Go ↔
// bridge round trip, tool plus incremental scene hash) and ms/op-overhead
// (e2e minus bridge: gRPC hops, journal, control-plane commits). ns/op is the
// e2e plan's wall time.
func BenchmarkObjectCreate400(b *testing.B) {
	c := startCluster(b)
	var e2e, bare, bridge time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		bare += timeBare(b, i, "a") // bare before and after the plan: drift cancels
		s := c.negotiate(b)
		warm := make([]*cpv1.Operation, benchWarmup)
		for j := range warm {
			warm[j] = cubeOp(fmt.Sprintf("op-%03d", j), fmt.Sprintf("W%d_%03d", i, j), j)
		}
		runPlan(b, c, s.GetSessionId(), fmt.Sprintf("bench-warm-%d", i), warm)
		ops := make([]*cpv1.Operation, benchOps)
		for j := range ops {
			ops[j] = cubeOp(fmt.Sprintf("op-%03d", j), fmt.Sprintf("C%d_%03d", i, j), j)
		}
		b.StartTimer()
		elapsed, agent := runPlan(b, c, s.GetSessionId(), fmt.Sprintf("bench-%d", i), ops)
		b.StopTimer()
		e2e += elapsed
		bridge += agent

		bare += timeBare(b, i, "b")
		b.StartTimer()
	}
	b.StopTimer()
	bare /= 2
	perOp := func(d time.Duration) float64 {
		return float64(d) / float64(time.Millisecond) / float64(b.N*benchOps)
	}
	b.ReportMetric(perOp(e2e), "ms/op-e2e")
	b.ReportMetric(perOp(bare), "ms/op-bare")
	b.ReportMetric(float64(e2e)/float64(bare), "ratio")
	b.ReportMetric(perOp(bridge), "ms/op-bridge")
	b.ReportMetric(perOp(e2e-bridge), "ms/op-overhead")
}

// BenchmarkValidateOnly100k times one SubmitPlan with validate_only of a
// 100,000-operation chain (op000000 ← op000001 ← … ← op099999, each an
// object.create) through the real control plane over gRPC on loopback: client
// marshalling, the wire, protovalidate, graph and args checks, schedule, the
// response (with its 100k-entry schedule). Target < 1 s. The in-process check
// alone is BenchmarkCheckChain100k in controlplane/internal/plan.
func BenchmarkValidateOnly100k(b *testing.B) {
	c := startCluster(b)
	s := c.negotiate(b)
	const n = 100_000
	ops := make([]*cpv1.Operation, n)
	for i := range ops {
		var deps []string
		if i > 0 {
			deps = []string{fmt.Sprintf("op%06d", i-1)}
		}
		ops[i] = op(fmt.Sprintf("op%06d", i), "object.create", map[string]any{"type": "cube", "name": fmt.Sprintf("C%06d", i)}, deps...)
	}
	// Warm-up: one small validate_only plan (connection, interceptors).
	if _, err := c.client.SubmitPlan(ctxT(b, time.Minute), &cpv1.SubmitPlanRequest{
		SessionId: s.GetSessionId(), RequestId: "bench-validate-warm", Operations: ops[:1], ValidateOnly: true,
	}); err != nil {
		b.Fatal(err)
	}
	var total time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		start := time.Now()
		resp, err := c.client.SubmitPlan(ctxT(b, 2*time.Minute), &cpv1.SubmitPlanRequest{
			SessionId: s.GetSessionId(), RequestId: fmt.Sprintf("bench-validate-%d", i), Operations: ops, ValidateOnly: true,
		})
		total += time.Since(start)
		if err != nil {
			b.Fatal(err)
		}
		if p := resp.GetPlan(); p.GetState() != cpv1.Plan_STATE_VALIDATED || len(p.GetSchedule()) != n {
			b.Fatalf("plan state %v, %d scheduled", p.GetState(), len(p.GetSchedule()))
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(total)/float64(time.Millisecond)/float64(b.N), "ms/submit-100k")
}

// timeBare starts a fresh bare Blender, makes benchWarmup untimed creates and
// returns the wall time of the next benchOps create round trips.
func timeBare(b *testing.B, i int, tag string) time.Duration {
	bp := startBare(b)
	defer bp.close(b)
	for j := 0; j < benchWarmup; j++ {
		bp.create(b, fmt.Sprintf("W%d%s_%03d", i, tag, j), j)
	}
	start := time.Now()
	for j := 0; j < benchOps; j++ {
		bp.create(b, fmt.Sprintf("C%d%s_%03d", i, tag, j), j)
	}
	return time.Since(start)
}

// cubeOp is object.create of a cube named name at a location that differs per j.
func cubeOp(id, name string, j int) *cpv1.Operation {
	return op(id, "object.create", map[string]any{"type": "cube", "name": name, "location": cubeLocation(j)})
}

func cubeLocation(j int) []any {
	return []any{float64(j % 20 * 3), float64(j / 20 % 20 * 3), float64(j / 400 * 3)}
}

// runPlan submits ops and reads receipts until the last one arrives. It
// returns the wall time from SubmitPlan to that receipt, and the sum of the
// receipts' duration_micros (agentd's bridge round trips).
func runPlan(b *testing.B, c *cluster, sessionID, requestID string, ops []*cpv1.Operation) (time.Duration, time.Duration) {
	b.Helper()
	ctx := ctxT(b, 10*time.Minute)
	start := time.Now()
	if _, err := c.client.SubmitPlan(ctx, &cpv1.SubmitPlanRequest{SessionId: sessionID, RequestId: requestID, Operations: ops}); err != nil {
		b.Fatalf("submit %s: %v", requestID, err)
	}
	stream, err := c.client.StreamReceipts(ctx, &cpv1.StreamReceiptsRequest{RequestId: requestID, StartSequence: 1})
	if err != nil {
		b.Fatal(err)
	}
	var agent time.Duration
	for n := 0; n < len(ops); n++ {
		resp, err := stream.Recv()
		if err != nil {
			b.Fatalf("stream %s after %d receipts: %v", requestID, n, err)
		}
		r := resp.GetReceipt()
		if r.GetStatus() != cpv1.Receipt_STATUS_SUCCEEDED {
			b.Fatalf("receipt %d of %s: %v", n+1, requestID, r)
		}
		agent += time.Duration(r.GetDurationMicros()) * time.Microsecond
	}
	elapsed := time.Since(start)
	for { // drain: the stream ends when the plan is terminal
		if _, err := stream.Recv(); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			b.Fatalf("stream %s: %v", requestID, err)
		}
	}
	return elapsed, agent
}

// bareBlender is testdata/bare_blender.py running in the tests' Blender runtime.
type bareBlender struct {
	cmd  *exec.Cmd
	in   io.WriteCloser
	out  *bufio.Reader
	logs *syncBuffer
}

var pythonName = regexp.MustCompile(`^python[0-9.]*$`)

// bareCommand starts the bare script in the runtime agentd picks by default:
// BLENDPLANE_TEST_BLENDER if set, else the repo's .blender/venv python, else
// blender on PATH (a python* name is a bpy module runtime, anything else a
// blender binary, as in agentd's discovery).
func bareCommand(b *testing.B) *exec.Cmd {
	script := filepath.Join(repoRoot(), "e2e", "testdata", "bare_blender.py")
	rt := os.Getenv("BLENDPLANE_TEST_BLENDER")
	if rt == "" {
		venv := filepath.Join(repoRoot(), ".blender", "venv", "bin", "python")
		if st, err := os.Stat(venv); err == nil && st.Mode().Perm()&0o111 != 0 {
			rt = venv
		} else if p, err := exec.LookPath("blender"); err == nil {
			rt = p
		} else {
			b.Fatal("no Blender runtime: run `make blender`")
		}
	}
	if pythonName.MatchString(filepath.Base(rt)) {
		return exec.Command(rt, script)
	}
	return exec.Command(rt, "-b", "--factory-startup", "--python", script)
}

func startBare(b *testing.B) *bareBlender {
	b.Helper()
	bp := &bareBlender{cmd: bareCommand(b), logs: &syncBuffer{}}
	bp.cmd.Dir = repoRoot()
	bp.cmd.Stderr = bp.logs
	var err error
	if bp.in, err = bp.cmd.StdinPipe(); err != nil {
		b.Fatal(err)
	}
	stdout, err := bp.cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	bp.out = bufio.NewReader(stdout)
	if err := bp.cmd.Start(); err != nil {
		b.Fatalf("start bare Blender: %v", err)
	}
	b.Cleanup(func() { bp.cmd.Process.Kill(); bp.cmd.Wait() })
	bp.readLine(b, "BARE-READY")
	return bp
}

// create sends one create and waits for its ack.
func (bp *bareBlender) create(b *testing.B, name string, j int) {
	line, err := json.Marshal(map[string]any{"name": name, "location": cubeLocation(j)})
	if err != nil {
		b.Fatal(err)
	}
	if _, err := bp.in.Write(append(line, '\n')); err != nil {
		b.Fatalf("bare Blender: %v\n%s", err, bp.logs.String())
	}
	if got := bp.readLine(b, "BARE-ACK "); got != name {
		b.Fatalf("bare Blender acked %q, want %q", got, name)
	}
}

// readLine returns the rest of the next stdout line with prefix; Blender's
// own stdout lines are skipped.
func (bp *bareBlender) readLine(b *testing.B, prefix string) string {
	for {
		line, err := bp.out.ReadString('\n')
		if err != nil {
			b.Fatalf("bare Blender stdout: %v\n%s", err, bp.logs.String())
		}
		if rest, ok := strings.CutPrefix(strings.TrimRight(line, "\n"), prefix); ok {
			return rest
		}
	}
}

func (bp *bareBlender) close(b *testing.B) {
	bp.in.Close()
	done := make(chan error, 1)
	go func() { done <- bp.cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			b.Logf("bare Blender exit: %v\n%s", err, bp.logs.String())
		}
	case <-time.After(30 * time.Second):
		b.Errorf("bare Blender did not exit within 30s of stdin EOF")
		bp.cmd.Process.Kill()
		<-done
	}
}
