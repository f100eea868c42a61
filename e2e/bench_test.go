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
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	cpv1 "github.com/blendplane/blendplane/gen/blendplane/controlplane/v1"
	"github.com/blendplane/blendplane/internal/blenderprocs"
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
// fresh process each time, same warm-up) and averaged. The plan's operations
// are independent (no depends_on): op-000 … op-399, scheduled in that order by the lexical
// tie-break, each a cube with a distinct name and location.
//
// Metrics: ms/op-e2e and ms/op-bare (wall time / 400), ratio (e2e / bare;
// target ≤ 3), ms/op-server and ratio-server (the same from the plan's
// create_time, once it is checked and accepted, to the 400th receipt on the
// client's stream: issue 15's measure, target ≤ 2), ms/op-bridge (mean receipt duration_micros: agentd's Go ↔
// bridge round trip, tool plus incremental scene hash) and ms/op-overhead
// (e2e minus bridge: what the batched Execute stream and the group commits
// do not hide behind the bridge calls: submit, first batch, last receipt's
// commits and stream hops), and ms-cpu/op-cp, -agentd, -blender and -client:
// the CPU each process used over the plan, per create (on 2 CPUs their sum
// bounds the plan's pace). ns/op is the e2e plan's wall time.
//
// It runs on the Blender of the tests (BLENDPLANE_TEST_BLENDER, else the
// bpy wheel), named as a sub-benchmark: make bench runs it on both.
func BenchmarkObjectCreate400(b *testing.B) {
	b.Run(runtimeLabel(), benchObjectCreate400)
}

// runtimeLabel names the Blender the benchmarks run on: "bpy" (the repo's
// wheel, agentd's default) or the base name of BLENDPLANE_TEST_BLENDER.
func runtimeLabel() string {
	if rt := os.Getenv("BLENDPLANE_TEST_BLENDER"); rt != "" {
		return filepath.Base(rt)
	}
	return "bpy"
}

func benchObjectCreate400(b *testing.B) {
	c := startCluster(b)
	var e2e, server, bare, bridge, first time.Duration
	var cpu [4]time.Duration // control plane, agentd, its Blenders, this client
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
		before := clusterCPU(b, c, false)
		b.StartTimer()
		p, elapsed, agent, firstDone := runPlanFrom(b, c, s.GetSessionId(), fmt.Sprintf("bench-%d", i), ops)
		end := time.Now()
		b.StopTimer()
		for k, t := range clusterCPU(b, c, true) {
			cpu[k] += t - before[k]
		}
		first += firstDone.Sub(p.GetCreateTime().AsTime())
		e2e += elapsed
		server += end.Sub(p.GetCreateTime().AsTime())
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
	b.ReportMetric(perOp(server), "ms/op-server")
	b.ReportMetric(float64(server)/float64(bare), "ratio-server")
	b.ReportMetric(perOp(bridge), "ms/op-bridge")
	// The plan's fixed cost: from its acceptance to its first operation's
	// end in Blender (storing the plan, the hop to agentd, the first call).
	b.ReportMetric(float64(first)/float64(time.Millisecond)/float64(b.N), "ms-first-op")
	b.ReportMetric(perOp(e2e-bridge), "ms/op-overhead")
	for k, who := range clusterProcs {
		b.ReportMetric(perOp(cpu[k]), "ms-cpu/op-"+who)
	}
}

// clusterProcs names clusterCPU's entries in metrics.
var clusterProcs = [4]string{"cp", "agentd", "blender", "client"}

// clusterCPU is the CPU used so far by the control plane, agentd, agentd's
// Blenders (a spare's idle time included) and this test process. Reading
// the others' counters costs this process CPU (some 7 ms): a measurement
// that ends (selfFirst) reads its own counter first, one that starts reads
// it last, so that neither reading counts as the client's.
func clusterCPU(b *testing.B, c *cluster, selfFirst bool) [4]time.Duration {
	var cpu [4]time.Duration
	if selfFirst {
		cpu[3] = threadsCPU(b, os.Getpid())
	}
	agentd := c.agent.cmd.Process.Pid
	for _, pid := range childPIDs(agentd) {
		cpu[2] += threadsCPU(b, pid)
	}
	cpu[0], cpu[1] = threadsCPU(b, c.cp.cmd.Process.Pid), threadsCPU(b, agentd)
	if !selfFirst {
		cpu[3] = threadsCPU(b, os.Getpid())
	}
	return cpu
}

