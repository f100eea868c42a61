package e2e

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/types/known/structpb"

	agentv1 "github.com/blendplane/blendplane/gen/blendplane/agent/v1"
	cpv1 "github.com/blendplane/blendplane/gen/blendplane/controlplane/v1"
)

// rawCodec sends and receives bytes as they are, to put malformed
// messages on the wire.
type rawCodec struct{}

func (rawCodec) Name() string { return "proto" }

func (rawCodec) Marshal(v any) ([]byte, error) { return v.([]byte), nil }

func (rawCodec) Unmarshal(data []byte, v any) error {
	*(v.(*[]byte)) = append([]byte(nil), data...)
	return nil
}

// TestBadInput: what an adversarial pass found. Each bad request is
// refused with its documented code and ErrorInfo, or its operation fails
// cleanly, and nothing changes: no daemon crashes, no call hangs, nothing is
// logged whole, nothing is written outside the data dirs.
func TestBadInput(t *testing.T) {
	home := t.TempDir()
	c := startClusterOpts(t, clusterOpts{
		cpArgs:   []string{"--max-message-bytes", "16777216", "--session-idle-timeout", "2s"},
		agentEnv: []string{"HOME=" + home, "XDG_CACHE_HOME=" + filepath.Join(home, ".cache")},
	})
	t.Run("HugeIDs", func(t *testing.T) {
		huge := strings.Repeat("r", 10<<20)
		logged := len(c.cp.log.String())
		calls := map[string]func() error{
			"GetPlan": func() error {
				_, err := c.client.GetPlan(ctxT(t, time.Minute), &cpv1.GetPlanRequest{RequestId: huge})
				return err
			},
			"CancelPlan": func() error {
				_, err := c.client.CancelPlan(ctxT(t, time.Minute), &cpv1.CancelPlanRequest{RequestId: huge})
				return err
			},
			"StreamReceipts": func() error {
				stream, err := c.client.StreamReceipts(ctxT(t, time.Minute), &cpv1.StreamReceiptsRequest{RequestId: huge})
				if err != nil {
					return err
				}
				_, err = stream.Recv()
				return err
			},
			"GetSession": func() error {
				_, err := c.client.GetSession(ctxT(t, time.Minute), &cpv1.GetSessionRequest{SessionId: huge})
				return err
			},
		}
		for name, call := range calls {
			err := call()
			wantRefusal(t, name, err, codes.InvalidArgument, "SCHEMA_INVALID")
			if n := len(status.Convert(err).Message()); n > 1024 {
				t.Errorf("%s: the refusal is %d bytes long", name, n)
			}
		}
		if grown := len(c.cp.log.String()) - logged; grown > 64<<10 {
			t.Errorf("the control plane logged %d bytes for four refused calls", grown)
		}
	})
	t.Run("UndecodableRequests", func(t *testing.T) {
		conn := dial(t, c.cpAddr)
		invoke := func(method string, body []byte) error {
			var out []byte
			return conn.Invoke(ctxT(t, time.Minute), "/blendplane.controlplane.v1.ControlPlaneService/"+method, body, &out,
				grpc.ForceCodec(rawCodec{}), grpc.PerRPCCredentials(bearer(c.adminToken)))
		}
		// A field tag with no field number, and a length past the end.
		wantRefusal(t, "malformed protobuf", invoke("GetPlan", []byte{0x00, 0xff, 0xff}), codes.InvalidArgument, "SCHEMA_INVALID")
		wantRefusal(t, "truncated protobuf", invoke("GetPlan", []byte{0x0a, 0x40, 'a'}), codes.InvalidArgument, "SCHEMA_INVALID")
		// request_id (field 1) that is not UTF-8.
		bad := protowire.AppendBytes(protowire.AppendTag(nil, 1, protowire.BytesType), []byte{'r', 0xff, 0xfe})
		wantRefusal(t, "invalid UTF-8", invoke("GetPlan", bad), codes.InvalidArgument, "SCHEMA_INVALID")
		// Args nested deeper than protobuf decodes.
		wantRefusal(t, "over-deep Struct", invoke("SubmitPlan", deepPlan(4000)), codes.InvalidArgument, "SCHEMA_INVALID")
		// A plan over the control plane's message limit (16 MiB here).
		big, _ := structpb.NewStruct(map[string]any{"code": strings.Repeat("x", 20<<20)})
		_, err := c.client.SubmitPlan(ctxT(t, time.Minute), &cpv1.SubmitPlanRequest{SessionId: "s-x", RequestId: "big",
			Operations: []*cpv1.Operation{{OperationId: "a", ToolName: "python.exec", Args: big, SafetyLevel: cpv1.SafetyLevel_SAFETY_LEVEL_DESTRUCTIVE}}})
		wantRefusal(t, "a plan over the payload limit", err, codes.ResourceExhausted, "PAYLOAD_TOO_LARGE")
		// The control plane still serves.
		if _, err := c.client.ListAgents(ctxT(t, 10*time.Second), &cpv1.ListAgentsRequest{}); err != nil {
			t.Fatalf("after bad requests: %v", err)
		}
	})
	t.Run("TimeBudgetTooSmall", func(t *testing.T) {
		_, err := c.client.Negotiate(ctxT(t, time.Minute), negotiateReq(func(r *cpv1.NegotiateRequest) {
			r.Constraints = &cpv1.Constraints{ToolTimeBudgetMs: 1}
		}))
		contractViolation(t, err, "constraints.tool_time_budget_ms", "1")
	})
	t.Run("OperationsThatFailCleanly", func(t *testing.T) {
		s := c.negotiate(t)
		id := s.GetSessionId()
		sandbox := filepath.Join(c.dir, "agent", "sessions", id, "output")
		if err := mkdir(filepath.Join(sandbox, "taken.png")); err != nil {
			t.Fatal(err)
		}
		_, rs := c.run(t, id, "bad-ops-1",
			op("light", "light.create", map[string]any{"name": "Lamp", "location": []any{0, 0, 3}}),
			op("aim", "camera.look_at", map[string]any{"name": "Lamp", "target": []any{0, 0, 0}}, "light"))
		if rs[1].GetStatus() != cpv1.Receipt_STATUS_FAILED || rs[1].GetError().GetErrorCode() != "INVALID_INPUT" ||
			rs[1].GetSceneHashAfter() != rs[0].GetSceneHashAfter() {
			t.Fatalf("camera.look_at on a light: %v", rs[1])
		}
		_, rs = c.run(t, id, "bad-ops-2", op("shot", "render.still", map[string]any{"output": "taken.png", "resolution": []any{32, 24}, "samples": 1}))
		if rs[0].GetStatus() != cpv1.Receipt_STATUS_FAILED || rs[0].GetError().GetErrorCode() != "CONFLICT" {
			t.Fatalf("render to a directory's name: %v", rs[0])
		}
	})
	t.Run("OversizedResultLeavesNothing", func(t *testing.T) {
		resp, err := c.client.Negotiate(ctxT(t, time.Minute), negotiateReq(func(r *cpv1.NegotiateRequest) {
			r.HostProfile.FeatureFlags = []string{"unsafe_ops", "nondeterministic_tools"}
		}))
		if err != nil {
			t.Fatal(err)
		}
		id := resp.GetContract().GetSessionId()
		_, rs := c.run(t, id, "big-result",
			op("big", "python.exec", map[string]any{"code": "import bpy\nbpy.data.objects.new('Big', None)\nresult = 'x' * (70 << 20)"}))
		if rs[0].GetStatus() != cpv1.Receipt_STATUS_FAILED || rs[0].GetSceneHashBefore() == "" ||
			rs[0].GetSceneHashAfter() != rs[0].GetSceneHashBefore() {
			t.Fatalf("70 MiB result: %v", rs[0])
		}
		audit, err := c.client.ListAuditRecords(ctxT(t, 10*time.Second), &cpv1.ListAuditRecordsRequest{RequestId: "big-result"})
		if err != nil || len(audit.GetAuditRecords()) != 1 || audit.GetAuditRecords()[0].GetSceneHashAfter() == "" {
			t.Fatalf("audit of the failed call: %v %v", audit, err)
		}
		_, rs = c.run(t, id, "big-result-look", op("look", "python.exec", map[string]any{"code": "import bpy\nresult = 'Big' in bpy.data.objects"}))
		if got := rs[0].GetResult().GetFields()["result"]; got == nil || got.GetBoolValue() {
			t.Fatalf("the failed call's object stayed: %v", rs[0])
		}
	})
	t.Run("DeepArgsToTheAgent", func(t *testing.T) {
		s := c.negotiate(t)
		deep := map[string]any{}
		for i := 0; i < 1000; i++ {
			deep = map[string]any{"a": deep}
		}
		args, err := structpb.NewStruct(map[string]any{"type": "cube", "name": deep})
		if err != nil {
			t.Fatal(err)
		}
		agent := agentv1.NewAgentServiceClient(c.agentConn(t))
		stream, err := agent.Execute(ctxT(t, time.Minute), &agentv1.ExecuteRequest{SessionId: s.GetSessionId(), RequestId: "deep-1",
			Operations: []*agentv1.OperationCall{{OperationId: "a", ToolName: "object.create", Args: args,
				SafetyLevel: cpv1.SafetyLevel_SAFETY_LEVEL_SAFE_WRITE, IdempotencyKey: strings.Repeat("ab", 32), McpCallId: "call-deep"}}})
		if err != nil {
			t.Fatal(err)
		}
		resp, err := stream.Recv()
		if err != nil {
			t.Fatalf("no answer for args nested 1000 deep: %v", err)
		}
		if r := resp.GetReceipt(); r.GetStatus() != cpv1.Receipt_STATUS_FAILED || r.GetError().GetErrorCode() != "INVALID_INPUT" {
			t.Fatalf("receipt %v", r)
		}
	})
	t.Run("NothingWrittenOutsideTheDataDir", func(t *testing.T) {
		s := c.negotiate(t)
		c.run(t, s.GetSessionId(), "home-1", op("a", "object.create", map[string]any{"type": "cube"}))
		c.waitState(t, s.GetSessionId(), cpv1.Session_STATE_PARKED) // parking saves a checkpoint
		var written []string
		filepath.WalkDir(home, func(path string, d fs.DirEntry, err error) error {
			if err == nil && !d.IsDir() {
				written = append(written, path)
			}
			return nil
		})
		if len(written) > 0 {
			t.Fatalf("written under the agent's HOME: %v", written)
		}
	})
}

