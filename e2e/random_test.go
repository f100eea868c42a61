package e2e

import (
	"cmp"
	"context"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"math"
	"math/rand/v2"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"buf.build/gen/go/bufbuild/protovalidate/protocolbuffers/go/buf/validate"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/dynamicpb"
	"google.golang.org/protobuf/types/known/structpb"

	agentv1 "github.com/blendplane/blendplane/gen/blendplane/agent/v1"
	cpv1 "github.com/blendplane/blendplane/gen/blendplane/controlplane/v1"
	plannerv1 "github.com/blendplane/blendplane/gen/blendplane/planner/v1"
)

// TestRandomRequests sends thousands of requests built at random, field by
// field from the descriptors, to every RPC of the control plane and of
// agentd: empty, huge, non-ASCII and path-like strings, ids of a live
// session and plan, numbers at their limits, NaN, enum values no version
// defines, nested messages and Structs. Whatever arrives, a daemon answers
// with a structured refusal or does the work: no call may finish Internal,
// Unknown or DataLoss, none may find a daemon gone, and both still serve a
// plan afterwards, and no path in a request wrote outside its sandbox.
// The seed is fixed; BLENDPLANE_RANDOM_SEED=time draws a new one (logged),
// BLENDPLANE_RANDOM_SEED=<seed> replays it.
func TestRandomRequests(t *testing.T) {
	seed := uint64(20261129) // the same requests every run; BLENDPLANE_RANDOM_SEED=time draws others
	switch s := os.Getenv("BLENDPLANE_RANDOM_SEED"); s {
	case "":
	case "time":
		seed = uint64(time.Now().UnixNano())
	default:
		var err error
		if seed, err = strconv.ParseUint(s, 10, 64); err != nil {
			t.Fatalf("BLENDPLANE_RANDOM_SEED=%q: %v", s, err)
		}
	}
	t.Logf("seed %d (BLENDPLANE_RANDOM_SEED=%[1]d replays it)", seed)
	before := entries(t, repoRoot())
	// A path outside every sandbox, new to this run: nothing may write it.
	canary := filepath.Join(os.TempDir(), fmt.Sprintf("blendplane-canary-%d-%d", os.Getpid(), time.Now().UnixNano()), "x")
	home := t.TempDir()
	c := startClusterOpts(t, clusterOpts{insecure: true,
		agentEnv: []string{"HOME=" + home, "XDG_CACHE_HOME=" + home + "/.cache"}})
	s := c.negotiate(t)
	plan, receipts := c.run(t, s.GetSessionId(), "random-1", op("a", "object.create", map[string]any{"type": "cube", "name": "Known"}))
	sess, err := c.client.GetSession(ctxT(t, 10*time.Second), &cpv1.GetSessionRequest{SessionId: s.GetSessionId()})
	if err != nil {
		t.Fatal(err)
	}
	tools, err := c.client.ListTools(ctxT(t, 10*time.Second), &cpv1.ListToolsRequest{SessionId: s.GetSessionId()})
	if err != nil {
		t.Fatal(err)
	}
	g := &randomValues{r: rand.New(rand.NewPCG(seed, seed>>1)), canary: canary,
		primary: []string{s.GetSessionId(), plan.GetRequestId(), sess.GetSession().GetRuntimeId(), "1.0.0", receipts[0].GetIdempotencyKey()},
		// "." and "..": a session id names a directory on the agent.
		byField: map[string][]string{"session_id": {s.GetSessionId(), ".", ".."}, "request_id": {plan.GetRequestId(), "new-request"},
			"runtime_id": {sess.GetSession().GetRuntimeId()}, "idempotency_keys": {receipts[0].GetIdempotencyKey()},
			"contract_version": {"1.0.0"}, "scene_hash": {sess.GetSession().GetSceneHash()}, "agent_id": {"bench-agent", "e2e-agent"}},
		known: []string{s.GetSessionId(), s.GetSessionId(), plan.GetRequestId(), "new-request", "op-a", "a", "Known", "Cube",
			"1.0.0", "admin", "plans", "e2e", "x.png", "out/x.blend", "x.obj", "127.0.0.1:9", c.agentAddr, "bpy_4.5",
			strconv.FormatInt(sess.GetSession().GetEpoch(), 10)},
		hashes: []string{sess.GetSession().GetSceneHash(), receipts[0].GetIdempotencyKey()}}
	for _, tool := range tools.GetTools() {
		g.tools = append(g.tools, tool.GetName())
	}

	cp := dial(t, c.cpAddr)
	agent := dial(t, c.agentAddr)
	for _, target := range []struct {
		conn  *grpc.ClientConn
		svc   protoreflect.ServiceDescriptor
		calls int
	}{
		{cp, cpv1.File_blendplane_controlplane_v1_controlplane_proto.Services().ByName("ControlPlaneService"), 150},
		{agent, agentv1.File_blendplane_agent_v1_agent_proto.Services().ByName("AgentService"), 100},
	} {
		// CloseSession last: it would leave the others little but NotFound.
		var methods []protoreflect.MethodDescriptor
		for i := range target.svc.Methods().Len() {
			methods = append(methods, target.svc.Methods().Get(i))
		}
		slices.SortStableFunc(methods, func(a, b protoreflect.MethodDescriptor) int {
			return cmp.Compare(closing(a), closing(b))
		})
		for _, md := range methods {
			for range target.calls {
				msgs, req := g.wire(md)
				code, err := g.call(c, target.conn, md, msgs)
				if err != nil {
					t.Fatalf("%s: %v", md.FullName(), err)
				}
				if broken(code) {
					j, _ := protojson.Marshal(req)
					t.Fatalf("%s finished %s for %.2000s, sent as %.400x", md.FullName(), code, j, msgs)
				}
			}
		}
	}
	// The MCP server: every tool, resource and prompt, with arguments of
	// the tools' kind or any JSON at all.
	cs := connectMCP(t, c, "random", "2025-06-18")
	defer cs.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	served := func(what string, err error) {
		if err != nil && strings.Contains(err.Error(), "a bug, logged by the server") {
			t.Fatalf("MCP %s: %v", what, err)
		}
	}
	mcpTools, err := cs.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tool := range mcpTools.Tools {
		for range 15 {
			var args any = g.args().AsMap()
			if g.r.IntN(4) == 0 {
				args = g.jsonValue(0)
			}
			_, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: tool.Name, Arguments: args})
			served(fmt.Sprintf("%s %v", tool.Name, args), err)
		}
	}
	var uris []string
	if res, err := cs.ListResources(ctx, nil); err == nil {
		for _, r := range res.Resources {
			uris = append(uris, r.URI)
		}
	}
	if res, err := cs.ListResourceTemplates(ctx, nil); err == nil {
		for _, r := range res.ResourceTemplates {
			uris = append(uris, r.URITemplate)
		}
	}
	for _, uri := range uris {
		for range 10 {
			u := uri
			if g.r.IntN(2) == 0 {
				u = strings.NewReplacer("{", "", "}", "").Replace(uri) + g.text()
			}
			_, err := cs.ReadResource(ctx, &sdk.ReadResourceParams{URI: u})
			served("read "+u, err)
		}
	}
	if prompts, err := cs.ListPrompts(ctx, nil); err == nil {
		for _, p := range prompts.Prompts {
			for range 10 {
				args := map[string]string{}
				for _, a := range p.Arguments {
					if g.r.IntN(3) > 0 {
						args[a.Name] = g.text()
					}
				}
				_, err := cs.GetPrompt(ctx, &sdk.GetPromptParams{Name: p.Name, Arguments: args})
				served("prompt "+p.Name, err)
			}
		}
	}

	t.Logf("MCP: %d tools called 15 times each, %d resources read 10 times each", len(mcpTools.Tools), len(uris))

	// HTTP: every REST route of the OpenAPI document, its body a random
	// request of its RPC in JSON (or not JSON at all), and the lesson and
	// planner routes with random JSON. No 500, no refused connection.
	routes := g.httpRoutes(t, c)
	hc := &http.Client{Timeout: 10 * time.Second, Transport: bearerTransport{c.adminToken, http.DefaultTransport}}
	for _, rt := range routes {
		for range 10 {
			method, target, body := g.httpRequest(rt)
			req, err := http.NewRequest(method, "http://"+c.httpAddr+target, strings.NewReader(body))
			if err != nil {
				continue // a path the client cannot even send
			}
			req.Header.Set("Content-Type", "application/json")
			resp, err := hc.Do(req)
			var timeout interface{ Timeout() bool }
			if errors.As(err, &timeout) && timeout.Timeout() {
				continue // slow is not broken: the daemons' checks at the end tell
			}
			if err != nil {
				t.Fatalf("%s %s: %v", method, target, err)
			}
			answer, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
			resp.Body.Close()
			if resp.StatusCode >= 500 && resp.StatusCode != http.StatusServiceUnavailable && resp.StatusCode != http.StatusNotImplemented {
				t.Fatalf("%s %s %.2000s: %s %s", method, target, body, resp.Status, answer)
			}
		}
	}
	t.Logf("HTTP: %d routes, 10 requests each", len(routes))

	// At once: four clients, each its own stream of random calls to both
	// daemons (a close racing an open, an execute, a preview), no order.
	live := c.negotiate(t) // a session to race over, the first one closed by now
	var wg sync.WaitGroup
	for k := range 4 {
		h := *g
		h.r = rand.New(rand.NewPCG(seed+uint64(k)+1, seed>>2))
		h.primary = append(slices.Clone(g.primary), live.GetSessionId(), live.GetSessionId())
		h.byField = maps.Clone(g.byField)
		h.byField["session_id"] = []string{live.GetSessionId(), s.GetSessionId()}
		wg.Go(func() {
			for range 150 {
				conn, svc := cp, cpv1.File_blendplane_controlplane_v1_controlplane_proto.Services().ByName("ControlPlaneService")
				if h.r.IntN(2) == 0 {
					conn, svc = agent, agentv1.File_blendplane_agent_v1_agent_proto.Services().ByName("AgentService")
				}
				md := svc.Methods().Get(h.r.IntN(svc.Methods().Len()))
				msgs, req := h.wire(md)
				code, err := h.call(c, conn, md, msgs)
				if err == nil && broken(code) {
					j, _ := protojson.Marshal(req)
					err = fmt.Errorf("finished %s for %.2000s", code, j)
				}
				if err != nil {
					t.Errorf("client %d: %s: %v", k, md.FullName(), err)
					return
				}
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}

	// Both daemons still serve: a new session runs a plan.
	c.run(t, c.negotiate(t).GetSessionId(), "random-after", op("a", "object.create", map[string]any{"type": "cube"}))
	// Paths from requests stayed in their sandboxes: nothing new beside the
	// daemons (their working directory), in agentd's HOME or at the canary.
	if after := entries(t, repoRoot()); !slices.Equal(after, before) {
		t.Errorf("the repository's top level was %v, is %v", before, after)
	}
	filepath.WalkDir(home, func(path string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			t.Errorf("written under agentd's HOME: %s", path)
		}
		return nil
	})
	if _, err := os.Lstat(filepath.Dir(canary)); err == nil {
		t.Errorf("written: %s", canary)
	}
	// Nor did one remove anything outside its session: both daemons' stores
	// are still in their data directories (a session id ".." once named
	// agentd's own, and its close removed it).
	for _, f := range []string{filepath.Join(c.dir, "agent", "agentd.db"), filepath.Join(c.dir, "cp", "controlplane.db")} {
		if _, err := os.Stat(f); err != nil {
			t.Errorf("removed: %v", err)
		}
	}
}

// entries lists the names in a directory.
func entries(t *testing.T, dir string) []string {
	t.Helper()
	list, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range list {
		names = append(names, e.Name())
	}
	return names
}

// broken says whether a call's status is one no request may get: a bug's
// (INTERNAL, UNKNOWN, DATA_LOSS) or a daemon out of reach (UNAVAILABLE
// without the structured reason the control plane gives an agent it cannot
// reach, NO_AGENT_AVAILABLE or AGENT_UNAVAILABLE).
func broken(st *status.Status) bool {
	switch st.Code() {
	case codes.Internal, codes.Unknown, codes.DataLoss:
		return true
	case codes.Unavailable:
		for _, d := range st.Details() {
			if info, ok := d.(*errdetails.ErrorInfo); ok && info.GetReason() != "" {
				return false
			}
		}
		return true
	}
	return false
}

// closing orders the RPCs that close a session after the others.
func closing(md protoreflect.MethodDescriptor) int {
	if md.Name() == "CloseSession" {
		return 1
	}
	return 0
}

// randomValues fills messages: most fields with values that pass the
// schema (ids of this cluster, hashes, small numbers, a tool's kind of
// args), so that requests reach the handlers, and some with values chosen
// to break things.
type randomValues struct {
	r       *rand.Rand
	oddRate int                 // a value is odd with chance 1 in oddRate (0: none), drawn per request
	primary []string            // the ids most requests name: the live session, its plan and runtime
	byField map[string][]string // the ids a field of that name names most often
	known   []string            // ids and names this cluster holds
	tools   []string            // the registry's tool names
	hashes  []string            // hashes of this cluster (the session's scene)
	canary  string              // a path outside every sandbox
}

// odd says whether the next value is one chosen to break things.
func (g *randomValues) odd() bool { return g.oddRate > 0 && g.r.IntN(g.oddRate) == 0 }

// request is a random request of md's input type.
func (g *randomValues) request(md protoreflect.MethodDescriptor) *dynamicpb.Message {
	g.oddRate = []int{0, 0, 30, 6, 2}[g.r.IntN(5)]
	req := dynamicpb.NewMessage(md.Input())
	g.fill(req, 0)
	return req
}

// wire is what one call sends: a request's messages (more than one only
// to a client stream), encoded, some of them then broken (cut short, bytes
// changed, garbage after). All of it is drawn before the call, so that a
// seed replays the same calls whatever the servers answer.
func (g *randomValues) wire(md protoreflect.MethodDescriptor) (msgs [][]byte, first proto.Message) {
	n := 1
	if md.IsStreamingClient() {
		n += g.r.IntN(3) // a header, then chunks (the part oneofs of uploads), or whatever comes
	}
	for range n {
		req := g.request(md)
		if first == nil {
			first = req
		}
		raw, err := proto.Marshal(req)
		if err != nil {
			raw = nil // not encodable (a string that is not UTF-8): an empty message instead
		}
		if g.r.IntN(10) == 0 && len(raw) > 0 {
			switch g.r.IntN(3) {
			case 0:
				raw = raw[:g.r.IntN(len(raw))]
			case 1:
				for range 1 + g.r.IntN(4) {
					raw[g.r.IntN(len(raw))] = byte(g.r.Uint32())
				}
			default:
				raw = append(raw, 0x0a, 0xff, 0xff, 0xff, 0x0f, 'x')
			}
		}
		msgs = append(msgs, raw)
	}
	return msgs, first
}

// call sends msgs (wire) to method md on conn, with the admin's token, and
// returns the status code it finished with; a server stream is read to its
// end. err is the test's own failure.
func (g *randomValues) call(c *cluster, conn *grpc.ClientConn, md protoreflect.MethodDescriptor, msgs [][]byte) (code *status.Status, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	method := "/" + string(md.Parent().FullName()) + "/" + string(md.Name())
	opts := []grpc.CallOption{grpc.PerRPCCredentials(bearer(c.adminToken)), grpc.ForceCodec(rawCodec{})}
	if !md.IsStreamingClient() && !md.IsStreamingServer() {
		var out []byte
		return status.Convert(conn.Invoke(ctx, method, msgs[0], &out, opts...)), nil
	}
	stream, err := conn.NewStream(ctx, &grpc.StreamDesc{ServerStreams: md.IsStreamingServer(), ClientStreams: md.IsStreamingClient()}, method, opts...)
	if err != nil {
		return status.Convert(err), nil
	}
	for _, m := range msgs {
		if err := stream.SendMsg(m); err != nil {
			break // the server ended the call: RecvMsg tells how
		}
	}
	if err := stream.CloseSend(); err != nil {
		return nil, err
	}
	for {
		var out []byte
		err := stream.RecvMsg(&out)
		if errors.Is(err, io.EOF) {
			return status.New(codes.OK, ""), nil
		}
		if err != nil {
			return status.Convert(err), nil
		}
		if !md.IsStreamingServer() {
			return status.New(codes.OK, ""), nil
		}
	}
}

// fill sets fields of m (most of them, or a few), recursing into messages
// to depth 6. Unless odd, a value keeps its field's schema rules
// (buf.validate): required fields set, patterns and lengths held, lists
// as long as they must be.
func (g *randomValues) fill(m protoreflect.Message, depth int) {
	fields := m.Descriptor().Fields()
	skip := []int{5, 2, 1}[g.r.IntN(3)] // a field the schema lets go is left out with chance 1 in skip (1: never)
	for i := range fields.Len() {
		fd := fields.Get(i)
		rules := rulesOf(fd)
		str := rules.GetString()
		needed := rules.GetRequired() || rules.GetRepeated().GetMinItems() > 0 || slices.Contains(rules.GetEnum().GetNotIn(), 0) ||
			((str.GetMinLen() > 0 || str.GetPattern() != "") && rules.GetIgnore() != validate.Ignore_IGNORE_IF_ZERO_VALUE)
		if (fd.Message() != nil && depth >= 6) || (!(needed && !g.odd()) && skip > 1 && g.r.IntN(skip) == 0) {
			continue
		}
		if o := fd.ContainingOneof(); o != nil && !o.IsSynthetic() && m.WhichOneof(o) != nil && g.r.IntN(2) == 0 {
			continue // keep the part set first
		}
		switch {
		case fd.IsList():
			l := m.Mutable(fd).List()
			n := []int{0, 1, 1, 2, 3}[g.r.IntN(5)]
			if !g.odd() {
				n = max(n, int(rules.GetRepeated().GetMinItems()))
			}
			for range n {
				if fd.Message() != nil {
					v := l.NewElement()
					g.fill(v.Message(), depth+1)
					l.Append(v)
				} else {
					l.Append(g.scalar(fd, rules.GetRepeated().GetItems()))
				}
			}
		case fd.IsMap():
			mp := m.Mutable(fd).Map()
			for range g.r.IntN(3) {
				k := g.scalar(fd.MapKey(), rules.GetMap().GetKeys()).MapKey()
				if fd.MapValue().Message() != nil {
					v := mp.NewValue()
					g.fill(v.Message(), depth+1)
					mp.Set(k, v)
				} else {
					mp.Set(k, g.scalar(fd.MapValue(), rules.GetMap().GetValues()))
				}
			}
		case fd.Message() != nil && fd.Message().FullName() == "google.protobuf.Struct" && !g.odd():
			v := m.NewField(fd)
			raw, err := proto.Marshal(g.args())
			if err == nil && proto.Unmarshal(raw, v.Message().Interface()) == nil {
				m.Set(fd, v)
			}
		case fd.Message() != nil:
			v := m.NewField(fd)
			g.fill(v.Message(), depth+1)
			m.Set(fd, v)
		default:
			m.Set(fd, g.scalar(fd, rules))
		}
	}
}

// rulesOf is a field's schema rules (nil: none).
func rulesOf(fd protoreflect.FieldDescriptor) *validate.FieldRules {
	r, _ := proto.GetExtension(fd.Options(), validate.E_Field).(*validate.FieldRules)
	return r
}

// args is a tool's kind of arguments: names, types, vectors, numbers.
func (g *randomValues) args() *structpb.Struct {
	keys := []string{"name", "type", "location", "rotation", "scale", "object", "new_name", "names", "active", "color", "energy",
		"frame", "data_path", "value", "resolution", "output", "format", "target", "collection", "material", "levels",
		"body", "lens", "base_color", "roughness", "parent", "samples", "frame_end", "strength", "path", "code"}
	out := map[string]any{}
	for range g.r.IntN(5) {
		out[keys[g.r.IntN(len(keys))]] = g.jsonValue(0)
	}
	st, err := structpb.NewStruct(out)
	if err != nil {
		panic(err)
	}
	return st
}

// jsonValue is an argument's value.
func (g *randomValues) jsonValue(depth int) any {
	switch g.r.IntN(8) {
	case 0:
		return []any{g.number(), g.number(), g.number()}
	case 1:
		return g.number()
	case 2:
		return g.r.IntN(2) == 0
	case 3:
		return nil
	case 4:
		if depth < 3 {
			return map[string]any{g.text(): g.jsonValue(depth + 1)}
		}
		return []any{}
	case 5:
		return []any{"cube", "plane", "point", "sun", "obj", "png", "bevel", "location"}[g.r.IntN(8)]
	}
	return g.text()
}

func (g *randomValues) number() float64 {
	if g.odd() {
		return []float64{-1, 1e308, -1e308, 1e-300, 4294967296, 0.1}[g.r.IntN(6)]
	}
	return float64(g.r.IntN(21) - 5)
}

// scalar is a value for a field that is not a message, within rules
// unless odd.
func (g *randomValues) scalar(fd protoreflect.FieldDescriptor, rules *validate.FieldRules) protoreflect.Value {
	pick := func(n int) int { return g.r.IntN(n) }
	odd := g.odd()
	// within bounds a number from 0 to 9 above the rules' floor, below their ceiling
	bounded := func(gte, lte int64) int64 { return min(gte+int64(pick(10)), lte) }
	switch fd.Kind() {
	case protoreflect.BoolKind:
		return protoreflect.ValueOfBool(pick(2) == 0)
	case protoreflect.EnumKind:
		if odd {
			return protoreflect.ValueOfEnum(protoreflect.EnumNumber([]int32{-1, 99, math.MaxInt32}[pick(3)]))
		}
		var allowed []protoreflect.EnumNumber
		values := fd.Enum().Values()
		for i := range values.Len() {
			if n := values.Get(i).Number(); !slices.Contains(rules.GetEnum().GetNotIn(), int32(n)) {
				allowed = append(allowed, n)
			}
		}
		return protoreflect.ValueOfEnum(allowed[pick(len(allowed))])
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind:
		if odd {
			return protoreflect.ValueOfInt32([]int32{-1, math.MaxInt32, math.MinInt32}[pick(3)])
		}
		r := rules.GetInt32()
		lte := int64(math.MaxInt32)
		if r.GetLessThan() != nil {
			lte = int64(max(r.GetLte(), r.GetLt()-1))
		}
		return protoreflect.ValueOfInt32(int32(bounded(int64(max(r.GetGte(), r.GetGt()+1)), lte)))
	case protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind:
		if odd {
			return protoreflect.ValueOfInt64([]int64{-1, 1 << 40, math.MaxInt64, math.MinInt64}[pick(4)])
		}
		r := rules.GetInt64()
		lte := int64(math.MaxInt64)
		if r.GetLessThan() != nil {
			lte = max(r.GetLte(), r.GetLt()-1)
		}
		return protoreflect.ValueOfInt64(bounded(max(r.GetGte(), r.GetGt()+1), lte))
	case protoreflect.Uint32Kind, protoreflect.Fixed32Kind:
		return protoreflect.ValueOfUint32([]uint32{0, 1, 7, 1000, math.MaxUint32}[pick(5)])
	case protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		return protoreflect.ValueOfUint64([]uint64{0, 1, 7, 1 << 40, math.MaxUint64}[pick(5)])
	case protoreflect.FloatKind:
		return protoreflect.ValueOfFloat32([]float32{0, -1, 0.5, 2, math.MaxFloat32, float32(math.Inf(1)), float32(math.NaN())}[pick(7)])
	case protoreflect.DoubleKind:
		return protoreflect.ValueOfFloat64([]float64{0, -1, 0.5, 3, 1e308, -1e308, math.Inf(-1), math.NaN()}[pick(8)])
	case protoreflect.BytesKind:
		b := make([]byte, []int{0, 1, 64, 70000}[pick(4)])
		for i := range b {
			b[i] = byte(g.r.Uint32())
		}
		return protoreflect.ValueOfBytes(b)
	}
	if odd {
		return protoreflect.ValueOfString(g.text())
	}
	return protoreflect.ValueOfString(g.within(string(fd.Name()), rules.GetString()))
}

// within is a string for the field named name that its rules accept, if
// one of this cluster's ids, names, hashes and tools does (a tool's name
// first for a field of tools), or a made-up one.
func (g *randomValues) within(name string, r *validate.StringRules) string {
	if in := r.GetIn(); len(in) > 0 {
		return in[g.r.IntN(len(in))]
	}
	made := hex.EncodeToString(binary.LittleEndian.AppendUint64(make([]byte, 24), g.r.Uint64())) // a hash nobody has
	candidates := slices.Concat(g.known, g.hashes, []string{made, strings.ToLower(g.known[g.r.IntN(len(g.known))])})
	if strings.Contains(name, "tool") {
		candidates = g.tools
	}
	pattern, err := regexp.Compile(r.GetPattern())
	if err != nil {
		panic(err)
	}
	fitting := func(c string) bool {
		n := uint64(utf8.RuneCountInString(c))
		return pattern.MatchString(c) && n >= r.GetMinLen() && (r.GetMaxLen() == 0 || n <= r.GetMaxLen())
	}
	if ids := g.byField[name]; len(ids) > 0 && g.r.IntN(4) > 0 {
		if c := ids[g.r.IntN(len(ids))]; fitting(c) {
			return c
		}
	}
	if g.r.IntN(2) == 0 {
		if c := g.primary[g.r.IntN(len(g.primary))]; fitting(c) {
			return c
		}
	}
	var fits []string
	for _, c := range candidates {
		if fitting(c) {
			fits = append(fits, c)
		}
	}
	if len(fits) == 0 {
		return candidates[g.r.IntN(len(candidates))]
	}
	return fits[g.r.IntN(len(fits))]
}

// text is a string that has broken a parser somewhere.
func (g *randomValues) text() string {
	switch g.r.IntN(4) {
	case 0:
		return g.known[g.r.IntN(len(g.known))]
	case 1:
		var b strings.Builder
		for range 1 + g.r.IntN(20) {
			b.WriteByte(byte(' ' + g.r.IntN(95)))
		}
		return b.String()
	}
	odd := []string{"", " ", "a", ".", "..", "../../../../etc/passwd", "/etc/passwd", g.canary, "../../../../../../.." + g.canary, "~/x", "C:\\Windows\\x",
		"a/../../b", "\x00", "a\x00b", "é漢字🙂", "\u202eevil", "%s%n%x", "${HOME}", "$(id)", "`id`", "{\"a\":1}", "null", "-1", "1e400",
		"NaN", "*", "?", "object.", ".create", strings.Repeat("x", 5000), strings.Repeat("é", 300), "P00001", "Known.001",
		"2026-11-29T00:00:00Z", "sha256:", strings.Repeat("0", 64), "http://127.0.0.1:9/", "file:///etc/passwd"}
	return odd[g.r.IntN(len(odd))]
}

// httpRoute is a route of the control plane's HTTP server: method and path
// (with {parameters}), and for a REST route the RPC whose request is its
// body.
type httpRoute struct {
	method, path string
	rpc          protoreflect.MethodDescriptor
}

// httpRoutes lists the REST routes from the served OpenAPI document (its
// operation ids name the RPCs), then the lesson and planner routes.
func (g *randomValues) httpRoutes(t *testing.T, c *cluster) []httpRoute {
	t.Helper()
	resp, err := http.Get("http://" + c.httpAddr + "/openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var doc struct {
		Paths map[string]map[string]struct {
			OperationID string `json:"operationId"`
		} `json:"paths"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&doc); err != nil {
		t.Fatal(err)
	}
	methods := cpv1.File_blendplane_controlplane_v1_controlplane_proto.Services().ByName("ControlPlaneService").Methods()
	var routes []httpRoute
	for path, ops := range doc.Paths {
		for method, op := range ops {
			_, name, _ := strings.Cut(op.OperationID, "_") // ControlPlaneService_SubmitPlan
			md := methods.ByName(protoreflect.Name(name))
			if md == nil {
				t.Fatalf("%s %s: operation %q names no RPC", method, path, op.OperationID)
			}
			routes = append(routes, httpRoute{strings.ToUpper(method), path, md})
		}
	}
	if len(routes) < 20 {
		t.Fatalf("the OpenAPI document lists %d routes", len(routes))
	}
	planner := plannerv1.File_blendplane_planner_v1_planner_proto.Services().ByName("PlannerService").Methods()
	for r, rpc := range map[string]protoreflect.MethodDescriptor{"POST /lesson": nil, "POST /run_operator": nil, "POST /scene_summary": nil,
		"GET /audit": nil, "POST /api/agent/run": planner.ByName("Run"), "POST /api/agent/run/stream": planner.ByName("StreamRun"),
		"GET /api/agent/approvals/pending": nil, "POST /api/agent/approvals/resolve": planner.ByName("ResolveApproval"),
		"GET /api/agent/runs/{runId}": nil, "GET /api/agent/threads/{threadId}": nil, "GET /api/agent/audit": nil} {
		method, path, _ := strings.Cut(r, " ")
		routes = append(routes, httpRoute{method, path, rpc})
	}
	slices.SortFunc(routes, func(a, b httpRoute) int { return strings.Compare(a.method+a.path, b.method+b.path) })
	return routes
}

// httpRequest is a random request on a route: its path parameters ids of
// this cluster or odd strings, a query of page or filter parameters, and
// a body.
func (g *randomValues) httpRequest(rt httpRoute) (method, target, body string) {
	path := regexp.MustCompile(`\{[^}]*\}`).ReplaceAllStringFunc(rt.path, func(param string) string {
		name := strings.Trim(param, "{}")
		if i := strings.IndexByte(name, '='); i >= 0 {
			name = name[:i] // {name=sessions/*}
		}
		if g.odd() || g.r.IntN(8) == 0 {
			return url.PathEscape(g.text())
		}
		return url.PathEscape(g.within(name, nil))
	})
	q := url.Values{}
	for _, k := range []string{"page_size", "page_token", "state", "request_id", "session_id", "limit"} {
		if g.r.IntN(4) == 0 {
			q.Set(k, g.text())
		}
	}
	if len(q) > 0 {
		path += "?" + q.Encode()
	}
	switch {
	case rt.method == http.MethodGet:
	case g.r.IntN(8) == 0:
		body = []string{"", "{", "[]", "null", "\"x\"", "{\"a\":", strings.Repeat("[", 10000)}[g.r.IntN(7)]
	case rt.rpc != nil:
		raw, err := protojson.Marshal(g.request(rt.rpc))
		if err != nil {
			raw = []byte("{}") // NaN and infinities: not JSON
		}
		body = string(raw)
	default: // the lesson API's: a pack, an operator, a detail level
		var v any
		switch rt.path {
		case "/lesson":
			commands := []string{"ADD_CUBE", "DELETE_OBJECT", "SELECT_OBJECT", "RUN_OPERATOR", "SPEAK", "WAIT", "UI_HIGHLIGHT", g.text()}
			var steps []any
			for range 1 + g.r.IntN(3) {
				steps = append(steps, map[string]any{"command": commands[g.r.IntN(len(commands))], "params": g.args().AsMap()})
			}
			v = map[string]any{"lesson": steps, "metadata": map[string]any{"id": g.within("id", nil), "source": g.text(),
				"issued_at": []float64{float64(time.Now().Unix()), g.number()}[g.r.IntN(2)]}}
		case "/run_operator":
			operators := []string{"mesh.primitive_cube_add", "mesh.primitive_plane_add", "object.delete", "wm.quit_blender", g.text()}
			v = map[string]any{"operator": operators[g.r.IntN(len(operators))], "params": g.args().AsMap()}
		default:
			v = map[string]any{"detail_level": []string{"full", "standard", g.text()}[g.r.IntN(3)]}
		}
		raw, _ := json.Marshal(v)
		body = string(raw)
	}
	return rt.method, path, body
}

// TestBroken: what TestRandomRequests takes for a bug or a daemon gone, and
// what for a structured answer.
func TestBroken(t *testing.T) {
	structured, err := status.New(codes.Unavailable, "no agent").WithDetails(&errdetails.ErrorInfo{Reason: "NO_AGENT_AVAILABLE"})
	if err != nil {
		t.Fatal(err)
	}
	for st, want := range map[*status.Status]bool{
		status.New(codes.Internal, "boom"):                  true,
		status.New(codes.Unknown, "?"):                      true,
		status.New(codes.DataLoss, "lost"):                  true,
		status.New(codes.Unavailable, "connection refused"): true,
		structured: false,
		status.New(codes.InvalidArgument, "SCHEMA_INVALID"): false,
		status.New(codes.ResourceExhausted, "no slot"):      false,
		status.New(codes.OK, ""):                            false,
	} {
		if got := broken(st); got != want {
			t.Errorf("broken(%v) = %v, want %v", st, got, want)
		}
	}
}