// BenchmarkValidateOnly100k times one SubmitPlan with validate_only of a
// 100,000-operation chain (op000000 ← op000001 ← … ← op099999, each an
// object.create) through the real control plane over gRPC on loopback: client
// marshalling, the wire, protovalidate, graph and args checks, schedule, the
// response (with its 100k-entry schedule). Target < 1 s. The in-process check
// alone is BenchmarkCheckChain100k in controlplane/internal/plan.
// ms/accept-100k: the same plan submitted once for real, as the client sees
// it (the checks, its policy, storing it with its schedule and policy
// record), then cancelled.
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
	rssBefore := peakRSS(b, c.cp)
	var total, client time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		req := &cpv1.SubmitPlanRequest{
			SessionId: s.GetSessionId(), RequestId: fmt.Sprintf("bench-validate-%d", i), Operations: ops, ValidateOnly: true,
		}
		start := time.Now()
		resp, err := c.client.SubmitPlan(ctxT(b, 2*time.Minute), req)
		total += time.Since(start)
		if err != nil {
			b.Fatal(err)
		}
		if p := resp.GetPlan(); p.GetState() != cpv1.Plan_STATE_VALIDATED || len(p.GetSchedule()) != n {
			b.Fatalf("plan state %v, %d scheduled", p.GetState(), len(p.GetSchedule()))
		}
		// The client's share of that time, done again apart: encoding the
		// request, decoding the answer.
		start = time.Now()
		if _, err := proto.Marshal(req); err != nil {
			b.Fatal(err)
		}
		client += time.Since(start)
		answer, _ := proto.Marshal(resp)
		start = time.Now()
		if err := proto.Unmarshal(answer, &cpv1.SubmitPlanResponse{}); err != nil {
			b.Fatal(err)
		}
		client += time.Since(start)
	}
	b.StopTimer()
	b.ReportMetric(float64(total)/float64(time.Millisecond)/float64(b.N), "ms/submit-100k")
	b.ReportMetric(float64(total-client)/float64(time.Millisecond)/float64(b.N), "ms/server-100k")
	b.ReportMetric(float64(peakRSS(b, c.cp)-rssBefore)/(1<<20), "MiB/cp-peak-rss-growth")

	// The same plan accepted (stored with its schedule and policy record),
	// once, then cancelled: its first creates may run meanwhile.
	req := &cpv1.SubmitPlanRequest{SessionId: s.GetSessionId(), RequestId: "bench-accept", Operations: ops}
	start := time.Now()
	resp, err := c.client.SubmitPlan(ctxT(b, 10*time.Minute), req)
	accept := time.Since(start)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := c.client.CancelPlan(ctxT(b, time.Minute), &cpv1.CancelPlanRequest{RequestId: req.GetRequestId()}); err != nil {
		b.Fatal(err)
	}
	if st := resp.GetPlan().GetState(); st != cpv1.Plan_STATE_PENDING && st != cpv1.Plan_STATE_RUNNING {
		b.Fatalf("accepted plan: state %v", st)
	}
	b.ReportMetric(float64(accept)/float64(time.Millisecond), "ms/accept-100k")
}

// peakRSS is a daemon's peak resident memory so far (VmHWM), in bytes.
func peakRSS(b *testing.B, d *daemon) int64 { return procStatus(b, d.cmd.Process.Pid, "VmHWM:") }

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
	_, elapsed, agent, _ := runPlanFrom(b, c, sessionID, requestID, ops)
	return elapsed, agent
}

// runPlanFrom is runPlan that also returns the accepted plan and its first
// receipt's complete_time.
func runPlanFrom(b *testing.B, c *cluster, sessionID, requestID string, ops []*cpv1.Operation) (*cpv1.Plan, time.Duration, time.Duration, time.Time) {
	b.Helper()
	ctx := ctxT(b, 10*time.Minute)
	start := time.Now()
	resp, err := c.client.SubmitPlan(ctx, &cpv1.SubmitPlanRequest{SessionId: sessionID, RequestId: requestID, Operations: ops})
	if err != nil {
		b.Fatalf("submit %s: %v", requestID, err)
	}
	stream, err := c.client.StreamReceipts(ctx, &cpv1.StreamReceiptsRequest{RequestId: requestID, StartSequence: 1})
	if err != nil {
		b.Fatal(err)
	}
	var agent time.Duration
	var first time.Time
	for n := 0; n < len(ops); n++ {
		resp, err := stream.Recv()
		if err != nil {
			b.Fatalf("stream %s after %d receipts: %v", requestID, n, err)
		}
		r := resp.GetReceipt()
		if r == nil { // a progress event
			n--
			continue
		}
		if r.GetStatus() != cpv1.Receipt_STATUS_SUCCEEDED {
			b.Fatalf("receipt %d of %s: %v", n+1, requestID, r)
		}
		agent += time.Duration(r.GetDurationMicros()) * time.Microsecond
		if n == 0 {
			first = r.GetCompleteTime().AsTime()
		}
	}
	elapsed := time.Since(start)
	for { // drain: the stream ends when the plan is terminal
		if _, err := stream.Recv(); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			b.Fatalf("stream %s: %v", requestID, err)
		}
	}
	return resp.GetPlan(), elapsed, agent, first
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

