// Package sessions owns agentd's Blender runtimes and open sessions: one
// Blender process per session, one operation at a time, each receipt
// committed to the journal before it is returned.
package sessions

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/blendplane/blendplane/agentd/internal/blender"
	"github.com/blendplane/blendplane/agentd/internal/journal"
	cpv1 "github.com/blendplane/blendplane/gen/blendplane/controlplane/v1"
)

// RegistryVersion names the shape of the tool registry agentd reports.
const RegistryVersion = "tool_registry_v1"

var (
	// ErrNotFound: no open session with that id.
	ErrNotFound = errors.New("session not found")
	// ErrUnknownRuntime: no runtime with that id on this agent.
	ErrUnknownRuntime = errors.New("unknown runtime")
	// ErrBroken: the session's Blender died; the session cannot continue.
	ErrBroken = errors.New("session broken")
)

// Runtime is a probed Blender runtime: how to start it and what it offers.
type Runtime struct {
	blender.Runtime
	Info *cpv1.Runtime
}

// Probe starts each runtime once to learn its profile and tool registry.
func Probe(ctx context.Context, rts []blender.Runtime, workDir string, log *slog.Logger) ([]Runtime, error) {
	var out []Runtime
	for _, rt := range rts {
		dir, err := os.MkdirTemp(workDir, "probe-")
		if err != nil {
			return nil, err
		}
		p, err := blender.Start(ctx, rt, blender.Options{Logger: log, WorkDir: dir, SandboxDir: dir})
		if err != nil {
			return nil, fmt.Errorf("probe %s: %w", rt.Path, err)
		}
		info, err := runtimeInfo(rt, p.Profile(), p.Tools())
		p.Stop(5 * time.Second)
		os.RemoveAll(dir)
		if err != nil {
			return nil, err
		}
		log.Info("blender runtime ready", "runtime_id", info.GetRuntimeId(), "path", rt.Path,
			"tools", len(info.GetRegistry().GetTools()), "registry_fingerprint", info.GetRegistry().GetFingerprint())
		out = append(out, Runtime{Runtime: rt, Info: info})
	}
	return out, nil
}

func runtimeInfo(rt blender.Runtime, prof blender.Profile, tools []blender.Tool) (*cpv1.Runtime, error) {
	reg := &cpv1.ToolRegistry{Version: RegistryVersion}
	for _, t := range tools {
		schema, err := structpb.NewStruct(t.InputSchema)
		if err != nil {
			return nil, fmt.Errorf("tool %s schema: %w", t.Name, err)
		}
		reg.Tools = append(reg.Tools, &cpv1.ToolDefinition{
			Name: t.Name, Version: t.Version, Description: t.Description,
			InputSchema: schema, SafetyLevel: safetyLevel(t.SafetyLevel),
		})
	}
	sort.Slice(reg.Tools, func(i, j int) bool { return reg.Tools[i].GetName() < reg.Tools[j].GetName() })
	fp, err := fingerprint(tools)
	if err != nil {
		return nil, err
	}
	reg.Fingerprint = fp
	return &cpv1.Runtime{
		RuntimeId: fmt.Sprintf("blender-%s-%s", prof.Version, prof.Runtime),
		BlenderProfile: &cpv1.BlenderProfile{
			Version: prof.Version, BuildHash: prof.BuildHash, Platform: prof.Platform,
			Runtime: string(prof.Runtime), PythonVersion: prof.PythonVersion, Features: prof.Features,
		},
		Registry: reg,
	}, nil
}

// fingerprint is the SHA-256 of the registry's canonical JSON (tools sorted
// by name, object keys sorted by encoding/json).
func fingerprint(tools []blender.Tool) (string, error) {
	sorted := append([]blender.Tool(nil), tools...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].Name < sorted[j].Name })
	raw, err := json.Marshal(struct {
		Version string         `json:"version"`
		Tools   []blender.Tool `json:"tools"`
	}{RegistryVersion, sorted})
	if err != nil {
		return "", fmt.Errorf("registry fingerprint: %w", err)
	}
	sum := sha256.Sum256(raw)
	return hex.EncodeToString(sum[:]), nil
}

func safetyLevel(s string) cpv1.SafetyLevel {
	switch s {
	case "read_only":
		return cpv1.SafetyLevel_SAFETY_LEVEL_READ_ONLY
	case "safe_write":
		return cpv1.SafetyLevel_SAFETY_LEVEL_SAFE_WRITE
	case "destructive":
		return cpv1.SafetyLevel_SAFETY_LEVEL_DESTRUCTIVE
	}
	return cpv1.SafetyLevel_SAFETY_LEVEL_UNSPECIFIED
}

// Manager holds the agent's runtimes and sessions.
type Manager struct {
	runtimes map[string]Runtime
	dataDir  string
	journal  *journal.Journal
	base     *slog.Logger // for Blender processes, which name their own component
	log      *slog.Logger

	mu       sync.Mutex
	sessions map[string]*session
}

