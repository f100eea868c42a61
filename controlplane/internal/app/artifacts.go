package app

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/blendplane/blendplane/controlplane/internal/auth"
	"github.com/blendplane/blendplane/controlplane/internal/blob"
	"github.com/blendplane/blendplane/controlplane/internal/plan"
	"github.com/blendplane/blendplane/controlplane/internal/store"
	agentv1 "github.com/blendplane/blendplane/gen/blendplane/agent/v1"
	cpv1 "github.com/blendplane/blendplane/gen/blendplane/controlplane/v1"
	"github.com/blendplane/blendplane/internal/filename"
)

// chunkSize is the size of the chunks artifacts travel in: well under the
// smallest message limit a control plane takes (1 MiB).
const chunkSize = 512 << 10

// Upload stores a file in one of the caller's sessions: the content, read
// chunk by chunk from next until io.EOF (never whole in memory), goes to
// the blob directory, then into the session's sandbox on its agent, where
// plans name it by its plain name. It is refused, with nothing stored, when
// the name is not a plain file name (POLICY_REFUSED), the content is over
// the contract's max_artifact_bytes (CONTRACT_VIOLATION) or would take the
// session's files over its temp_storage_mib (QUOTA_EXCEEDED: the agent
// counts them) or the session owner's artifacts over its quota
// (QUOTA_EXCEEDED), or it differs from the size or SHA-256 the header
// declares.
func (a *App) Upload(ctx context.Context, who Principal, h *cpv1.ArtifactUpload, next func() ([]byte, error)) (*cpv1.Artifact, error) {
	sess, err := a.session(who, h.GetSessionId())
	if err != nil {
		return nil, err
	}
	if sess.Closed() {
		return nil, fmt.Errorf("%w: session %s was closed", store.ErrSessionClosed, h.GetSessionId())
	}
	if sess.Broken() {
		return nil, fmt.Errorf("%w: session %s lost its agent and could not be rebuilt exactly elsewhere", store.ErrSessionBroken, h.GetSessionId())
	}
	if err := checkArtifactName("header.name", h.GetName()); err != nil {
		return nil, err
	}
	limit := sess.Info.GetContract().GetLimits().GetMaxArtifactBytes()
	if limit <= 0 {
		limit = a.cfg.MaxArtifactBytes
	}
	if h.GetSizeBytes() > limit {
		return nil, tooLarge(h.GetSizeBytes(), limit)
	}
	if room := sess.Info.GetContract().GetConstraints().GetTempStorageMib() << 20; room > 0 && h.GetSizeBytes() > room {
		return nil, fmt.Errorf("%w: %s (%d bytes) is over the session's temp_storage_mib of %d MiB", ErrQuotaExceeded,
			h.GetName(), h.GetSizeBytes(), room>>20)
	}
	agentID, err := a.uploadTarget(ctx, h.GetSessionId())
	if err != nil {
		return nil, err
	}
	// The room under the owner's quota is taken as the content comes (all
	// at once when the header declares its size), given back once the
	// artifact is recorded or refused; none for a version of the name the
	// session holds already, which counts nothing new (its header must say
	// its SHA-256), unless only its agent had it: kept now, it counts.
	again := false
	if h.GetSha256() != "" {
		held, err := a.store.Artifact(h.GetSessionId(), h.GetName(), h.GetSha256())
		again = err == nil && !held.GetLeftOnAgent()
	}
	var reserved int64
	defer func() { a.unreserve(sess.Owner, reserved) }()
	take := func(n int64) error {
		if n <= reserved || again {
			return nil
		}
		ok, err := a.reserve(sess.Owner, n-reserved)
		if err != nil {
			return err
		}
		if !ok {
			why := fmt.Sprintf("%s, %d bytes so far", h.GetName(), n)
			if n == h.GetSizeBytes() && reserved == 0 {
				why = fmt.Sprintf("%s, %d bytes declared", h.GetName(), n)
			}
			if h.GetSha256() == "" {
				why += " (a version of it the session holds counts nothing when the header gives its sha256)"
			}
			return fmt.Errorf("upload of %s: %w", why, a.overQuota(sess.Owner, n-reserved))
		}
		reserved = n
		return nil
	}
	if err := take(h.GetSizeBytes()); err != nil {
		return nil, err
	}
	w, err := a.blobs.Create(limit)
	if err != nil {
		return nil, err
	}
	defer w.Abort()
	for {
		chunk, err := next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, err
		}
		n := w.Size() + int64(len(chunk))
		if _, err := w.Write(chunk); errors.Is(err, blob.ErrTooLarge) {
			return nil, tooLarge(n, limit)
		} else if err != nil {
			return nil, err
		}
		if err := take(n); err != nil {
			return nil, err
		}
	}
	size := w.Size()
	if h.GetSizeBytes() > 0 && size != h.GetSizeBytes() {
		return nil, fmt.Errorf("%w: received %d bytes, the header said %d", ErrChecksumMismatch, size, h.GetSizeBytes())
	}
	if sum := w.Sum(); h.GetSha256() != "" && h.GetSha256() != sum { // before the blob is kept
		return nil, fmt.Errorf("%w: the content's sha256 is %s, the header said %s", ErrChecksumMismatch, sum, h.GetSha256())
	}
	art := &cpv1.Artifact{SessionId: h.GetSessionId(), Name: h.GetName(), SizeBytes: size, Sha256: w.Sum()}
	// The agent takes the file (or refuses it: no room in the session's
	// disk, a directory of that name) before the control plane keeps it,
	// so a refused upload leaves nothing here either.
	content, err := w.Content()
	if err != nil {
		return nil, err
	}
	err = a.push(ctx, agentID, art, content)
	content.Close()
	if err != nil {
		return nil, err
	}
	sum, err := w.Commit()
	if err != nil {
		return nil, err
	}
	stored, err := a.store.PutArtifact(art)
	if err != nil {
		return nil, err
	}
	a.log.Info("artifact uploaded", "session_id", art.GetSessionId(), "name", art.GetName(), "bytes", size, "sha256", sum)
	return stored, nil
}