// ---------------------------------------------------------------------------
// Issue 3: cost against scene size, rollback, recovery and durable throughput.

const (
	scaleSmall        = 100    // planes in the small scene
	scaleLarge        = 10_000 // planes in the large scene
	scaleTransformOps = 1000   // timed object.set_transform per size and run (after 50 untimed)
	scaleRollbacks    = 5      // atomic plans rolled back per size, kind and run
	scaleReplay       = 50     // journal entries after the checkpoint when Blender is killed
	scaleDurableOps   = 2000   // operations of the throughput plan
	// agentd's --checkpoint-idle in BenchmarkScale. Checkpoints are taken
	// only when a session has been idle this long (the count and interval
	// triggers are set out of reach), and every measurement starts after the
	// checkpoint of the previous one is on disk, so no .blend save runs
	// inside a timed plan.
	scaleIdle = time.Second
)

// BenchmarkScale measures, on one cluster, two sessions whose scenes hold
// 100 and 10,000 planes (besides the baseline camera and light), each built
// once by a plan of object.create operations. The sub-benchmarks reuse both
// scenes, so -count repeats the measurements, not the (long) build:
//
//   - Build (reported on the first run only): the build plan of each size,
//     end to end and in the bridge per create, and agentd's save of the
//     checkpoint after it (from its log).
//   - SetTransform: one plan of 1000 independent object.set_transform
//     operations (objects spread over the scene, a new location each);
//     ms/op end to end and the bridge's mean duration_micros, per size, and
//     the 10k/100 ratios (target ≤ 1.5).
//   - RollbackSetTransform, RollbackCreate: 5 atomic plans of one
//     successful operation followed by an object.delete of a missing object;
//     the ROLLED_BACK receipt's duration_micros (agentd's compensation call)
//     and the plan's time from SubmitPlan to its last receipt, per size.
//   - Recovery: a checkpoint on disk, 50 more scene changes in the journal,
//     a spare Blender ready (agentd's default), then kill -9 of the
//     session's Blender and one set_transform timed end to end (the spare
//     adopted, checkpoint load, replay of 50 entries, hash check, the
//     operation), and agentd's own "session recovered … took=" (and its
//     "checkpoint loaded … duration=", when logged).
//   - RecoveryCold: the same with the spare killed too, so that the
//     recovery starts a Blender (a crash right after another took the spare,
//     or an agent without spares).
//   - Durable: one plan of 2,000 object.set_transform, operations per second
//     end to end; agentd's journal and the control plane's store both fsync
//     every receipt before it is streamed. us-cpu/op-cp, -agentd, -blender
//     and -client: the CPU each process used over both plans, per operation.
//
// ns/op is the sum of the timed plans of both sizes; read the named metrics.
func BenchmarkScale(b *testing.B) {
	metrics := freeAddr(b)
	// No refresh (--refresh-after): it would take the spare the recoveries
	// time, and its load could fall inside a timed plan.
	c := startClusterOpts(b, clusterOpts{agentArgs: []string{"--checkpoint-every", "1000000", "--checkpoint-interval", "24h",
		"--checkpoint-idle", scaleIdle.String(), "--metrics-listen", metrics, "--refresh-after", "0",
		"--max-sessions", "4"}, policy: scalePolicy}) // two sessions, a spare, a preview: on any machine
	c.agentMetrics = metrics
	scenes := []*scene{buildScene(b, c, scaleSmall), buildScene(b, c, scaleLarge)}
	small, large := scenes[0], scenes[1]
	// each calls measure for the small scene, then for the large one, each
	// time once the pending checkpoints of both sessions are on disk.
	each := func(b *testing.B, measure func(b *testing.B, s *scene)) {
		b.StopTimer()
		for _, s := range scenes {
			for _, o := range scenes {
				o.settle(b)
			}
			measure(b, s)
		}
	}
	perSize := func(b *testing.B, v map[*scene]float64, unit string) {
		b.ReportMetric(v[small], unit+"-"+small.label)
		b.ReportMetric(v[large], unit+"-"+large.label)
	}

	// Build reports the one build of each scene on its first run only.
	built := false
	b.Run("Build", func(b *testing.B) {
		if built {
			b.Skip("the scenes are built once per benchmark run: see the first Build line")
		}
		built = true
		var total time.Duration
		for _, s := range scenes {
			total += s.build
			b.ReportMetric(s.build.Seconds(), "s/build-"+s.label)
			b.ReportMetric(ms(s.build)/float64(s.n), "ms/create-e2e-"+s.label)
			b.ReportMetric(ms(s.buildBridge)/float64(s.n), "ms/create-bridge-"+s.label)
			if s.buildCheckpoint > 0 {
				b.ReportMetric(s.buildCheckpoint.Seconds(), "s/ckpt-save-"+s.label)
				b.ReportMetric(float64(s.buildCheckpoints), "ckpts-"+s.label)
			}
		}
		b.ReportMetric(float64(total.Nanoseconds()), "ns/op")
	})

	b.Run("SetTransform", func(b *testing.B) {
		e2e, bridge := map[*scene]float64{}, map[*scene]float64{}
		each(b, func(b *testing.B, s *scene) {
			s.run(b, "warm", false, s.moves(50)) // the first plan after a build pays one-off costs
			ops := s.moves(scaleTransformOps)
			b.StartTimer()
			elapsed, rs := s.run(b, "move", false, ops)
			b.StopTimer()
			requireStatuses(b, rs, scaleTransformOps, cpv1.Receipt_STATUS_SUCCEEDED)
			e2e[s] = ms(elapsed) / scaleTransformOps
			bridge[s] = ms(agentTime(rs)) / scaleTransformOps
		})
		perSize(b, e2e, "ms/op-e2e")
		b.ReportMetric(e2e[large]/e2e[small], "ratio-e2e")
		perSize(b, bridge, "ms/op-bridge")
		b.ReportMetric(bridge[large]/bridge[small], "ratio-bridge")
	})

	rollback := func(b *testing.B, first func(s *scene, i int) *cpv1.Operation) {
		undo, plan := map[*scene]float64{}, map[*scene]float64{}
		each(b, func(b *testing.B, s *scene) {
			for i := 0; i < scaleRollbacks; i++ {
				a := first(s, i)
				ops := []*cpv1.Operation{a, op("fail", "object.delete", map[string]any{"name": "Missing"}, a.GetOperationId())}
				b.StartTimer()
				elapsed, rs := s.run(b, "rollback", true, ops)
				b.StopTimer()
				requireStatuses(b, rs, 3, cpv1.Receipt_STATUS_SUCCEEDED, cpv1.Receipt_STATUS_FAILED, cpv1.Receipt_STATUS_ROLLED_BACK)
				undo[s] += ms(time.Duration(rs[2].GetDurationMicros())*time.Microsecond) / scaleRollbacks
				plan[s] += ms(elapsed) / scaleRollbacks
			}
		})
		perSize(b, undo, "ms/undo-agent")
		b.ReportMetric(undo[large]/undo[small], "ratio-undo")
		perSize(b, plan, "ms/plan-e2e")
		b.ReportMetric(plan[large]/plan[small], "ratio-plan")
	}
	b.Run("RollbackSetTransform", func(b *testing.B) {
		rollback(b, func(s *scene, i int) *cpv1.Operation { return s.moves(1)[0] })
	})
	b.Run("RollbackCreate", func(b *testing.B) {
		rollback(b, func(s *scene, i int) *cpv1.Operation {
			return op("m00000", "object.create", map[string]any{"type": "plane", "name": fmt.Sprintf("Undone%d", i)})
		})
	})

	recovery := func(b *testing.B, cold bool) {
		e2e, agent := map[*scene]float64{}, map[*scene]float64{}
		load := map[*scene]float64{}
		each(b, func(b *testing.B, s *scene) {
			e, a, l := s.recoverAfterKill(b, cold)
			e2e[s], agent[s], load[s] = e.Seconds(), a.Seconds(), l.Seconds()
		})
		perSize(b, e2e, "s/recover-e2e")
		perSize(b, agent, "s/recover-agent")
		if load[small] > 0 && load[large] > 0 {
			perSize(b, load, "s/ckpt-load")
		}
		b.ReportMetric(e2e[large]/e2e[small], "ratio-e2e")
	}
	b.Run("Recovery", func(b *testing.B) { recovery(b, false) })
	b.Run("RecoveryCold", func(b *testing.B) { recovery(b, true) })

	b.Run("Preview", func(b *testing.B) {
		took := map[*scene]float64{}
		each(b, func(b *testing.B, s *scene) {
			b.StartTimer()
			elapsed := s.preview(b, scalePreviewOps)
			b.StopTimer()
			took[s] = elapsed.Seconds()
		})
		perSize(b, took, "s/preview")
		b.ReportMetric(took[large]/took[small], "ratio")
	})

	b.Run("Durable", func(b *testing.B) {
		rate := map[*scene]float64{}
		var cpu [4]time.Duration
		each(b, func(b *testing.B, s *scene) {
			ops := s.moves(scaleDurableOps)
			before := clusterCPU(b, s.c, false)
			b.StartTimer()
			elapsed, rs := s.run(b, "durable", false, ops)
			b.StopTimer()
			for k, t := range clusterCPU(b, s.c, true) {
				cpu[k] += t - before[k]
			}
			requireStatuses(b, rs, scaleDurableOps, cpv1.Receipt_STATUS_SUCCEEDED)
			rate[s] = scaleDurableOps / elapsed.Seconds()
		})
		perSize(b, rate, "ops/s")
		// Where the CPU of both plans went, per operation: on 2 CPUs the
		// sum bounds the pace.
		for k, who := range clusterProcs {
			b.ReportMetric(float64(cpu[k].Microseconds())/(2*scaleDurableOps), "us-cpu/op-"+who)
		}
	})
}

