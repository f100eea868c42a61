package service

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/tap"

	"github.com/blendplane/blendplane/controlplane/internal/app"
	"github.com/blendplane/blendplane/controlplane/internal/auth"
	cpv1 "github.com/blendplane/blendplane/gen/blendplane/controlplane/v1"
	plannerv1 "github.com/blendplane/blendplane/gen/blendplane/planner/v1"
)

// anyScope: any authenticated principal may call the method.
const anyScope = ""

// plansOrApprove: a principal with either scope (an approver sees every
// approval; the application layer narrows what others see to their own).
const plansOrApprove = auth.ScopePlans + "|" + auth.ScopeApprove

// methodScopes is the scope each ControlPlaneService method needs. A method
// missing here is refused: new RPCs must say who may call them.
var methodScopes = map[string]string{
	cpv1.ControlPlaneService_Negotiate_FullMethodName:        auth.ScopePlans,
	cpv1.ControlPlaneService_SubmitPlan_FullMethodName:       auth.ScopePlans,
	cpv1.ControlPlaneService_StreamReceipts_FullMethodName:   auth.ScopePlans,
	cpv1.ControlPlaneService_GetPlan_FullMethodName:          auth.ScopePlans,
	cpv1.ControlPlaneService_CancelPlan_FullMethodName:       auth.ScopePlans,
	cpv1.ControlPlaneService_ListTools_FullMethodName:        auth.ScopePlans,
	cpv1.ControlPlaneService_ListMacros_FullMethodName:       auth.ScopePlans,
	cpv1.ControlPlaneService_ListAuditRecords_FullMethodName: auth.ScopePlans,
	cpv1.ControlPlaneService_GetSession_FullMethodName:       auth.ScopePlans,
	cpv1.ControlPlaneService_ListSessions_FullMethodName:     auth.ScopePlans,
	cpv1.ControlPlaneService_CloseSession_FullMethodName:     auth.ScopePlans,
	cpv1.ControlPlaneService_UploadArtifact_FullMethodName:   auth.ScopePlans,
	cpv1.ControlPlaneService_DownloadArtifact_FullMethodName: plansOrApprove, // approvers: previews' renders only
	cpv1.ControlPlaneService_ListArtifacts_FullMethodName:    auth.ScopePlans,
	cpv1.ControlPlaneService_ListAgents_FullMethodName:       auth.ScopeAdmin,
	cpv1.ControlPlaneService_CreateToken_FullMethodName:      auth.ScopeAdmin,
	cpv1.ControlPlaneService_ListTokens_FullMethodName:       auth.ScopeAdmin,
	cpv1.ControlPlaneService_RevokeToken_FullMethodName:      auth.ScopeAdmin,
	cpv1.ControlPlaneService_RegisterAgent_FullMethodName:    auth.ScopeAgent,
	cpv1.ControlPlaneService_ListApprovals_FullMethodName:    plansOrApprove,
	cpv1.ControlPlaneService_ResolveApproval_FullMethodName:  auth.ScopeApprove,
	cpv1.ControlPlaneService_ListPolicyRules_FullMethodName:  auth.ScopeApprove,
	cpv1.ControlPlaneService_DeletePolicyRule_FullMethodName: auth.ScopeApprove,
	cpv1.ControlPlaneService_ListPlans_FullMethodName:        auth.ScopePlans,
	cpv1.ControlPlaneService_GetCaller_FullMethodName:        anyScope,

	plannerv1.PlannerService_Run_FullMethodName:                  auth.ScopePlans,
	plannerv1.PlannerService_StreamRun_FullMethodName:            auth.ScopePlans,
	plannerv1.PlannerService_GetRun_FullMethodName:               auth.ScopePlans,
	plannerv1.PlannerService_GetThread_FullMethodName:            auth.ScopePlans,
	plannerv1.PlannerService_ListPendingApprovals_FullMethodName: auth.ScopePlans,
	plannerv1.PlannerService_ResolveApproval_FullMethodName:      auth.ScopeApprove,
	plannerv1.PlannerService_ListActionAudit_FullMethodName:      auth.ScopePlans,
}

// CallerName is the name of the principal an authenticated call runs as
// (the planner's owner of threads and runs).
func CallerName(ctx context.Context) string { return caller(ctx).Name }

// Authentication finds the principal of every ControlPlaneService and
// PlannerService call from its bearer token and refuses calls outside its
// scopes, before anything else looks at the request. Health and reflection
// stay open. With Off (--allow-insecure-local, loopback only) every call is
// app.Anonymous.
type Authentication struct {
	App *app.App
	Off bool
	// openOnce makes open, the slots of the calls without a token in
	// flight (openAtOnce).
	openOnce sync.Once
	open     chan struct{}
	// OnBehalfOf, when set, names the metadata that carries the principal
	// instead of a token: only for the in-process server that the planner
	// alone can reach, which acts for the principals it authenticated.
	OnBehalfOf string
}

