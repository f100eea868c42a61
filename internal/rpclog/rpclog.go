// Package rpclog is how both daemons log the gRPC calls they serve: one
// line per finished call ("finished call", its method, code and error), at
// debug level when it succeeded and at warn level when it did not.
package rpclog

import (
	"context"
	"log/slog"

	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/logging"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
)

// Interceptors log each call as it finishes. Put them first in the chain:
// they then log the code the others (a recovered panic, a refusal) answer.
func Interceptors(log *slog.Logger) (grpc.UnaryServerInterceptor, grpc.StreamServerInterceptor) {
	logger := logging.LoggerFunc(func(ctx context.Context, lvl logging.Level, msg string, fields ...any) {
		log.Log(ctx, slog.Level(lvl), msg, fields...)
	})
	opts := []logging.Option{logging.WithLogOnEvents(logging.FinishCall), logging.WithLevels(level)}
	return logging.UnaryServerInterceptor(logger, opts...), logging.StreamServerInterceptor(logger, opts...)
}

// level logs successful calls at debug level, failures at warn.
func level(code codes.Code) logging.Level {
	if code == codes.OK {
		return logging.LevelDebug
	}
	return logging.LevelWarn
}
