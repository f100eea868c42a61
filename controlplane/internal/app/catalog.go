package app

import (
	"context"
	"errors"
	"fmt"
	"time"

	"google.golang.org/protobuf/types/known/structpb"

	"github.com/blendplane/blendplane/controlplane/internal/store"
	cpv1 "github.com/blendplane/blendplane/gen/blendplane/controlplane/v1"
)

// ErrRuntimeNotFound: no registered agent offers that runtime.
var ErrRuntimeNotFound = errors.New("runtime not found")

// Tools returns the tool registry of one of the caller's sessions, or of a
// runtime (runtimeID empty: the first ready one).
func (a *App) Tools(ctx context.Context, who Principal, sessionID, runtimeID string) (*cpv1.ToolRegistry, error) {
	if sessionID != "" {
		sess, err := a.session(who, sessionID)
		if err != nil {
			return nil, err
		}
		return a.store.Registry(sess.RegistryFingerprint())
	}
	for _, rt := range a.fleet.Runtimes() {
		if runtimeID == "" || rt.GetRuntimeId() == runtimeID {
			return rt.GetRegistry(), nil
		}
	}
	return nil, fmt.Errorf("%w: no ready agent has runtime %q", ErrRuntimeNotFound, runtimeID)
}

// Macros returns the macro registry.
func (a *App) Macros(ctx context.Context) (*cpv1.ListMacrosResponse, error) {
	resp := &cpv1.ListMacrosResponse{RegistryRef: a.macroRef()}
	for _, m := range a.macros.List() {
		schema, err := structpb.NewStruct(m.Schema)
		if err != nil {
			return nil, err
		}
		example, err := structpb.NewStruct(m.Example)
		if err != nil {
			return nil, err
		}
		resp.Macros = append(resp.Macros, &cpv1.MacroDefinition{
			Name: m.Name, Version: m.Version, Description: m.Description,
			InputSchema: schema, ExampleArgs: example, Tools: m.Tools, Fingerprint: m.Fingerprint(),
		})
	}
	return resp, nil
}

// Agents lists the registered agents with their state.
func (a *App) Agents(ctx context.Context) []*cpv1.Agent { return a.fleet.List() }

// RegisterAgent records an agent's registration or heartbeat and answers
// with the fleet's settings. New tool registries are compiled now, in the
// background, not on the first plan that needs them.
func (a *App) RegisterAgent(ctx context.Context, req *cpv1.RegisterAgentRequest) *cpv1.RegisterAgentResponse {
	a.fleet.Register(req)
	for _, rt := range req.GetRuntimes() {
		// Compiled once per fingerprint; errors are logged there.
		go a.registries.get(rt.GetRegistry().GetFingerprint(), known(rt.GetRegistry()))
	}
	return &cpv1.RegisterAgentResponse{
		HeartbeatIntervalSeconds: int32(a.fleet.Heartbeat() / time.Second),
		SessionIdleTimeoutMs:     a.cfg.SessionIdleTimeout.Milliseconds(),
	}
}

// AuditRecords pages through the caller's audit records (AIP-158), of one
// plan or of all of them.
func (a *App) AuditRecords(ctx context.Context, who Principal, requestID string, size int32, token string) ([]*cpv1.AuditRecord, string, error) {
	after, err := decodePageToken(token, "audit", requestID)
	if err != nil {
		return nil, "", badPageToken(err)
	}
	records, next, err := a.store.AuditRecords(store.AuditFilter{Owner: who.Name, RequestID: requestID}, after, pageSize(size))
	if err != nil {
		return nil, "", err
	}
	return records, encodePageToken("audit", next, requestID), nil
}
