// Package service is agentd's gRPC face: AgentService, converting wire types
// to the sessions package and mapping its errors to gRPC codes.
package service

import (
	"context"
	"errors"
	"io"
	"os"
	"sync"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/blendplane/blendplane/agentd/internal/blender"
	"github.com/blendplane/blendplane/agentd/internal/journal"
	"github.com/blendplane/blendplane/agentd/internal/metrics"
	"github.com/blendplane/blendplane/agentd/internal/sessions"
	agentv1 "github.com/blendplane/blendplane/gen/blendplane/agent/v1"
	cpv1 "github.com/blendplane/blendplane/gen/blendplane/controlplane/v1"
)

// chunkSize is the size of the chunks files travel in.
const chunkSize = 512 << 10

// Server implements AgentService.
type Server struct {
	agentv1.UnimplementedAgentServiceServer
	agentID   string
	hostname  string
	sessions  *sessions.Manager
	resources func() *cpv1.Resources
	metrics   *metrics.Metrics // nil: none
}

var _ agentv1.AgentServiceServer = (*Server)(nil)

// New returns the service.
func New(agentID, hostname string, m *sessions.Manager, resources func() *cpv1.Resources, mx *metrics.Metrics) *Server {
	return &Server{agentID: agentID, hostname: hostname, sessions: m, resources: resources, metrics: mx}
}

// Describe returns the agent's identity, runtimes and sessions.
func (s *Server) Describe(ctx context.Context, _ *agentv1.DescribeRequest) (*agentv1.DescribeResponse, error) {
	st := s.sessions.Status()
	return &agentv1.DescribeResponse{
		AgentId: s.agentID, Hostname: s.hostname,
		Runtimes: s.sessions.Runtimes(), SessionCount: int32(st.Sessions), Resources: s.resources(),
		MaxSessions: int32(st.MaxLive), LiveSessions: st.Live,
	}, nil
}

// OpenSession records a new session; its Blender starts with its first batch.
func (s *Server) OpenSession(ctx context.Context, req *agentv1.OpenSessionRequest) (*agentv1.OpenSessionResponse, error) {
	prof, hash, err := s.sessions.Open(ctx, req.GetSessionId(), req.GetRuntimeId(),
		blender.Limits{MemoryMiB: req.GetMaxMemoryMib(), StorageMiB: req.GetTempStorageMib()}, req.GetEpoch())
	if err != nil {
		return nil, toStatus(err)
	}
	return &agentv1.OpenSessionResponse{BlenderProfile: prof, BaselineSceneHash: hash}, nil
}

// Execute runs a batch of operations and streams their receipts, and the
// progress of long operations in between.
func (s *Server) Execute(req *agentv1.ExecuteRequest, stream grpc.ServerStreamingServer[agentv1.ExecuteResponse]) error {
	args, err := operationArgs(req.GetOperations())
	if err != nil {
		return err
	}
	ops := make([]sessions.Operation, len(req.GetOperations()))
	for i, o := range req.GetOperations() {
		ops[i] = sessions.Operation{
			OperationID: o.GetOperationId(), MCPCallID: o.GetMcpCallId(), Tool: o.GetToolName(),
			Args: args[i], Safety: o.GetSafetyLevel(), IdempotencyKey: o.GetIdempotencyKey(),
			Budget: time.Duration(o.GetTimeBudgetMs()) * time.Millisecond,
			Verify: o.GetVerify(),
		}
	}
	if err := s.sessions.Fence(req.GetSessionId(), req.GetEpoch()); err != nil {
		return toStatus(err)
	}
	// Receipts come from the journal's committer goroutine, progress from
	// the running call: one stream, so sends take turns.
	var mu sync.Mutex
	send := func(resp *agentv1.ExecuteResponse) error {
		mu.Lock()
		defer mu.Unlock()
		return stream.Send(resp)
	}
	err = s.sessions.Execute(stream.Context(), req.GetSessionId(), req.GetRequestId(), ops,
		func(r *cpv1.Receipt) error {
			r.SessionEpoch = req.GetEpoch()
			r.AgentSentTime = timestamppb.Now() // the journal has committed it
			s.metrics.Receipt(r)
			return send(&agentv1.ExecuteResponse{Event: &agentv1.ExecuteResponse_Receipt{Receipt: r}})
		},
		func(p *cpv1.Progress) {
			send(&agentv1.ExecuteResponse{Event: &agentv1.ExecuteResponse_Progress{Progress: p}}) // best effort
		})
	return toStatus(err)
}