// scalePolicy allows everything but object.rename, whose plans wait for
// approval: the Preview benchmark's plans, rejected once previewed.
const scalePolicy = `rules:
  - name: bench-preview
    tools: [object.rename]
    decision: require_approval
  - name: bench-allow
    decision: allow
`

// scalePreviewOps is the size of the previewed plan (issue 9: 20).
const scalePreviewOps = 20

// preview submits a plan of k object.rename (which waits for approval) and
// returns the time from SubmitPlan until its preview is ready: the fork's
// Blender start, checkpoint load and journal replay, both snapshots, the k
// operations and the diff. The plan is rejected then, so the scene stays.
func (s *scene) preview(b *testing.B, k int) time.Duration {
	b.Helper()
	s.plans++
	id := fmt.Sprintf("scale-%s-preview-%d", s.label, s.plans)
	ops := make([]*cpv1.Operation, k)
	for j := range ops {
		ops[j] = op(fmt.Sprintf("r%02d", j), "object.rename", map[string]any{"name": fmt.Sprintf("P%05d", j*7919%s.n), "new_name": fmt.Sprintf("R%d_%02d", s.plans, j)})
	}
	start := time.Now()
	resp, err := s.c.client.SubmitPlan(ctxT(b, time.Minute), &cpv1.SubmitPlanRequest{SessionId: s.id, RequestId: id, Operations: ops})
	if err != nil || resp.GetPlan().GetApprovalId() == "" {
		b.Fatalf("submit %s: %v %v", id, resp, err)
	}
	for {
		list, err := s.c.client.ListApprovals(ctxT(b, time.Minute), &cpv1.ListApprovalsRequest{RequestId: id})
		if err != nil || len(list.GetApprovals()) != 1 {
			b.Fatalf("approval of %s: %v %v", id, list, err)
		}
		if pv := list.GetApprovals()[0].GetPreview(); pv.GetState() != cpv1.Preview_STATE_PENDING {
			elapsed := time.Since(start)
			if pv.GetState() != cpv1.Preview_STATE_READY || len(pv.GetChanges()) != 2*k { // each rename: one removed, one added
				b.Fatalf("preview of %s: %v", id, pv)
			}
			if _, err := s.c.client.ResolveApproval(ctxT(b, time.Minute), &cpv1.ResolveApprovalRequest{
				ApprovalId: resp.GetPlan().GetApprovalId(), Decision: cpv1.Decision_DECISION_REJECT}); err != nil {
				b.Fatal(err)
			}
			return elapsed
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// scene is a session whose scene holds n planes, P00000 … besides the
// baseline camera and light, and what the benchmark knows of its journal.
type scene struct {
	c      *cluster
	id     string // session id
	n      int
	label  string // "100", "10k"
	plans  int    // request-id counter
	moved  int    // object.set_transform counter: each one moves to a new place
	head   int    // journal entries (scene changes, undos included) so far
	cpHead int    // journal index of the last checkpoint seen on disk

	build, buildBridge time.Duration // the build plan: end to end, and its receipts' duration_micros
	buildCheckpoint    time.Duration // agentd's save of the checkpoint after the build (0: not logged)
	buildCheckpoints   int           // checkpoints agentd logged up to the one after the build
}

// buildScene opens a session and fills its scene with n planes in one plan,
// then waits for its checkpoint.
func buildScene(b *testing.B, c *cluster, n int) *scene {
	b.Helper()
	s := &scene{c: c, id: c.negotiate(b).GetSessionId(), n: n, label: strconv.Itoa(n)}
	if n%1000 == 0 {
		s.label = strconv.Itoa(n/1000) + "k"
	}
	ops := make([]*cpv1.Operation, n)
	for i := range ops {
		ops[i] = op(fmt.Sprintf("p%05d", i), "object.create", map[string]any{
			"type": "plane", "name": fmt.Sprintf("P%05d", i), "location": []any{float64(i % 100 * 3), float64(i / 100 * 3), 0.0}})
	}
	elapsed, rs := s.run(b, "build", false, ops)
	requireStatuses(b, rs, n, cpv1.Receipt_STATUS_SUCCEEDED)
	s.build, s.buildBridge = elapsed, agentTime(rs)
	s.settle(b)
	want := fmt.Sprintf("checkpoint-%08d.blend", s.head)
	saves := s.logLines("checkpoint saved")
	for _, f := range saves {
		if filepath.Base(f["path"]) == want {
			s.buildCheckpoint, _ = time.ParseDuration(f["duration"])
		}
	}
	s.buildCheckpoints = len(saves)
	return s
}

func (s *scene) dir() string { return filepath.Join(s.c.dir, "agent", "sessions", s.id) }

// moves returns k independent object.set_transform operations on objects
// spread over the whole scene (a stride prime to n), each to a location no
// object had before.
func (s *scene) moves(k int) []*cpv1.Operation {
	ops := make([]*cpv1.Operation, k)
	for j := range ops {
		m := s.moved
		s.moved++
		ops[j] = op(fmt.Sprintf("m%05d", j), "object.set_transform", map[string]any{
			"name": fmt.Sprintf("P%05d", m*7919%s.n), "location": []any{float64(m % 1000), float64(m / 1000), 1.0}})
	}
	return ops
}

// run submits one plan and reads its receipts until the stream ends. It
// returns the wall time from SubmitPlan to the last receipt, and the receipts.
func (s *scene) run(b testing.TB, kind string, atomic bool, ops []*cpv1.Operation) (time.Duration, []*cpv1.Receipt) {
	b.Helper()
	s.plans++
	id := fmt.Sprintf("scale-%s-%s-%d", s.label, kind, s.plans)
	ctx := ctxT(b, 15*time.Minute)
	start := time.Now()
	if _, err := s.c.client.SubmitPlan(ctx, &cpv1.SubmitPlanRequest{SessionId: s.id, RequestId: id, Operations: ops, Atomic: atomic}); err != nil {
		b.Fatalf("submit %s: %v", id, err)
	}
	stream, err := s.c.client.StreamReceipts(ctx, &cpv1.StreamReceiptsRequest{RequestId: id, StartSequence: 1})
	if err != nil {
		b.Fatal(err)
	}
	var rs []*cpv1.Receipt
	last := start
	for {
		resp, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			b.Fatalf("stream %s after %d receipts: %v", id, len(rs), err)
		}
		r := resp.GetReceipt()
		if r == nil { // a progress event
			continue
		}
		last = time.Now()
		rs = append(rs, r)
		// The agent journals an entry for every scene change, undos included.
		if st := r.GetStatus(); (st == cpv1.Receipt_STATUS_SUCCEEDED || st == cpv1.Receipt_STATUS_ROLLED_BACK) &&
			r.GetSceneHashBefore() != r.GetSceneHashAfter() {
			s.head++
		}
	}
	return last.Sub(start), rs
}

// settle waits until the session's idle checkpoint of its latest journal
// entry is on disk (and the previous one removed, the checkpoint's last
// step), so that no save runs during the next measurement.
func (s *scene) settle(b testing.TB) {
	b.Helper()
	if s.head == s.cpHead {
		return
	}
	want := filepath.Join(s.dir(), fmt.Sprintf("checkpoint-%08d.blend", s.head))
	deadline := time.Now().Add(5 * time.Minute)
	for {
		files, _ := filepath.Glob(filepath.Join(s.dir(), "checkpoint-*.blend"))
		if len(files) == 1 && files[0] == want {
			break
		}
		if time.Now().After(deadline) {
			b.Fatalf("session %s: no checkpoint at journal index %d within 5m (files %v)", s.label, s.head, files)
		}
		time.Sleep(10 * time.Millisecond)
	}
	s.cpHead = s.head
}

// logField is one key=value of agentd's text log lines.
var logField = regexp.MustCompile(`\b([a-z_]+)=("(?:[^"\\]|\\.)*"|\S+)`)

// recoverAfterKill: with a checkpoint on disk and scaleReplay journal
// entries after it, kill -9 the session's Blender and time the next plan
// (one set_transform) end to end. Before the kill, the agent has a spare
// Blender ready; cold kills it too. It also returns the recovery time agentd
// logs ("session recovered … took=").
func (s *scene) recoverAfterKill(b *testing.B, cold bool) (e2e, agent, load time.Duration) {
	b.Helper()
	s.settle(b)
	s.c.waitSpares(b, 1) // started once the agent is quiet; a batch does not take it
	checkpoint := s.head
	_, rs := s.run(b, "replay", false, s.moves(scaleReplay))
	requireStatuses(b, rs, scaleReplay, cpv1.Receipt_STATUS_SUCCEEDED)
	seen, loads := len(s.logLines("session recovered")), len(s.logLines("checkpoint loaded"))
	pids := s.blenderPIDs()
	if len(pids) != 1 {
		b.Fatalf("session %s: Blender pids %v", s.label, pids)
	}
	if cold {
		pids = append(pids, s.c.sparePIDs()...)
	}
	for _, pid := range pids {
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
			b.Fatal(err)
		}
	}
	for deadline := time.Now().Add(10 * time.Second); len(s.blenderPIDs()) > 0 || cold && len(s.c.sparePIDs()) > 0; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			b.Fatalf("Blenders %v still alive 10s after SIGKILL", pids)
		}
	}
	if cold {
		s.c.waitSpares(b, 0)
	}
	adopted := s.c.adopted(b)
	ops := s.moves(1)
	b.StartTimer()
	e2e, rs = s.run(b, "recover", false, ops)
	b.StopTimer()
	requireStatuses(b, rs, 1, cpv1.Receipt_STATUS_SUCCEEDED)
	want := 1.0 // the spare
	if cold {
		want = 0
	}
	if took := s.c.adopted(b) - adopted; took != want {
		b.Fatalf("session %s: the recovery adopted %v spares, want %v", s.label, took, want)
	}
	lines := s.logLines("session recovered")
	if len(lines) != seen+1 {
		b.Fatalf("session %s: %d new \"session recovered\" log lines, want 1", s.label, len(lines)-seen)
	}
	f := lines[len(lines)-1]
	if f["replayed"] != strconv.Itoa(scaleReplay) || f["checkpoint_index"] != strconv.Itoa(checkpoint) {
		b.Fatalf("session %s recovered from checkpoint %s replaying %s entries; the benchmark wants checkpoint %d and %d entries (an idle checkpoint came before the kill?)",
			s.label, f["checkpoint_index"], f["replayed"], checkpoint, scaleReplay)
	}
	agent, err := time.ParseDuration(f["took"])
	if err != nil {
		b.Fatalf("took=%q: %v", f["took"], err)
	}
	if l := s.logLines("checkpoint loaded"); len(l) == loads+1 {
		load, _ = time.ParseDuration(l[loads]["duration"])
	}
	return e2e, agent, load
}

