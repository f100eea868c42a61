package planjson

import (
	"encoding/json"
	"fmt"
	"math/rand"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	cpv1 "github.com/blendplane/blendplane/gen/blendplane/controlplane/v1"
	"github.com/blendplane/blendplane/internal/receiptwire"
)

// receiptMap is a receipt as the map Receipt's JSON stands for: the
// reference it is checked against.
func receiptMap(r *cpv1.Receipt) map[string]any {
	m := map[string]any{
		"sequence": r.GetSequence(), "request_id": r.GetRequestId(), "operation_id": r.GetOperationId(),
		"tool_name": r.GetToolName(), "status": Short(r.GetStatus().String()), "result": result(r),
		"mcp_call_id": r.GetMcpCallId(), "scene_hash_before": r.GetSceneHashBefore(), "scene_hash_after": r.GetSceneHashAfter(),
		"safety_level":    strings.ToLower(strings.TrimPrefix(r.GetSafetyLevel().String(), "SAFETY_LEVEL_")),
		"idempotency_key": r.GetIdempotencyKey(), "duration_micros": r.GetDurationMicros(),
		"determinism_class": r.GetDeterminismClass(), "tolerance": r.GetTolerance(),
	}
	if id := r.GetBlenderMutationId(); id != "" {
		m["blender_mutation_id"] = id
	}
	if t := r.GetCompleteTime(); t != nil {
		m["complete_time"] = t.AsTime().Format(time.RFC3339Nano)
	}
	if t := r.GetAgentSentTime(); t != nil {
		m["agent_sent_time"] = t.AsTime().Format(time.RFC3339Nano)
	}
	if r.GetVerified() {
		m["verified"] = true
	}
	if r.GetError() != nil {
		m["error"] = Failure(r.GetError())
	}
	if len(r.GetArtifacts()) > 0 {
		var names []any
		for _, a := range r.GetArtifacts() {
			names = append(names, a.GetName())
		}
		m["artifacts"] = names
	}
	return m
}

// TestReceipt: Receipt writes byte for byte what json.Marshal writes for
// the receipt's map, over random receipts whose strings need every kind of
// escape, with their results decoded or still in wire form.
func TestReceipt(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	pieces := []string{"", "a", "Cube.001", `"q"`, `back\slash`, "<b>&amp;</b>", "tab\tnl\n", "\x01", "é", "中文", "😀",
		"\u2028\u2029", "\x7f", "/"} // valid UTF-8: a receipt with other strings does not encode
	str := func() string {
		var b strings.Builder
		for range rng.Intn(4) {
			b.WriteString(pieces[rng.Intn(len(pieces))])
		}
		return b.String()
	}
	for i := range 500 {
		r := &cpv1.Receipt{
			Sequence: rng.Int63n(1 << 40), RequestId: str(), OperationId: str(), ToolName: str(), McpCallId: str(),
			Status: cpv1.Receipt_Status(rng.Intn(6)), SafetyLevel: cpv1.SafetyLevel(rng.Intn(4)),
			SceneHashBefore: str(), SceneHashAfter: str(), IdempotencyKey: str(), DurationMicros: rng.Int63n(1e9) - 5,
			DeterminismClass: str(), Tolerance: str(), BlenderMutationId: str(), Verified: rng.Intn(2) == 0,
		}
		if rng.Intn(2) == 0 {
			r.CompleteTime = timestamppb.New(time.Unix(rng.Int63n(1<<32), rng.Int63n(1e9)))
		}
		if rng.Intn(2) == 0 {
			r.AgentSentTime = timestamppb.New(time.Unix(rng.Int63n(1<<32), rng.Int63n(1e9)))
		}
		if rng.Intn(3) == 0 {
			r.Error = &cpv1.Failure{ErrorCode: str(), Message: str(), RetryHint: str(), Recoverable: rng.Intn(2) == 0}
		}
		for range rng.Intn(3) {
			r.Artifacts = append(r.Artifacts, &cpv1.Artifact{Name: str()})
		}
		if rng.Intn(4) > 0 {
			res, err := structpb.NewStruct(map[string]any{str(): str(), "n": rng.NormFloat64() * 1e6, "list": []any{str(), true, nil}})
			if err != nil {
				t.Fatal(err)
			}
			r.Result = res
		}
		if i%2 == 0 { // as the control plane hands it on: the result in wire form
			raw, err := proto.Marshal(r)
			if err != nil {
				t.Fatal(err)
			}
			r = &cpv1.Receipt{}
			if err := receiptwire.Unmarshal(raw, r); err != nil {
				t.Fatal(err)
			}
		}
		want, err := json.Marshal(receiptMap(r))
		if err != nil {
			t.Fatal(err)
		}
		if got := Receipt(r); string(got) != string(want) {
			t.Fatalf("receipt %d:\n got %s\nwant %s", i, got, want)
		}
	}
	if got := fmt.Sprint(len(Receipts(nil))); got != "0" {
		t.Errorf("Receipts(nil) has %s entries", got)
	}
}

// BenchmarkReceipt: a 220-object scene.get_summary receipt, its result in
// wire form, as the map json.Marshal encodes and as Receipt writes it.
func BenchmarkReceipt(b *testing.B) {
	objs := make([]any, 220)
	for i := range objs {
		objs[i] = map[string]any{"name": fmt.Sprintf("Object_%04d", i), "type": "MESH"}
	}
	res, _ := structpb.NewStruct(map[string]any{"objects": objs, "object_count": 220.0, "active_object": nil})
	raw, _ := proto.Marshal(&cpv1.Receipt{RequestId: "r", OperationId: "op", ToolName: "scene.get_summary",
		Status: cpv1.Receipt_STATUS_SUCCEEDED, Result: res, SceneHashBefore: strings.Repeat("a", 64),
		SceneHashAfter: strings.Repeat("a", 64), CompleteTime: timestamppb.Now()})
	r := &cpv1.Receipt{}
	if err := receiptwire.Unmarshal(raw, r); err != nil {
		b.Fatal(err)
	}
	b.Run("map+Marshal", func(b *testing.B) {
		for b.Loop() {
			json.Marshal(receiptMap(r))
		}
	})
	b.Run("Receipt", func(b *testing.B) {
		for b.Loop() {
			Receipt(r)
		}
	})
}
