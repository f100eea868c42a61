package app

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/blendplane/blendplane/controlplane/internal/blob"
	"github.com/blendplane/blendplane/controlplane/internal/executor"
	"github.com/blendplane/blendplane/controlplane/internal/fleet"
	"github.com/blendplane/blendplane/controlplane/internal/plan"
	"github.com/blendplane/blendplane/controlplane/internal/store"
	agentv1 "github.com/blendplane/blendplane/gen/blendplane/agent/v1"
	cpv1 "github.com/blendplane/blendplane/gen/blendplane/controlplane/v1"
	"github.com/blendplane/blendplane/internal/receiptwire"
)

// Render fan-out. A render.animation with "distribute": true is split into
// contiguous frame ranges, one per READY agent whose runtime replays the
// session exactly (as for a move) and that carries the session's labels.
// Each agent renders its range on a fork of the session: a throwaway
// session on that agent rebuilt from the control plane's log (the session
// itself is never touched, and its scene hash must be reproduced first).
// The frames come back to the control plane as artifacts of the session.
// An agent that fails or is lost gives its range back; the next round
// renders it on the agents left. Seeded frames are the same bytes whoever
// renders them. One receipt lists every frame with the agent that
// rendered it, its artifact and SHA-256; progress counts frames across
// agents.

// frameRange is a contiguous part of a distributed render.
type frameRange struct{ from, to int }

// frame is one rendered frame as the receipt lists it.
type frame struct {
	frame         int
	agent, name   string
	sha256        string
	size          int64
	seed, samples float64
	width, height float64
}

// errRenderRefused: the render itself failed (bad args, no Cycles): no
// other agent would do better.
var errRenderRefused = errors.New("render refused")

// maxAnimationFrames is render.animation's limit on one call
// (MAX_ANIMATION_FRAMES in the bridge's tools/render.py).
const maxAnimationFrames = 500

// maxFrame is Blender's last frame (MAXFRAME).
const maxFrame = 1048574