// BenchmarkRestore measures a parked session's restore at 100 and 10,000
// objects (issue 15: ≤ 1 s at 10,000, as for recovery): each scene is built
// as in BenchmarkScale on a control plane that parks sessions idle for 2 s;
// once the session is PARKED (checkpointed, its Blender stopped) and the
// agent has a spare Blender ready (as it keeps one), one
// object.set_transform is timed end to end (the spare adopted, the
// checkpoint's load and hash check, the operation), with agentd's own
// "session recovered … took=" and "checkpoint loaded … duration=".
func BenchmarkRestore(b *testing.B) {
	metrics := freeAddr(b)
	c := startClusterOpts(b, clusterOpts{cpArgs: []string{"--session-idle-timeout", "2s"}, agentArgs: []string{"--metrics-listen", metrics}})
	c.agentMetrics = metrics
	scenes := []*scene{buildScene(b, c, scaleSmall), buildScene(b, c, scaleLarge)}
	e2e, agent, load := map[*scene]float64{}, map[*scene]float64{}, map[*scene]float64{}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for _, s := range scenes {
			b.StopTimer()
			c.waitState(b, s.id, cpv1.Session_STATE_PARKED)
			if pids := s.blenderPIDs(); len(pids) != 0 {
				b.Fatalf("parked session %s runs Blender %v", s.label, pids)
			}
			// The agent keeps a spare Blender ready; the restore before
			// this one took it, and its successor may still be starting.
			c.waitSpares(b, 1)
			recovered, loads := len(s.logLines("session recovered")), len(s.logLines("checkpoint loaded"))
			b.StartTimer()
			elapsed, rs := s.run(b, "restore", false, s.moves(1))
			b.StopTimer()
			requireStatuses(b, rs, 1, cpv1.Receipt_STATUS_SUCCEEDED)
			e2e[s] += elapsed.Seconds() / float64(b.N)
			if l := s.logLines("session recovered"); len(l) == recovered+1 {
				d, _ := time.ParseDuration(l[recovered]["took"])
				agent[s] += d.Seconds() / float64(b.N)
			} else {
				b.Fatalf("session %s: %d new \"session recovered\" lines, want 1", s.label, len(l)-recovered)
			}
			l := s.logLines("checkpoint loaded")
			if len(l) != loads+1 {
				b.Fatalf("session %s: %d new \"checkpoint loaded\" lines, want 1 (a restore from its checkpoint)", s.label, len(l)-loads)
			}
			d, _ := time.ParseDuration(l[loads]["duration"])
			load[s] += d.Seconds() / float64(b.N)
		}
	}
	for _, s := range scenes {
		b.ReportMetric(e2e[s], "s/restore-e2e-"+s.label)
		b.ReportMetric(agent[s], "s/restore-agent-"+s.label)
		b.ReportMetric(load[s], "s/ckpt-load-"+s.label)
	}
}

