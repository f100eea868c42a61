// Package panicguard keeps a bug in one call from taking a daemon down with
// every session and stream it serves: a panic in a gRPC handler or an MCP
// method is logged with its stack and answered as an internal error, and
// the daemon goes on serving. (gRPC and the MCP SDK recover nothing
// themselves; net/http recovers its own handlers.)
package panicguard

import (
	"context"
	"fmt"
	"log/slog"
	"runtime/debug"

	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/recovery"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Msg is the message of the log line of a recovered panic.
const Msg = "recovered a panic"

// Recovered logs the panic p of the call named call, with the stack it
// happened on (so call it from the deferred function that recovered), and
// returns what the caller is told: a bug, logged, nothing of its detail.
func Recovered(log *slog.Logger, call string, p any) error {
	log.Error(Msg, "call", call, "panic", fmt.Sprint(p), "stack", string(debug.Stack()))
	return fmt.Errorf("internal error serving %s: a bug, logged by the server", call)
}

// Catch, deferred, turns a panic of the function that deferred it into
// *err, logged by slog's default logger (the daemon's: flagenv.Daemon sets
// it): for code that runs outside a handler, before the interceptors (a
// codec) or on a goroutine of its own (a worker).
func Catch(call string, err *error) {
	if p := recover(); p != nil {
		*err = Recovered(slog.Default(), call, p)
	}
}

// GRPC is the interceptors that recover a handler's panic as codes.Internal.
func GRPC(log *slog.Logger) (grpc.UnaryServerInterceptor, grpc.StreamServerInterceptor) {
	opt := recovery.WithRecoveryHandlerContext(func(ctx context.Context, p any) error {
		method, _ := grpc.Method(ctx)
		return status.Error(codes.Internal, Recovered(log, method, p).Error())
	})
	return recovery.UnaryServerInterceptor(opt), recovery.StreamServerInterceptor(opt)
}