// distribute is the executor's Config.Distribute.
func (a *App) distribute(ctx context.Context, ref store.PlanRef, sessionID string, op *cpv1.Operation) *cpv1.Receipt {
	start := time.Now()
	args := op.GetArgs().AsMap()
	key := plan.IdempotencyKey(ref.RequestID, op.GetOperationId(), args)
	r := &cpv1.Receipt{RequestId: ref.RequestID, OperationId: op.GetOperationId(), ToolName: op.GetToolName(),
		SafetyLevel: op.GetSafetyLevel(), McpCallId: cmp.Or(op.GetMcpCallId(), executor.NewID("call")), IdempotencyKey: key,
		DeterminismClass: "seeded"}
	fail := func(code, hint string, err error) *cpv1.Receipt {
		r.Status, r.CompleteTime = cpv1.Receipt_STATUS_FAILED, timestamppb.Now()
		r.DurationMicros = time.Since(start).Microseconds()
		r.Error = &cpv1.Failure{ErrorCode: code, Recoverable: true, Message: err.Error(), RetryHint: hint,
			MinimalRepairPlan: []*cpv1.RepairStep{{OperationId: op.GetOperationId(), Action: cpv1.RepairStep_ACTION_RETRY}}}
		return r
	}
	sess, err := a.store.Session(sessionID)
	if err != nil {
		return fail("INTERNAL", "retry the plan", err)
	}
	r.SceneHashBefore, r.SceneHashAfter = sess.Info.GetSceneHash(), sess.Info.GetSceneHash()
	first, okFirst := args["frame_start"].(float64)
	last, okLast := args["frame_end"].(float64)
	// The tool's schema bounds them, but it is the agent's: the numbers
	// are checked here before they size anything.
	whole := func(f float64) bool { return f >= 0 && f <= maxFrame && f == math.Trunc(f) }
	if !okFirst || !okLast || first > last || !whole(first) || !whole(last) {
		out := fail("INVALID_INPUT", fmt.Sprintf("give frame_start and frame_end (whole numbers from 0 to %d, frame_start ≤ frame_end) to distribute a render", maxFrame),
			errors.New("a distributed render.animation needs frame_start and frame_end, frame_start not after frame_end"))
		out.Error.MinimalRepairPlan[0].Action = cpv1.RepairStep_ACTION_REPLACE_ARGS
		return out
	}
	if n := int64(last-first) + 1; n > maxAnimationFrames {
		// The tool's own limit is per call, and each agent's share is one:
		// the whole range must keep to it too. (A registry with x-span on
		// render.animation refuses such a plan before it runs; this is for
		// agents whose registry predates it.)
		out := fail("INVALID_INPUT", fmt.Sprintf("render at most %d frames in one operation", maxAnimationFrames),
			fmt.Errorf("a render.animation of %d frames: at most %d", n, maxAnimationFrames))
		out.Error.MinimalRepairPlan[0].Action = cpv1.RepairStep_ACTION_REPLACE_ARGS
		return out
	}
	// The frames live on throwaway forks: the control plane keeps them all,
	// within the session owner's quota, or the render fails.
	quotaHint := "close sessions you are done with, ask an admin to raise --artifact-quota-mib, or render without distribute (the files stay on the session's agent)"
	left, err := a.quotaLeft(sess.Owner)
	if err != nil {
		return fail("INTERNAL", "retry the plan", err)
	}
	if left <= 0 {
		return fail("QUOTA_EXCEEDED", quotaHint, a.overQuota(sess.Owner, 0))
	}
	// Each range's frames take their room as they come; a render that
	// succeeds hands it to the collection of its receipt's files, which
	// records them.
	var reserved atomic.Int64
	succeeded := false
	defer func() {
		if succeeded {
			a.handOver(receiptKey(ref, op.GetOperationId()), sess.Owner, reserved.Load())
		} else {
			a.unreserve(sess.Owner, reserved.Load())
		}
	}()
	places, err := a.fleet.Place(sess.Info.GetContract().GetAgentSelector(), replays(sess))
	if err != nil {
		return fail("AGENT_UNAVAILABLE", "retry when an agent with the session's runtime is ready", err)
	}
	places = places[:min(len(places), int(last-first)+1)]
	log := a.log.With("request_id", ref.RequestID, "session_id", sessionID, "operation_id", op.GetOperationId())
	log.Info("distributing a render", "frames", int(last-first)+1, "agents", len(places))

	total := int64(last-first) + 1
	var mu sync.Mutex
	var done []frame
	inflight := map[int]int{} // frames done so far of each range rendering now, by its first frame
	progress := func(from, n int) {
		mu.Lock()
		defer mu.Unlock()
		if n < 0 {
			delete(inflight, from)
		} else {
			inflight[from] = n
		}
		sum := len(done)
		for _, k := range inflight {
			sum += k
		}
		a.store.PublishProgress(ref, &cpv1.Progress{OperationId: op.GetOperationId(), Done: int64(sum), Total: total})
	}
	pending := split(int(first), int(last), len(places))
	for len(pending) > 0 {
		if ctx.Err() != nil {
			return cancelledRender(r, start) // a cancel makes every agent's call fail: not their fault
		}
		if len(places) == 0 {
			return fail("AGENT_UNAVAILABLE", "retry when agents are back", fmt.Errorf("every agent failed; %d frame ranges left", len(pending)))
		}
		// Each range to an agent, round robin; each agent renders its ranges
		// in order. A failed agent drops out; its ranges go to the next round.
		var wg sync.WaitGroup
		var failed []frameRange
		var refused error
		dead := map[string]bool{}
		for i, p := range places {
			var mine []frameRange
			for j := i; j < len(pending); j += len(places) {
				mine = append(mine, pending[j])
			}
			if len(mine) == 0 {
				continue
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				for k, fr := range mine {
					frames, err := a.renderRange(ctx, sess, ref, op, p.AgentID, p.Runtime.GetRuntimeId(), fr, key, &reserved, func(n int) { progress(fr.from, n) })
					mu.Lock()
					if err == nil {
						done = append(done, frames...)
					}
					mu.Unlock()
					progress(fr.from, -1)
					if err == nil {
						continue
					}
					mu.Lock()
					switch {
					case errors.Is(err, blob.ErrDiskShort), errors.Is(err, errArtifactQuota): // say the most: they fail every agent alike
						refused = err
					case refused == nil && (errors.Is(err, errRenderRefused) || errors.Is(err, errDiverged)):
						refused = err
					}
					dead[p.AgentID] = true
					failed = append(failed, mine[k:]...)
					mu.Unlock()
					log.Warn("an agent of a distributed render failed; its frames go to the others", "agent_id", p.AgentID,
						"frames", fmt.Sprintf("%d-%d", fr.from, fr.to), "err", err)
					return
				}
			}()
		}
		wg.Wait()
		if ctx.Err() != nil {
			return cancelledRender(r, start)
		}
		if errors.Is(refused, blob.ErrDiskShort) { // no other agent would do better
			return fail("STORAGE_EXHAUSTED", "free disk on the control plane (its --data-dir), or render without distribute", refused)
		}
		if errors.Is(refused, errArtifactQuota) {
			return fail("QUOTA_EXCEEDED", quotaHint, refused)
		}
		if refused != nil {
			return fail("RENDER_FAILED", "fix the render's args, or render without distribute", refused)
		}
		pending = failed
		places = slices.DeleteFunc(places, func(p fleet.Placement) bool { return dead[p.AgentID] })
	}
	slices.SortFunc(done, func(x, y frame) int { return x.frame - y.frame })
	frames := make([]any, len(done))
	names, sums := make([]any, len(done)), make([]any, len(done))
	agents := map[string]bool{}
	for i, f := range done {
		frames[i] = map[string]any{"frame": float64(f.frame), "agent_id": f.agent, "artifact": f.name, "sha256": f.sha256}
		names[i], sums[i] = f.name, f.sha256
		agents[f.agent] = true
		r.Artifacts = append(r.Artifacts, &cpv1.Artifact{SessionId: sessionID, Name: f.name, SizeBytes: f.size, Sha256: f.sha256})
	}
	res := map[string]any{"frames": frames, "paths": names, "sha256": sums, "agents": float64(len(agents)), "distributed": true}
	if len(done) > 0 {
		res["seed"], res["samples"], res["resolution"] = done[0].seed, done[0].samples, []any{done[0].width, done[0].height}
	}
	r.Result, _ = structpb.NewStruct(res)
	r.Status, r.CompleteTime = cpv1.Receipt_STATUS_SUCCEEDED, timestamppb.Now()
	r.DurationMicros = time.Since(start).Microseconds()
	succeeded = len(r.GetArtifacts()) > 0 // collected: collect takes the room back
	log.Info("distributed render done", "frames", len(done), "agents", len(agents), "took", time.Since(start).Round(time.Millisecond))
	return r
}