type session struct {
	id      string
	runtime Runtime
	sandbox string

	mu     sync.Mutex // one operation at a time
	proc   *blender.Process
	broken error
}

// NewManager returns a manager with no sessions.
func NewManager(rts []Runtime, dataDir string, j *journal.Journal, log *slog.Logger) *Manager {
	m := &Manager{runtimes: map[string]Runtime{}, dataDir: dataDir, journal: j, base: log,
		log: log.With("component", "sessions"), sessions: map[string]*session{}}
	for _, rt := range rts {
		m.runtimes[rt.Info.GetRuntimeId()] = rt
	}
	return m
}

// Runtimes returns the runtimes' descriptions, sorted by id.
func (m *Manager) Runtimes() []*cpv1.Runtime {
	out := make([]*cpv1.Runtime, 0, len(m.runtimes))
	for _, rt := range m.runtimes {
		out = append(out, rt.Info)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].GetRuntimeId() < out[j].GetRuntimeId() })
	return out
}

// Count returns the number of open sessions.
func (m *Manager) Count() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.sessions)
}

// Open starts a session's Blender and loads the baseline scene. Opening an
// open session returns its current state.
func (m *Manager) Open(ctx context.Context, sessionID, runtimeID string) (*cpv1.BlenderProfile, string, error) {
	rt, ok := m.runtimes[runtimeID]
	if !ok {
		return nil, "", fmt.Errorf("%w: %q", ErrUnknownRuntime, runtimeID)
	}
	m.mu.Lock()
	s, ok := m.sessions[sessionID]
	if !ok {
		s = &session{id: sessionID, runtime: rt, sandbox: filepath.Join(m.dataDir, "sessions", sessionID, "output")}
		m.sessions[sessionID] = s
	}
	m.mu.Unlock()

	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc == nil {
		if err := m.start(ctx, s); err != nil {
			m.mu.Lock()
			delete(m.sessions, sessionID)
			m.mu.Unlock()
			return nil, "", err
		}
	}
	hash, err := s.proc.SceneHash(ctx)
	if err != nil {
		return nil, "", err
	}
	return rt.Info.GetBlenderProfile(), hash, nil
}

func (m *Manager) start(ctx context.Context, s *session) error {
	work := filepath.Join(m.dataDir, "sessions", s.id, "work")
	for _, d := range []string{work, s.sandbox} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	if err := m.journal.OpenSession(s.id, s.runtime.Info.GetRuntimeId()); err != nil {
		return err
	}
	log := m.log.With("session_id", s.id)
	p, err := blender.Start(ctx, s.runtime.Runtime, blender.Options{Logger: m.base.With("session_id", s.id), WorkDir: work, SandboxDir: s.sandbox})
	if err != nil {
		return fmt.Errorf("start blender: %w", err)
	}
	if _, err := p.Reset(ctx); err != nil {
		p.Stop(5 * time.Second)
		return fmt.Errorf("load baseline scene: %w", err)
	}
	s.proc = p
	log.Info("session opened", "runtime_id", s.runtime.Info.GetRuntimeId(), "sandbox", s.sandbox)
	return nil
}

// Operation is one operation to execute, with its correlation ids.
type Operation struct {
	SessionID, RequestID, OperationID, MCPCallID string
	Tool                                         string
	Args                                         map[string]any
	Safety                                       cpv1.SafetyLevel
	IdempotencyKey                               string
}