func mkdir(path string) error { return os.Mkdir(path, 0o755) }

// deepPlan encodes a SubmitPlanRequest by hand whose one operation has args
// nested depth Structs deep: more than protobuf's decoder accepts.
func deepPlan(depth int) []byte {
	var value []byte // google.protobuf.Value{null_value: 0}
	value = protowire.AppendVarint(protowire.AppendTag(value, 1, protowire.VarintType), 0)
	for i := 0; i < depth; i++ {
		// Struct{fields: {"a": value}}, then Value{struct_value: that}.
		entry := protowire.AppendString(protowire.AppendTag(nil, 1, protowire.BytesType), "a")
		entry = protowire.AppendBytes(protowire.AppendTag(entry, 2, protowire.BytesType), value)
		st := protowire.AppendBytes(protowire.AppendTag(nil, 1, protowire.BytesType), entry)
		value = protowire.AppendBytes(protowire.AppendTag(nil, 5, protowire.BytesType), st)
	}
	// The args Struct is the innermost Value's struct: strip the outer Value.
	_, _, n := protowire.ConsumeTag(value)
	args, _ := protowire.ConsumeBytes(value[n:])
	var op []byte
	op = protowire.AppendString(protowire.AppendTag(op, 1, protowire.BytesType), "a")
	op = protowire.AppendString(protowire.AppendTag(op, 2, protowire.BytesType), "object.create")
	op = protowire.AppendBytes(protowire.AppendTag(op, 3, protowire.BytesType), args)
	op = protowire.AppendVarint(protowire.AppendTag(op, 5, protowire.VarintType), 2)
	var req []byte
	req = protowire.AppendString(protowire.AppendTag(req, 1, protowire.BytesType), "s-x")
	req = protowire.AppendString(protowire.AppendTag(req, 2, protowire.BytesType), "deep")
	return protowire.AppendBytes(protowire.AppendTag(req, 3, protowire.BytesType), op)
}

// TestAgentdRefusesTooManyLabels: agentd refuses at start more labels than
// the control plane's RegisterAgent takes (32), with a usage error, rather
// than start and retry its registration forever (found by QA).
func TestAgentdRefusesTooManyLabels(t *testing.T) {
	args := []string{"--data-dir", t.TempDir(), "--control-plane", "127.0.0.1:1"}
	for i := range 33 {
		args = append(args, "--label", fmt.Sprintf("k%d=v", i))
	}
	out, err := exec.Command(filepath.Join(binDir, "agentd"), args...).CombinedOutput()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 2 || !strings.Contains(string(out), "at most 32 labels") {
		t.Fatalf("agentd with 33 labels: %v\n%.300s", err, out)
	}
}