// Preview dry-runs operations on a throwaway fork of a session.
func (s *Server) Preview(ctx context.Context, req *agentv1.PreviewRequest) (*agentv1.PreviewResponse, error) {
	args, err := operationArgs(req.GetOperations())
	if err != nil {
		return nil, err
	}
	ops := make([]sessions.Operation, len(req.GetOperations()))
	for i, o := range req.GetOperations() {
		ops[i] = sessions.Operation{OperationID: o.GetOperationId(), Tool: o.GetToolName(), Args: args[i]}
	}
	res, err := s.sessions.Preview(ctx, req.GetSessionId(), ops, req.GetRender())
	if err != nil {
		return nil, toStatus(err)
	}
	return &agentv1.PreviewResponse{SceneHashBefore: res.SceneHashBefore, SceneHashAfter: res.SceneHashAfter,
		Changes: res.Changes, FailedOperationId: res.FailedOperation, Failure: res.Failure, RenderPng: res.PNG}, nil
}

// Rollback undoes committed operations and streams ROLLED_BACK receipts.
func (s *Server) Rollback(req *agentv1.RollbackRequest, stream grpc.ServerStreamingServer[agentv1.RollbackResponse]) error {
	if err := s.sessions.Fence(req.GetSessionId(), req.GetEpoch()); err != nil {
		return toStatus(err)
	}
	err := s.sessions.Rollback(stream.Context(), req.GetSessionId(), req.GetRequestId(), req.GetIdempotencyKeys(), func(r *cpv1.Receipt) error {
		r.SessionEpoch = req.GetEpoch()
		r.AgentSentTime = timestamppb.Now()
		return stream.Send(&agentv1.RollbackResponse{Receipt: r})
	})
	return toStatus(err)
}

// Cancel interrupts a plan's running batch.
func (s *Server) Cancel(ctx context.Context, req *agentv1.CancelRequest) (*agentv1.CancelResponse, error) {
	interrupted, err := s.sessions.Cancel(req.GetSessionId(), req.GetRequestId())
	if err != nil {
		return nil, toStatus(err)
	}
	return &agentv1.CancelResponse{Interrupted: interrupted}, nil
}

// CloseSession stops a session's Blender and removes its files.
func (s *Server) CloseSession(ctx context.Context, req *agentv1.CloseSessionRequest) (*agentv1.CloseSessionResponse, error) {
	if err := s.sessions.Close(req.GetSessionId()); err != nil {
		return nil, toStatus(err)
	}
	return &agentv1.CloseSessionResponse{}, nil
}

// PutFile writes a file into a session's sandbox: a header, then chunks.
func (s *Server) PutFile(stream grpc.ClientStreamingServer[agentv1.PutFileRequest, agentv1.PutFileResponse]) error {
	first, err := stream.Recv()
	if err != nil {
		return err
	}
	h := first.GetHeader()
	if h == nil {
		return status.Error(codes.InvalidArgument, "the first message of PutFile must be its header")
	}
	landed, err := s.sessions.PutFile(h.GetSessionId(), h.GetName(), h.GetSizeBytes(), h.GetSha256(), &chunkReader{next: func() ([]byte, error) {
		m, err := stream.Recv()
		if err != nil {
			return nil, err
		}
		if m.GetHeader() != nil {
			return nil, status.Error(codes.InvalidArgument, "PutFile has one header, in its first message")
		}
		return m.GetChunk(), nil
	}})
	if err != nil {
		return toStatus(err)
	}
	return stream.SendAndClose(&agentv1.PutFileResponse{LandTime: timestamppb.New(landed)})
}

// GetFile streams a file of a session's sandbox, or the version of it
// with the SHA-256 asked for (Manager.OpenFile): a header, then chunks.
func (s *Server) GetFile(req *agentv1.GetFileRequest, stream grpc.ServerStreamingServer[agentv1.GetFileResponse]) error {
	f, size, sum, err := s.sessions.OpenFile(req.GetSessionId(), req.GetName(), req.GetSha256())
	if err != nil {
		return toStatus(err)
	}
	defer f.Close()
	header := &agentv1.FileHeader{SessionId: req.GetSessionId(), Name: req.GetName(), SizeBytes: size, Sha256: sum}
	if err := stream.Send(&agentv1.GetFileResponse{Part: &agentv1.GetFileResponse_Header{Header: header}}); err != nil {
		return err
	}
	return sendChunks(f, func(chunk []byte) error {
		return stream.Send(&agentv1.GetFileResponse{Part: &agentv1.GetFileResponse_Chunk{Chunk: chunk}})
	})
}