// uploadTarget is the agent an upload goes to: on a session's new agent,
// once the session is rebuilt there (the rebuild gives its replay the
// files as they were; an upload meanwhile could be read by it).
func (a *App) uploadTarget(ctx context.Context, sessionID string) (string, error) {
	agentID, _, err := a.placement(ctx, sessionID)
	switch status.Code(err) {
	case codes.OK:
		return agentID, nil
	case codes.Unavailable:
		return "", fmt.Errorf("%w: %s", ErrAgentUnavailable, status.Convert(err).Message())
	case codes.FailedPrecondition:
		if p, perr := a.store.Placement(sessionID); perr == nil && p.Closed() {
			return "", fmt.Errorf("%w: %s", store.ErrSessionClosed, status.Convert(err).Message())
		}
		return "", fmt.Errorf("%w: %s", store.ErrSessionBroken, status.Convert(err).Message())
	}
	return "", err
}

// push copies an artifact's content f into a session's sandbox on its
// agent, and sets art's create time to when the sandbox took it (the
// agent's answer; an older agent's says nothing).
func (a *App) push(ctx context.Context, agentID string, art *cpv1.Artifact, f *os.File) error {
	agent, err := a.fleet.Client(agentID)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrAgentUnavailable, err)
	}
	stream, err := agent.PutFile(ctx)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrAgentUnavailable, err)
	}
	header := &agentv1.FileHeader{SessionId: art.GetSessionId(), Name: art.GetName(), SizeBytes: art.GetSizeBytes(), Sha256: art.GetSha256()}
	err = stream.Send(&agentv1.PutFileRequest{Part: &agentv1.PutFileRequest_Header{Header: header}})
	if err == nil {
		err = sendChunks(f, func(chunk []byte) error {
			return stream.Send(&agentv1.PutFileRequest{Part: &agentv1.PutFileRequest_Chunk{Chunk: chunk}})
		})
	}
	resp, cerr := stream.CloseAndRecv()
	if errors.Is(err, errReadLocal) {
		return err // the agent refuses the part it got; the fault is here
	}
	if err != nil || cerr != nil {
		err = cmp.Or(cerr, err) // the agent's refusal says more than a failed send
		switch status.Code(err) {
		case codes.FailedPrecondition:
			return fmt.Errorf("%w: %s: %s", ErrArtifactConflict, art.GetName(), status.Convert(err).Message())
		case codes.ResourceExhausted:
			if refusal(err) == agentv1.FileRefusal_FILE_REFUSAL_DISK_FLOOR.String() {
				return fmt.Errorf("%w: %w: %s", ErrQuotaExceeded, errAgentDiskShort, status.Convert(err).Message())
			}
			return fmt.Errorf("%w: %s", ErrQuotaExceeded, status.Convert(err).Message())
		}
		return fmt.Errorf("%w: put %s: %w", ErrAgentUnavailable, art.GetName(), err)
	}
	// When the agent's sandbox took it, which orders it among the files
	// the session's calls wrote under its name (an upload waits for a
	// running call that writes its name); an older agent says nothing.
	art.CreateTime = cmp.Or(resp.GetLandTime(), timestamppb.Now())
	return nil
}