// Execute runs one operation and returns its committed receipt. A key that
// already has a committed receipt is not run again: if the scene still is
// what that receipt left, the receipt comes back as SKIPPED_IDEMPOTENT.
func (m *Manager) Execute(ctx context.Context, op Operation) (*cpv1.Receipt, error) {
	m.mu.Lock()
	s, ok := m.sessions[op.SessionID]
	m.mu.Unlock()
	if !ok {
		return nil, fmt.Errorf("%w: %q", ErrNotFound, op.SessionID)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.broken != nil {
		return nil, fmt.Errorf("%w: %v", ErrBroken, s.broken)
	}
	log := m.log.With("session_id", op.SessionID, "request_id", op.RequestID, "operation_id", op.OperationID, "mcp_call_id", op.MCPCallID)

	if prev, err := m.journal.Receipt(op.SessionID, op.IdempotencyKey); err != nil {
		return nil, err
	} else if prev != nil {
		return m.replay(ctx, s, op, prev, log)
	}

	r := &cpv1.Receipt{
		RequestId: op.RequestID, OperationId: op.OperationID, ToolName: op.Tool,
		McpCallId: op.MCPCallID, SafetyLevel: op.Safety, IdempotencyKey: op.IdempotencyKey,
	}
	mutationID := MutationID(op.SessionID, op.IdempotencyKey)
	start := time.Now()
	out, err := s.proc.Execute(ctx, blender.Call{
		Tool: op.Tool, Args: op.Args, MutationID: mutationID,
		RequestID: op.RequestID, OperationID: op.OperationID, MCPCallID: op.MCPCallID,
	})
	r.DurationMicros = time.Since(start).Microseconds()
	r.CompleteTime = timestamppb.New(time.Now())
	var toolErr *blender.ToolError
	switch {
	case err == nil:
		r.Status = cpv1.Receipt_STATUS_SUCCEEDED
		r.SceneHashBefore, r.SceneHashAfter = out.SceneHashBefore, out.SceneHashAfter
		if out.Mutated {
			r.BlenderMutationId = mutationID
		}
		if r.Result, err = structpb.NewStruct(out.Result); err != nil {
			return nil, fmt.Errorf("tool %s result: %w", op.Tool, err)
		}
	case errors.As(err, &toolErr):
		r.Status = cpv1.Receipt_STATUS_FAILED
		r.SceneHashBefore, r.SceneHashAfter = out.SceneHashBefore, out.SceneHashAfter
		r.Error = toolFailure(op.OperationID, toolErr)
	case errors.Is(err, blender.ErrProcessExited):
		s.broken = err
		r.Status = cpv1.Receipt_STATUS_FAILED
		r.Error = &cpv1.Failure{
			ErrorCode: "BLENDER_EXITED", Recoverable: false,
			RetryHint: "open a new session; this session's Blender exited",
			Message:   err.Error(),
		}
	default:
		return nil, err
	}
	if err := m.journal.Commit(op.SessionID, r); err != nil {
		return nil, fmt.Errorf("journal commit: %w", err)
	}
	log.Debug("operation committed", "tool", op.Tool, "status", r.GetStatus().String(), "blender_mutation_id", r.GetBlenderMutationId())
	return r, nil
}

// replay answers a retried idempotency key without running the tool.
func (m *Manager) replay(ctx context.Context, s *session, op Operation, prev *cpv1.Receipt, log *slog.Logger) (*cpv1.Receipt, error) {
	if prev.GetStatus() != cpv1.Receipt_STATUS_SUCCEEDED {
		return prev, nil
	}
	hash, err := s.proc.SceneHash(ctx)
	if err != nil {
		return nil, err
	}
	r := proto.Clone(prev).(*cpv1.Receipt)
	r.McpCallId = op.MCPCallID
	if hash == prev.GetSceneHashAfter() {
		r.Status = cpv1.Receipt_STATUS_SKIPPED_IDEMPOTENT
		log.Info("idempotent replay skipped", "blender_mutation_id", prev.GetBlenderMutationId())
		return r, nil
	}
	r.Status = cpv1.Receipt_STATUS_FAILED
	r.Error = &cpv1.Failure{
		ErrorCode:   "IDEMPOTENCY_CONFLICT",
		Recoverable: true,
		RetryHint:   "the scene changed since this operation committed; submit it under a new request_id",
		Message:     fmt.Sprintf("operation committed with scene hash %s, scene is now %s", prev.GetSceneHashAfter(), hash),
		MinimalRepairPlan: []*cpv1.RepairStep{
			{OperationId: op.OperationID, Action: cpv1.RepairStep_ACTION_INSERT_PRECONDITION},
		},
	}
	return r, nil
}

// MutationID names the mutation an idempotency key commits: unique per
// session and key, and the same on every retry.
func MutationID(sessionID, key string) string {
	sum := sha256.Sum256([]byte(sessionID + "\x00" + key))
	return "mut-" + hex.EncodeToString(sum[:12])
}

func toolFailure(operationID string, e *blender.ToolError) *cpv1.Failure {
	hint, action := "fix the operation's args", cpv1.RepairStep_ACTION_REPLACE_ARGS
	switch e.Code {
	case "not_found":
		hint, action = "create the missing datablock first or correct the name", cpv1.RepairStep_ACTION_INSERT_PRECONDITION
	case "conflict":
		hint = "choose a name that is not in use"
	case "timeout", "internal_error":
		hint, action = "retry the operation", cpv1.RepairStep_ACTION_RETRY
	case "policy_refused":
		hint = "keep file paths inside the session's output directory"
	}
	return &cpv1.Failure{
		ErrorCode:         strings.ToUpper(e.Code),
		Recoverable:       e.Code != "internal_error",
		RetryHint:         hint,
		Message:           e.Message,
		MinimalRepairPlan: []*cpv1.RepairStep{{OperationId: operationID, Action: action}},
	}
}

// Close stops a session's Blender and forgets the session.
func (m *Manager) Close(sessionID string) error {
	m.mu.Lock()
	s, ok := m.sessions[sessionID]
	delete(m.sessions, sessionID)
	m.mu.Unlock()
	if !ok {
		return fmt.Errorf("%w: %q", ErrNotFound, sessionID)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc != nil {
		return s.proc.Stop(5 * time.Second)
	}
	return nil
}

// CloseAll stops every session's Blender.
func (m *Manager) CloseAll() {
	m.mu.Lock()
	ids := make([]string, 0, len(m.sessions))
	for id := range m.sessions {
		ids = append(ids, id)
	}
	m.mu.Unlock()
	for _, id := range ids {
		if err := m.Close(id); err != nil {
			m.log.Warn("close session", "session_id", id, "err", err)
		}
	}
}