// GetCheckpoint streams a session's newest checkpoint: a header, then chunks.
func (s *Server) GetCheckpoint(req *agentv1.GetCheckpointRequest, stream grpc.ServerStreamingServer[agentv1.GetCheckpointResponse]) error {
	f, hash, size, sum, err := s.sessions.OpenCheckpoint(req.GetSessionId())
	if err != nil {
		return toStatus(err)
	}
	defer f.Close()
	header := &agentv1.CheckpointHeader{SessionId: req.GetSessionId(), SceneHash: hash, SizeBytes: size, Sha256: sum}
	if err := stream.Send(&agentv1.GetCheckpointResponse{Part: &agentv1.GetCheckpointResponse_Header{Header: header}}); err != nil {
		return err
	}
	return sendChunks(f, func(chunk []byte) error {
		return stream.Send(&agentv1.GetCheckpointResponse{Part: &agentv1.GetCheckpointResponse_Chunk{Chunk: chunk}})
	})
}

// PutCheckpoint gives a fresh session a checkpoint to start from.
func (s *Server) PutCheckpoint(stream grpc.ClientStreamingServer[agentv1.PutCheckpointRequest, agentv1.PutCheckpointResponse]) error {
	first, err := stream.Recv()
	if err != nil {
		return err
	}
	h := first.GetHeader()
	if h == nil {
		return status.Error(codes.InvalidArgument, "the first message of PutCheckpoint must be its header")
	}
	if err := s.sessions.Fence(h.GetSessionId(), h.GetEpoch()); err != nil {
		return toStatus(err)
	}
	err = s.sessions.PutCheckpoint(h.GetSessionId(), h.GetSceneHash(), h.GetSizeBytes(), h.GetSha256(), &chunkReader{next: func() ([]byte, error) {
		m, err := stream.Recv()
		if err != nil {
			return nil, err
		}
		if m.GetHeader() != nil {
			return nil, status.Error(codes.InvalidArgument, "PutCheckpoint has one header, in its first message")
		}
		return m.GetChunk(), nil
	}})
	if err != nil {
		return toStatus(err)
	}
	return stream.SendAndClose(&agentv1.PutCheckpointResponse{})
}

// sendChunks sends a file's content in chunks.
func sendChunks(f *os.File, send func([]byte) error) error {
	buf := make([]byte, chunkSize)
	for {
		n, err := f.Read(buf)
		if n > 0 {
			if err := send(buf[:n]); err != nil {
				return err
			}
		}
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return toStatus(err)
		}
	}
}

// chunkReader reads a stream of chunks as one io.Reader.
type chunkReader struct {
	next func() ([]byte, error)
	buf  []byte
}

func (r *chunkReader) Read(p []byte) (int, error) {
	for len(r.buf) == 0 {
		chunk, err := r.next()
		if err != nil {
			return 0, err
		}
		r.buf = chunk
	}
	n := copy(p, r.buf)
	r.buf = r.buf[n:]
	return n, nil
}

// toStatus maps the sessions package's errors to gRPC codes.
func toStatus(err error) error {
	switch {
	case err == nil:
		return nil
	case status.Code(err) != codes.Unknown:
		return err // already a status (a failed stream send)
	case errors.Is(err, sessions.ErrNotFound), errors.Is(err, journal.ErrSessionNotFound), errors.Is(err, sessions.ErrFileNotFound),
		errors.Is(err, sessions.ErrNoCheckpoint):
		return status.Error(codes.NotFound, err.Error())
	case errors.Is(err, sessions.ErrUnknownRuntime), errors.Is(err, sessions.ErrBadFileName), errors.Is(err, sessions.ErrFileMismatch),
		errors.Is(err, sessions.ErrBadSessionID):
		return status.Error(codes.InvalidArgument, err.Error())
	case errors.Is(err, sessions.ErrDiskFloor): // the host's shortage, which the control plane tells from the session's
		st, derr := status.New(codes.ResourceExhausted, err.Error()).WithDetails(&errdetails.ErrorInfo{
			Reason: agentv1.FileRefusal_FILE_REFUSAL_DISK_FLOOR.String(), Domain: "agent.blendplane"})
		if derr != nil {
			return status.Error(codes.ResourceExhausted, err.Error())
		}
		return st.Err()
	case errors.Is(err, sessions.ErrCapacity), errors.Is(err, blender.ErrMemoryExceeded), // a ceiling too low to start Blender
		errors.Is(err, sessions.ErrQuotaExceeded):
		return status.Error(codes.ResourceExhausted, err.Error())
	case errors.Is(err, sessions.ErrBroken), errors.Is(err, sessions.ErrFileConflict), errors.Is(err, journal.ErrStaleEpoch),
		errors.Is(err, sessions.ErrNotFresh):
		return status.Error(codes.FailedPrecondition, err.Error())
	case errors.Is(err, context.DeadlineExceeded):
		return status.Error(codes.DeadlineExceeded, err.Error())
	case errors.Is(err, context.Canceled):
		return status.Error(codes.Canceled, err.Error())
	}
	return status.Error(codes.Internal, err.Error())
}
