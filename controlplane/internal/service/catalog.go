package service

import (
	"context"
	"fmt"

	"google.golang.org/protobuf/types/known/structpb"

	"github.com/blendplane/blendplane/controlplane/internal/macro"
	"github.com/blendplane/blendplane/controlplane/internal/store"
	cpv1 "github.com/blendplane/blendplane/gen/blendplane/controlplane/v1"
)

// ListTools lists a session's tool registry, or a runtime's.
func (s *Server) ListTools(ctx context.Context, req *cpv1.ListToolsRequest) (*cpv1.ListToolsResponse, error) {
	var reg *cpv1.ToolRegistry
	switch {
	case req.GetSessionId() != "":
		sess, err := s.store.Session(req.GetSessionId())
		if err != nil {
			return nil, toStatus(err)
		}
		reg = sess.Registry
	default:
		for _, rt := range s.fleet.Runtimes() {
			if req.GetRuntimeId() == "" || rt.GetRuntimeId() == req.GetRuntimeId() {
				reg = rt.GetRegistry()
				break
			}
		}
		if reg == nil {
			return nil, toStatus(fmt.Errorf("%w: no ready agent has runtime %q", store.ErrRuntimeNotFound, req.GetRuntimeId()))
		}
	}
	return &cpv1.ListToolsResponse{
		RegistryRef: &cpv1.ToolRegistryRef{Version: reg.GetVersion(), Fingerprint: reg.GetFingerprint()},
		Tools:       reg.GetTools(),
	}, nil
}

// ListMacros lists the macro registry.
func (s *Server) ListMacros(ctx context.Context, req *cpv1.ListMacrosRequest) (*cpv1.ListMacrosResponse, error) {
	resp := &cpv1.ListMacrosResponse{RegistryRef: s.macroRef()}
	for _, m := range s.macros.List() {
		schema, err := structpb.NewStruct(m.Schema)
		if err != nil {
			return nil, toStatus(err)
		}
		example, err := structpb.NewStruct(m.Example)
		if err != nil {
			return nil, toStatus(err)
		}
		resp.Macros = append(resp.Macros, &cpv1.MacroDefinition{
			Name: m.Name, Version: m.Version, Description: m.Description,
			InputSchema: schema, ExampleArgs: example, Tools: m.Tools, Fingerprint: m.Fingerprint(),
		})
	}
	return resp, nil
}

func (s *Server) macroRef() *cpv1.MacroRegistryRef {
	return &cpv1.MacroRegistryRef{Version: macro.Version, Fingerprint: s.macros.Fingerprint()}
}

// CancelPlan stops a plan; a plan already terminal is returned as it is.
func (s *Server) CancelPlan(ctx context.Context, req *cpv1.CancelPlanRequest) (*cpv1.CancelPlanResponse, error) {
	if _, err := s.store.PlanState(req.GetRequestId()); err != nil {
		return nil, toStatus(err)
	}
	if err := s.exec.Cancel(ctx, req.GetRequestId()); err != nil {
		return nil, toStatus(err)
	}
	p, err := s.store.Plan(req.GetRequestId())
	if err != nil {
		return nil, toStatus(err)
	}
	s.log.Info("plan cancelled", "request_id", req.GetRequestId(), "state", p.GetState().String())
	return &cpv1.CancelPlanResponse{Plan: p}, nil
}