// blenderPIDs returns the session's Blender, if it runs.
func (s *scene) blenderPIDs() []int {
	var out []int
	for _, p := range blenderprocs.OfSession(s.dir()) {
		n, _ := strconv.Atoi(p)
		out = append(out, n)
	}
	return out
}

// sparePIDs lists the agent's spare Blenders (ready or starting): its
// Blenders that no session's blender.pid names (an adopted spare keeps
// running from its work dir under spares/, so that does not tell them).
func (c *cluster) sparePIDs() []int {
	agent := filepath.Join(c.dir, "agent")
	sessions, _ := filepath.Glob(filepath.Join(agent, "sessions", "*"))
	taken := map[string]bool{}
	for _, dir := range sessions {
		for _, p := range blenderprocs.OfSession(dir) {
			taken[p] = true
		}
	}
	var out []int
	for _, p := range blenderprocs.Under(agent) {
		if !taken[p] {
			n, _ := strconv.Atoi(p)
			out = append(out, n)
		}
	}
	return out
}

// adopted reads how many Blender starts of the agent (started with
// --metrics-listen at c.agentMetrics) adopted a spare.
func (c *cluster) adopted(b testing.TB) float64 {
	return scrape(b, "http://"+c.agentMetrics+"/metrics", "")["blendplane_blender_spares_adopted_total"]
}

