package service

import (
	"context"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/blendplane/blendplane/controlplane/internal/app"
	cpv1 "github.com/blendplane/blendplane/gen/blendplane/controlplane/v1"
	plannerv1 "github.com/blendplane/blendplane/gen/blendplane/planner/v1"
)

// TestEveryMethodHasAScope: a new RPC must say who may call it, or it is
// refused to everyone (tested below).
func TestEveryMethodHasAScope(t *testing.T) {
	var names []string
	for _, desc := range []grpc.ServiceDesc{cpv1.ControlPlaneService_ServiceDesc, plannerv1.PlannerService_ServiceDesc} {
		for _, m := range desc.Methods {
			names = append(names, "/"+desc.ServiceName+"/"+m.MethodName)
		}
		for _, s := range desc.Streams {
			names = append(names, "/"+desc.ServiceName+"/"+s.StreamName)
		}
	}
	for _, n := range names {
		if _, ok := methodScopes[n]; !ok {
			t.Errorf("%s has no scope in methodScopes", n)
		}
	}
	if len(methodScopes) != len(names) {
		t.Errorf("methodScopes has %d entries for %d methods", len(methodScopes), len(names))
	}
}

// TestAuthenticateBeforeAnything: health and reflection pass untouched;
// a ControlPlaneService call without a token, or to a method without a
// scope, is refused before its handler; with authentication off every
// call is Anonymous.
func TestAuthenticateBeforeAnything(t *testing.T) {
	au := &Authentication{}
	ctx := metadata.NewIncomingContext(context.Background(), metadata.MD{})
	if _, err := au.authenticate(ctx, "/grpc.health.v1.Health/Check"); err != nil {
		t.Fatalf("health: %v", err)
	}
	if _, err := au.authenticate(ctx, cpv1.ControlPlaneService_ListSessions_FullMethodName); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("no token: %v", err)
	}
	if _, err := au.authenticate(ctx, "/"+cpv1.ControlPlaneService_ServiceDesc.ServiceName+"/Undeclared"); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("a method without a scope: %v", err)
	}
	off := &Authentication{Off: true}
	got, err := off.authenticate(ctx, cpv1.ControlPlaneService_CreateToken_FullMethodName)
	if err != nil || caller(got).Name != app.Anonymous.Name {
		t.Fatalf("authentication off: %v %v", caller(got), err)
	}
}