// errAgentDiskShort: an agent refused a file for its own free disk (its
// --min-free-disk-mib), not for the session's ceiling: the host is short.
var errAgentDiskShort = errors.New("the agent's disk is short")

// refusal is the ErrorInfo reason of an agent's refusal, or "".
func refusal(err error) string {
	for _, d := range status.Convert(err).Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok {
			return info.GetReason()
		}
	}
	return ""
}

// Download sends an artifact of one of the caller's sessions (the newest
// version of name, or the one with sha256): its description, then its
// content in chunks. Content the control plane does not hold yet is
// fetched from the session's agent first, or, while the session owner's
// artifacts are over its quota, relayed from the agent and not kept.
// downloadSession is the session a caller downloads name from: with the
// plans scope, its own (any, for an admin); with the approve scope, any
// session's render of an approval's preview, which approvers are shown
// (they see every approval), and nothing else of it.
func (a *App) downloadSession(who Principal, sessionID, name string) (store.Session, error) {
	if who.Has(auth.ScopePlans) {
		sess, err := a.session(who, sessionID)
		if err == nil || !who.Has(auth.ScopeApprove) {
			return sess, err
		}
	} else if !who.Has(auth.ScopeApprove) {
		return store.Session{}, &ScopeError{Scope: auth.ScopePlans, Action: "downloading an artifact"}
	}
	if id, ok := strings.CutPrefix(name, "preview-"); ok {
		ap, err := a.store.Approval(strings.TrimSuffix(id, ".png"))
		if err == nil && ap.GetSessionId() == sessionID && ap.GetPreview().GetRender().GetName() == name {
			return a.store.Session(sessionID)
		}
	}
	return store.Session{}, fmt.Errorf("session %q: %w", sessionID, store.ErrSessionNotFound)
}

func (a *App) Download(ctx context.Context, who Principal, sessionID, name, sha256 string, send func(*cpv1.DownloadArtifactResponse) error) error {
	sess, err := a.downloadSession(who, sessionID, name)
	if err != nil {
		return err
	}
	art, err := a.store.Artifact(sessionID, name, sha256)
	if err != nil {
		return err
	}
	f, err := a.blobs.Open(art.GetSha256())
	if errors.Is(err, blob.ErrNotFound) && !sess.Closed() {
		agent, cerr := a.fleet.Client(sess.Info.GetAgentId())
		if cerr != nil {
			return fmt.Errorf("%w: the control plane does not hold %s (sha256 %s) and cannot reach the session's agent: %w",
				ErrAgentUnavailable, name, art.GetSha256(), cerr)
		}
		// Left on the agent: kept if it fits under the owner's quota (its
		// bytes count from then on), else relayed. Counted already (a
		// record from before schema 12 that was never fetched): kept.
		if art.GetLeftOnAgent() {
			ok, qerr := a.reserve(sess.Owner, art.GetSizeBytes())
			if qerr != nil {
				return qerr
			}
			if !ok {
				return a.relay(ctx, agent, art, send)
			}
			defer a.unreserve(sess.Owner, art.GetSizeBytes()) // counted by then, if kept
		}
		ferr := a.fetch(ctx, agent, art)
		if ferr == nil && art.GetLeftOnAgent() {
			if ferr = a.store.Keep(sessionID, art.GetName(), art.GetSha256()); ferr == nil {
				art.LeftOnAgent = false
			}
		}
		if errors.Is(ferr, blob.ErrDiskShort) {
			return ferr // the agent has it, the control plane has no room to keep it
		} else if unreachable(ferr) && ctx.Err() == nil { // not the caller's own deadline
			return fmt.Errorf("%w: the control plane does not hold %s (sha256 %s) and the session's agent does not answer: %w",
				ErrAgentUnavailable, name, art.GetSha256(), ferr)
		} else if ferr != nil {
			a.log.Warn("fetching an artifact from its agent", "session_id", sessionID, "name", name, "err", ferr)
		}
		f, err = a.blobs.Open(art.GetSha256())
	} else if err == nil && art.GetLeftOnAgent() { // kept since, for another artifact
		if err := a.store.Keep(sessionID, art.GetName(), art.GetSha256()); err != nil {
			f.Close()
			return err
		}
		art.LeftOnAgent = false
	}
	if errors.Is(err, blob.ErrNotFound) {
		return fmt.Errorf("%w: the control plane did not keep %s (sha256 %s): its agent overwrote or removed it first, or it came "+
			"while the session owner's artifacts were over its quota or the control plane's disk was short, and it is not on the agent now",
			ErrArtifactUnavailable, name, art.GetSha256())
	}
	if err != nil {
		return err
	}
	defer f.Close()
	if err := send(&cpv1.DownloadArtifactResponse{Part: &cpv1.DownloadArtifactResponse_Artifact{Artifact: art}}); err != nil {
		return err
	}
	return sendChunks(f, func(chunk []byte) error {
		return send(&cpv1.DownloadArtifactResponse{Part: &cpv1.DownloadArtifactResponse_Chunk{Chunk: chunk}})
	})
}