// split cuts [first, last] into at most n contiguous ranges of nearly equal
// length, in order.
func split(first, last, n int) []frameRange {
	count := last - first + 1
	n = max(1, min(n, count))
	out := make([]frameRange, 0, n)
	from := first
	for i := range n {
		size := count / n
		if i < count%n {
			size++
		}
		out = append(out, frameRange{from, from + size - 1})
		from += size
	}
	return out
}

func cancelledRender(r *cpv1.Receipt, start time.Time) *cpv1.Receipt {
	r.Status, r.CompleteTime = cpv1.Receipt_STATUS_NOT_RUN, timestamppb.Now()
	r.DurationMicros = time.Since(start).Microseconds()
	r.Error = &cpv1.Failure{ErrorCode: "CANCELLED", Recoverable: true, Message: "cancelled while rendering; its frames were discarded",
		RetryHint: "submit the remaining operations again under a new request_id"}
	return r
}

// renderRange renders frames [fr.from, fr.to] on one agent, on a fork of
// the session rebuilt there, and brings the frames into the blob store.
func (a *App) renderRange(ctx context.Context, sess store.Session, ref store.PlanRef, op *cpv1.Operation, agentID, runtimeID string,
	fr frameRange, key string, reserved *atomic.Int64, progress func(int)) (_ []frame, err error) {
	agent, err := a.fleet.Client(agentID)
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256([]byte(key + fmt.Sprint(fr.from)))
	fork := "fork-" + hex.EncodeToString(sum[:12])
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		agent.CloseSession(cctx, &agentv1.CloseSessionRequest{SessionId: fork})
	}()
	rp, err := a.restore(ctx, agentID, sess, fork, runtimeID, 0)
	if err != nil {
		return nil, err
	}
	if rp.hash != sess.Info.GetSceneHash() {
		return nil, fmt.Errorf("%w: the fork on agent %s hashes %s, the session %s", errDiverged, agentID, rp.hash, sess.Info.GetSceneHash())
	}

	args := op.GetArgs().AsMap()
	delete(args, "distribute")
	args["frame_start"], args["frame_end"] = float64(fr.from), float64(fr.to)
	part, _ := structpb.NewStruct(args)
	partID := fmt.Sprintf("%s.f%d", op.GetOperationId(), fr.from)
	if len(partID) > 128 {
		partID = fmt.Sprintf("part.f%d", fr.from)
	}
	call := &agentv1.OperationCall{OperationId: partID, ToolName: op.GetToolName(), Args: part, SafetyLevel: op.GetSafetyLevel(),
		IdempotencyKey: plan.IdempotencyKey(ref.RequestID, partID, args), McpCallId: cmp.Or(op.GetMcpCallId(), executor.NewID("call")),
		TimeBudgetMs: sess.Info.GetContract().GetConstraints().GetToolTimeBudgetMs()}
	// A partitioned agent sends nothing, not even an error: its part goes
	// to the others once it has been silent too long (it reports each frame).
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	watchdog := time.AfterFunc(replaySilence, cancel)
	defer watchdog.Stop()
	stream, err := agent.Execute(ctx, &agentv1.ExecuteRequest{SessionId: fork, RequestId: ref.RequestID, Operations: []*agentv1.OperationCall{call}})
	if err != nil {
		return nil, err
	}
	var rc *cpv1.Receipt
	for rc == nil {
		watchdog.Reset(replaySilence)
		resp, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("agent %s ended the render early", agentID)
		}
		if err != nil {
			return nil, err
		}
		if p := resp.GetProgress(); p != nil {
			progress(int(p.GetDone()))
		}
		rc = resp.GetReceipt()
	}
	if rc.GetStatus() != cpv1.Receipt_STATUS_SUCCEEDED {
		if rc.GetError().GetErrorCode() == "BLENDER_EXITED" || rc.GetError().GetErrorCode() == "TIMEOUT" || rc.GetError().GetErrorCode() == "RESOURCE_EXHAUSTED" {
			return nil, fmt.Errorf("agent %s: %s", agentID, rc.GetError().GetMessage())
		}
		return nil, fmt.Errorf("%w: %s: %s", errRenderRefused, rc.GetError().GetErrorCode(), rc.GetError().GetMessage())
	}
	result, err := receiptwire.Result(rc)
	if err != nil {
		return nil, fmt.Errorf("agent %s: its render's result: %w", agentID, err)
	}
	res := result.AsMap()
	var size int64
	for _, f := range rc.GetArtifacts() {
		size += f.GetSizeBytes()
	}
	// The range is kept whole or not at all.
	if ok, err := a.reserve(sess.Owner, size); err != nil || !ok {
		return nil, cmp.Or(err, a.overQuota(sess.Owner, size))
	}
	reserved.Add(size)
	defer func() {
		if err != nil { // another agent renders the range again
			a.unreserve(sess.Owner, size)
			reserved.Add(-size)
		}
	}()
	var out []frame
	for _, f := range rc.GetArtifacts() {
		art := &cpv1.Artifact{SessionId: fork, Name: f.GetName(), SizeBytes: f.GetSizeBytes(), Sha256: f.GetSha256()}
		if !a.blobs.Has(art.GetSha256()) {
			err := a.fetch(ctx, agent, art)
			if errors.Is(err, blob.ErrDiskShort) {
				return nil, err
			} else if err != nil {
				return nil, status.Convert(err).Err()
			}
		}
		out = append(out, frame{agent: agentID, name: f.GetName(), sha256: f.GetSha256(), size: f.GetSizeBytes()})
	}
	frames, _ := res["frames"].([]any)
	if len(frames) != len(out) {
		return nil, fmt.Errorf("agent %s rendered %d files for %d frames", agentID, len(out), len(frames))
	}
	res2, _ := res["resolution"].([]any)
	for i := range out {
		n, ok := frames[i].(float64)
		if !ok || n != float64(int(n)) || int(n) < fr.from || int(n) > fr.to {
			return nil, fmt.Errorf("agent %s answered frame %v for frames %d-%d", agentID, frames[i], fr.from, fr.to)
		}
		out[i].frame = int(n)
		out[i].seed, _ = res["seed"].(float64)
		out[i].samples, _ = res["samples"].(float64)
		if len(res2) == 2 {
			out[i].width, _ = res2[0].(float64)
			out[i].height, _ = res2[1].(float64)
		}
	}
	return out, nil
}

// replayHistory feeds a session's redo log after audit sequence after to a
// replayer and flushes it.
func (a *App) replayHistory(ctx context.Context, sessionID string, after uint64, rp *replayer) error {
	for {
		recs, err := a.store.SessionHistory(sessionID, after, 1000)
		if err != nil {
			return err
		}
		for _, rec := range recs {
			if err := rp.add(ctx, rec); err != nil {
				return err
			}
			after = uint64(rec.GetSequence())
		}
		if len(recs) < 1000 {
			break
		}
	}
	return rp.flush(ctx)
}