// waitSpares waits until the agent (started with --metrics-listen at
// c.agentMetrics) reports n spare Blenders ready.
func (c *cluster) waitSpares(b testing.TB, n float64) {
	b.Helper()
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		got := scrape(b, "http://"+c.agentMetrics+"/metrics", "")["blendplane_blender_spares"]
		if got == n {
			return
		}
		if time.Now().After(deadline) {
			b.Fatalf("the agent has %v spare Blenders ready after 60s, want %v", got, n)
		}
	}
}

// processes lists the live processes (zombies are dead already) whose
// /proc/<pid>/stat and cmdline keep accepts.
func processes(keep func(stat, cmdline string) bool) []int {
	entries, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil || strings.Contains(string(stat), ") Z ") {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil || !keep(string(stat), string(cmdline)) {
			continue
		}
		out = append(out, pid)
	}
	return out
}

// logLines returns the fields of agentd's log lines with message msg about
// this session, oldest first.
func (s *scene) logLines(msg string) []map[string]string {
	var out []map[string]string
	for _, line := range strings.Split(s.c.agent.log.String(), "\n") {
		if !strings.Contains(line, `msg="`+msg+`"`) {
			continue
		}
		f := map[string]string{}
		for _, m := range logField.FindAllStringSubmatch(line, -1) {
			f[m[1]] = strings.Trim(m[2], `"`)
		}
		if f["session_id"] == s.id {
			out = append(out, f)
		}
	}
	return out
}

// requireStatuses checks the number of receipts and their statuses: one
// status for all, or one per receipt.
func requireStatuses(b testing.TB, rs []*cpv1.Receipt, n int, want ...cpv1.Receipt_Status) {
	b.Helper()
	if len(rs) != n {
		b.Fatalf("%d receipts, want %d: %v", len(rs), n, rs[max(0, len(rs)-3):])
	}
	for i, r := range rs {
		w := want[0]
		if len(want) > 1 {
			w = want[i]
		}
		if r.GetStatus() != w {
			b.Fatalf("receipt %d: %v, want %v: %v", i+1, r.GetStatus(), w, r)
		}
	}
}

// agentTime sums the receipts' duration_micros (agentd's bridge calls).
func agentTime(rs []*cpv1.Receipt) time.Duration {
	var d time.Duration
	for _, r := range rs {
		d += time.Duration(r.GetDurationMicros()) * time.Microsecond
	}
	return d
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