// relay sends an artifact straight from the session's agent, keeping none
// of it.
func (a *App) relay(ctx context.Context, agent agentv1.AgentServiceClient, art *cpv1.Artifact, send func(*cpv1.DownloadArtifactResponse) error) error {
	stream, err := getFile(ctx, agent, art)
	if unreachable(err) && ctx.Err() == nil { // not the caller's own deadline
		return fmt.Errorf("%w: the control plane did not keep %s (it would take the session owner's artifacts over its quota) and the session's agent does not answer: %w",
			ErrAgentUnavailable, art.GetName(), err)
	}
	if err != nil {
		return fmt.Errorf("%w: the control plane did not keep %s (it would take the session owner's artifacts over its quota) and cannot take it from its agent: %w",
			ErrArtifactUnavailable, art.GetName(), err)
	}
	if err := send(&cpv1.DownloadArtifactResponse{Part: &cpv1.DownloadArtifactResponse_Artifact{Artifact: art}}); err != nil {
		return err
	}
	for {
		resp, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		if err := send(&cpv1.DownloadArtifactResponse{Part: &cpv1.DownloadArtifactResponse_Chunk{Chunk: resp.GetChunk()}}); err != nil {
			return err
		}
	}
}

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
			return fmt.Errorf("%w: %w", errReadLocal, err)
		}
	}
}

// errReadLocal: sendChunks could not read the control plane's own copy.
var errReadLocal = errors.New("reading the control plane's copy")

// Artifacts lists the artifacts of one of the caller's sessions (of one
// plan if requestID is set), oldest first, a page at a time.
func (a *App) Artifacts(ctx context.Context, who Principal, sessionID, requestID string, size int32, token string) ([]*cpv1.Artifact, string, error) {
	if _, err := a.session(who, sessionID); err != nil {
		return nil, "", err
	}
	query := sessionID + "/" + requestID
	after, err := decodePageToken(token, "artifacts", query)
	if err != nil {
		return nil, "", badPageToken(err)
	}
	list, next, err := a.store.ListArtifacts(sessionID, requestID, after, pageSize(size))
	if err != nil {
		return nil, "", err
	}
	return list, encodePageToken("artifacts", next, query), nil
}

// collect keeps the files a receipt names (the executor calls it before the
// receipt is committed): their content is fetched from the agent into the
// blob directory unless it is there already, and each is recorded as an
// artifact of the session. A file that cannot be fetched, or that would
// take the session owner's artifacts over its quota, is still recorded
// (Download fetches or relays it later, or says it is gone).
func (a *App) collect(ctx context.Context, agent agentv1.AgentServiceClient, ref store.PlanRef, sessionID string, r *cpv1.Receipt) error {
	if len(r.GetArtifacts()) == 0 {
		return nil
	}
	defer a.takeBack(receiptKey(ref, r.GetOperationId())) // recorded by then
	owner, err := a.store.SessionOwner(sessionID)
	if err != nil {
		return err
	}
	var errs []error
	var over, overBytes int64
	for _, f := range r.GetArtifacts() {
		art := &cpv1.Artifact{SessionId: sessionID, Name: f.GetName(), SizeBytes: f.GetSizeBytes(), Sha256: f.GetSha256(),
			RequestId: ref.RequestID, OperationId: r.GetOperationId(), ReceiptSequence: r.GetSequence(), CreateTime: r.GetCompleteTime()}
		var reserved int64
		held := a.blobs.Has(art.GetSha256())
		if !held {
			ok, err := a.reserve(owner, art.GetSizeBytes())
			if ok {
				reserved = art.GetSizeBytes() // given back below, fetched or not
			}
			switch {
			case err != nil:
				errs = append(errs, err)
			case !ok:
				over, overBytes = over+1, overBytes+art.GetSizeBytes()
			case agent == nil:
				errs = append(errs, fmt.Errorf("%w: %s left on it", ErrAgentUnavailable, art.GetName()))
			default:
				if err := a.fetch(ctx, agent, art); err != nil {
					errs = append(errs, err)
				} else {
					held = true
				}
			}
		}
		// The receipt says so too: its client knows to download the file
		// while the session lives.
		art.LeftOnAgent, f.LeftOnAgent = !held, !held
		if _, err := a.store.PutArtifact(art); err != nil {
			errs = append(errs, err)
		}
		a.unreserve(owner, reserved)
	}
	if over > 0 {
		errs = append(errs, fmt.Errorf("%d files left on the agent: %w", over, a.overQuota(owner, overBytes)))
	}
	return errors.Join(errs...)
}