type principalKey struct{}

// caller is the principal the Authentication interceptor found.
func caller(ctx context.Context) app.Principal {
	who, _ := ctx.Value(principalKey{}).(app.Principal)
	return who
}

func (au *Authentication) authenticate(ctx context.Context, method string) (context.Context, error) {
	if !strings.HasPrefix(method, "/"+cpv1.ControlPlaneService_ServiceDesc.ServiceName+"/") &&
		!strings.HasPrefix(method, "/"+plannerv1.PlannerService_ServiceDesc.ServiceName+"/") {
		return au.openCall(ctx) // grpc.health.v1, reflection
	}
	scope, ok := methodScopes[method]
	if !ok {
		return nil, toStatus(&app.ScopeError{Scope: auth.ScopeAdmin, Action: method + " (a method without a declared scope)"})
	}
	if au.Off {
		return context.WithValue(ctx, principalKey{}, app.Anonymous), nil
	}
	md, _ := metadata.FromIncomingContext(ctx)
	var who app.Principal
	if au.OnBehalfOf != "" {
		names := md.Get(au.OnBehalfOf)
		if len(names) != 1 {
			return nil, toStatus(unauthenticated(fmt.Errorf("no %s", au.OnBehalfOf)))
		}
		var err error
		if who, err = au.App.Principal(ctx, names[0]); err != nil {
			return nil, toStatus(err)
		}
	} else {
		secret, err := auth.ParseBearer(md.Get("authorization"))
		if err != nil {
			return nil, toStatus(unauthenticated(err))
		}
		if who, err = au.App.Authenticate(ctx, secret); err != nil {
			return nil, toStatus(err)
		}
	}
	if scope != anyScope {
		if !slices.ContainsFunc(strings.Split(scope, "|"), who.Has) {
			return nil, toStatus(&app.ScopeError{Scope: strings.ReplaceAll(scope, "|", " or "), Action: method})
		}
	}
	return context.WithValue(ctx, principalKey{}, who), nil
}

// Tap authenticates a call as soon as its headers arrive
// (grpc.InTapHandle), before its request is read: a caller without a valid
// token cannot make the server buffer a message (up to twice the message
// limit per stream). The interceptors then find the principal in the
// call's context.
func (au *Authentication) Tap(ctx context.Context, info *tap.Info) (context.Context, error) {
	return au.authenticate(ctx, info.FullMethodName)
}

// openAtOnce bounds the calls without a token (health, reflection) in
// flight: each may hold a goroutine for as long as its caller keeps it open
// (a Watch, a reflection stream) and a message of up to twice the message
// limit. Unbounded, a caller without a token made the control plane hold
// 100,000 Watch streams (1 GB), or 800 MB of six large health checks.
const openAtOnce = 32

type openKey struct{}

// openCall takes one of the openAtOnce slots for a call without a token,
// given back when the call ends; RESOURCE_EXHAUSTED when none is free.
func (au *Authentication) openCall(ctx context.Context) (context.Context, error) {
	if ctx.Value(openKey{}) != nil {
		return ctx, nil // Tap took its slot
	}
	au.openOnce.Do(func() { au.open = make(chan struct{}, openAtOnce) })
	select {
	case au.open <- struct{}{}:
	default:
		return nil, status.Errorf(codes.ResourceExhausted, "%d calls without a token (health, reflection) are in flight already; retry later", openAtOnce)
	}
	context.AfterFunc(ctx, func() { <-au.open })
	return context.WithValue(ctx, openKey{}, true), nil
}

// once authenticates a call that Tap did not (a server without it).
func (au *Authentication) once(ctx context.Context, method string) (context.Context, error) {
	if _, done := ctx.Value(principalKey{}).(app.Principal); done {
		return ctx, nil
	}
	return au.authenticate(ctx, method)
}

// Unary is the unary server interceptor.
func (au *Authentication) Unary() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		ctx, err := au.once(ctx, info.FullMethod)
		if err != nil {
			return nil, err
		}
		return handler(ctx, req)
	}
}

// Stream is the stream server interceptor.
func (au *Authentication) Stream() grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		ctx, err := au.once(ss.Context(), info.FullMethod)
		if err != nil {
			return err
		}
		return handler(srv, &principalStream{ServerStream: ss, ctx: ctx})
	}
}

type principalStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s *principalStream) Context() context.Context { return s.ctx }
