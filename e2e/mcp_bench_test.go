package e2e

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	cpv1 "github.com/blendplane/blendplane/gen/blendplane/controlplane/v1"
)

// BenchmarkMCPToolCall measures what the MCP front door adds to a tool call:
// 200 object.create and 200 scene.get_summary calls through MCP over
// streamable HTTP with the official Go SDK's client, once on the newest,
// sessionless revision (2026-07-28, served in the SDK's stateless mode:
// "mcp") and once on the last revision with MCP sessions (2025-11-25:
// "mcpsess"), each interleaved with the same one-operation plan over gRPC
// (SubmitPlan until its receipt arrives on StreamReceipts) on the same
// cluster, after 20 untimed ones of each.
//
// Metrics (milliseconds): p50, p90 and p99 of {create,summary}-{mcp,mcpsess,grpc},
// {create,summary}-added-p50 (MCP p50 minus gRPC p50; target ≤ 0.5) and
// {create,summary}-sess-added-p50 (the same with MCP sessions).
func BenchmarkMCPToolCall(b *testing.B) {
	c := startCluster(b)
	ctx := context.Background()
	// Two MCP clients: the newest, sessionless revision (the SDK's stateless
	// mode) and the last one with MCP sessions.
	clients := map[string]*sdk.ClientSession{"-mcp": connectMCP(b, c, "bench", "2026-07-28"), "-mcpsess": connectMCP(b, c, "bench", "2025-11-25")}
	defer clients["-mcp"].Close()
	defer clients["-mcpsess"].Close()
	kinds := []struct {
		name string
		args func(j int) map[string]any
		tool string
	}{
		{"create", func(j int) map[string]any {
			return map[string]any{"type": "cube", "name": fmt.Sprintf("M%05d", j), "location": cubeLocation(j)}
		}, "object.create"},
		{"summary", func(int) map[string]any { return map[string]any{} }, "scene.get_summary"},
	}
	times := map[string][]time.Duration{}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		session := c.negotiate(b).GetSessionId()
		b.StartTimer()
		for _, k := range kinds {
			for j := -oneOpWarmup; j < oneOpPlans; j++ {
				n := i*1000 + j + oneOpWarmup
				mcpTimes := map[string]time.Duration{}
				for _, via := range []string{"-mcp", "-mcpsess"} {
					args := k.args(n)
					if k.name == "create" {
						args["name"] = fmt.Sprintf("M%s%05d", via[1:], n)
					}
					start := time.Now()
					res, err := clients[via].CallTool(ctx, &sdk.CallToolParams{Name: k.tool, Arguments: args})
					mcpTimes[via] = time.Since(start)
					if err != nil || res.IsError {
						b.Fatalf("MCP %s: %v %v", k.tool, res, err)
					}
				}
				args := k.args(n)
				if k.name == "create" {
					args["name"] = fmt.Sprintf("G%05d", n)
				}
				grpcTime, _ := runPlan(b, c, session, fmt.Sprintf("mcpbench-%s-%d-%d", k.name, i, j), []*cpv1.Operation{op("call", k.tool, args)})
				if j >= 0 {
					for via, d := range mcpTimes {
						times[k.name+via] = append(times[k.name+via], d)
					}
					times[k.name+"-grpc"] = append(times[k.name+"-grpc"], grpcTime)
				}
			}
		}
	}
	b.StopTimer()
	for _, k := range kinds {
		for _, via := range []string{"-mcp", "-mcpsess", "-grpc"} {
			for _, p := range []int{50, 90, 99} {
				b.ReportMetric(percentile(times[k.name+via], p), fmt.Sprintf("%s%s-p%d-ms", k.name, via, p))
			}
		}
		b.ReportMetric(percentile(times[k.name+"-mcp"], 50)-percentile(times[k.name+"-grpc"], 50), k.name+"-added-p50-ms")
		b.ReportMetric(percentile(times[k.name+"-mcpsess"], 50)-percentile(times[k.name+"-grpc"], 50), k.name+"-sess-added-p50-ms")
	}
}

// bearerTransport sends a bearer token with every request.
type bearerTransport struct {
	token string
	next  http.RoundTripper
}

func (t bearerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+t.token)
	return t.next.RoundTrip(r)
}