// fetch copies an artifact's content from the session's agent into the
// blob directory, if the agent's file still has that content.
func (a *App) fetch(ctx context.Context, agent agentv1.AgentServiceClient, art *cpv1.Artifact) error {
	stream, err := getFile(ctx, agent, art)
	if err != nil {
		return err
	}
	return a.receiveBlob(art.GetName(), art.GetSizeBytes(), art.GetSha256(), func() ([]byte, error) {
		resp, err := stream.Recv()
		return resp.GetChunk(), err
	})
}

// unreachable says an agent call failed for want of an answer (the agent
// down or too slow), not because the agent said no: worth a retry.
func unreachable(err error) bool {
	switch status.Code(err) {
	case codes.Unavailable, codes.DeadlineExceeded:
		return true
	}
	return false
}

// getFile opens an artifact's file on the session's agent, its header read:
// an error unless the agent's file still has the artifact's content.
func getFile(ctx context.Context, agent agentv1.AgentServiceClient, art *cpv1.Artifact) (grpc.ServerStreamingClient[agentv1.GetFileResponse], error) {
	stream, err := agent.GetFile(ctx, &agentv1.GetFileRequest{SessionId: art.GetSessionId(), Name: art.GetName(), Sha256: art.GetSha256()})
	if err != nil {
		return nil, err
	}
	first, err := stream.Recv()
	if err != nil {
		return nil, fmt.Errorf("get %s: %w", art.GetName(), err)
	}
	if h := first.GetHeader(); h.GetSha256() != art.GetSha256() {
		return nil, fmt.Errorf("%s changed on the agent (sha256 %s, the receipt said %s)", art.GetName(), h.GetSha256(), art.GetSha256())
	}
	return stream, nil
}

// receiveBlob stores the chunks next returns (until io.EOF) as a blob of
// size bytes that must hash to want.
func (a *App) receiveBlob(what string, size int64, want string, next func() ([]byte, error)) error {
	w, err := a.blobs.Create(size)
	if err != nil {
		return err
	}
	defer w.Abort()
	for {
		chunk, err := next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return fmt.Errorf("get %s: %w", what, err)
		}
		if _, err := w.Write(chunk); err != nil {
			return err
		}
	}
	sum, err := w.Commit()
	if err != nil {
		return err
	}
	if sum != want {
		return fmt.Errorf("%s arrived with sha256 %s, want %s", what, sum, want)
	}
	return nil
}

// checkArtifactName refuses names that are not plain file names of the
// sandbox, as the plan checker refuses such tool args.
func checkArtifactName(field, name string) error {
	if why := filename.Problem(name); why != "" {
		return &plan.Error{Reason: plan.ReasonPolicyRefused,
			Message:    fmt.Sprintf("%q is not a plain file name in the session's sandbox: %s", name, why),
			Violations: []plan.Violation{{Field: field, Description: why}}}
	}
	return nil
}

func tooLarge(size, limit int64) error {
	return &plan.Error{Reason: plan.ReasonContractViolation,
		Message:    fmt.Sprintf("the file is %d bytes or more; the session's contract allows %d (max_artifact_bytes)", size, limit),
		Violations: []plan.Violation{{Field: "header.size_bytes", Description: fmt.Sprintf("at most %d bytes", limit)}}}
}
