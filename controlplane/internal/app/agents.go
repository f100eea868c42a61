package app

import (
	"context"
	"errors"
	"fmt"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/blendplane/blendplane/controlplane/internal/auth"
	"github.com/blendplane/blendplane/controlplane/internal/contract"
	"github.com/blendplane/blendplane/controlplane/internal/fleet"
	cpv1 "github.com/blendplane/blendplane/gen/blendplane/controlplane/v1"
	"github.com/blendplane/blendplane/internal/toolregistry"
)

// ErrAgentIdentity: an agent id registered by another principal.
var ErrAgentIdentity = errors.New("agent id taken by another principal")

// maxRegistryBytes bounds one tool registry, as sent, and
// registriesPerPrincipal the distinct ones an agent principal's agents
// hold: the fleet keeps them in memory (one copy per fingerprint).
// Blendplane's registry is about 22 KB; a fleet has one per Blender and
// bridge version.
const (
	maxRegistryBytes       = 4 << 20
	registriesPerPrincipal = 16
)

// agentCertValidity is how long an agent's certificate is valid; agents ask
// for a new one at registration when theirs is old.
const agentCertValidity = 90 * 24 * time.Hour

// pinned is the safety metadata of tools the control plane knows, whatever
// a registry says: a registry that declares them otherwise is refused (a
// forged one would make python.exec look headless-safe and deterministic).
var pinned = map[string]struct {
	mode, determinism, rollback string
	safety                      cpv1.SafetyLevel
}{
	"python.exec":  {contract.ModeUnsafeOps, "nondeterministic", "none", cpv1.SafetyLevel_SAFETY_LEVEL_DESTRUCTIVE},
	"ui.highlight": {contract.ModeUIAssisted, "deterministic", "none", cpv1.SafetyLevel_SAFETY_LEVEL_READ_ONLY},
}

// checkPinned refuses a registry that declares a pinned tool otherwise.
func checkPinned(rt *cpv1.Runtime) error {
	for _, t := range rt.GetRegistry().GetTools() {
		p, ok := pinned[t.GetName()]
		if !ok {
			continue
		}
		if t.GetSafetyMode() != p.mode || t.GetDeterminismClass() != p.determinism || t.GetRollbackMethod() != p.rollback || t.GetSafetyLevel() != p.safety {
			return fmt.Errorf("%w: runtime %s declares %s as %s/%s/%s/%s; it is %s/%s/%s/%s", ErrRegistryInvalid, rt.GetRuntimeId(), t.GetName(),
				t.GetSafetyMode(), t.GetDeterminismClass(), t.GetRollbackMethod(), t.GetSafetyLevel(), p.mode, p.determinism, p.rollback, p.safety)
		}
	}
	return nil
}

// RegisterAgent records an agent's registration or heartbeat and answers
// with the fleet's settings and, for a certificate request, the agent's
// certificate. An agent id belongs to the principal that registered it
// first; registries that are not what their fingerprints name or
// misdeclare the tools the control plane knows are refused (checkRegistry).
// New tool registries are compiled now, in the background. A heartbeat may
// name the registries by fingerprint once the control plane said it holds
// them.
func (a *App) RegisterAgent(ctx context.Context, who Principal, req *cpv1.RegisterAgentRequest) (*cpv1.RegisterAgentResponse, error) {
	if err := Require(who, auth.ScopeAgent, "registering an agent"); err != nil {
		return nil, err
	}
	if !req.GetRegistriesByFingerprint() {
		for _, rt := range req.GetRuntimes() {
			if err := a.checkRegistry(rt); err != nil {
				return nil, err
			}
		}
	}
	// Refused before the agent id is bound to the principal for good.
	if err := a.admit(req, who.Name, a.fleet.Admit); err != nil {
		return nil, err
	}
	owner, err := a.store.BindAgent(req.GetAgentId(), who.Name)
	if err != nil {
		return nil, err
	}
	if owner != who.Name {
		return nil, fmt.Errorf("%w: agent %s belongs to %q", ErrAgentIdentity, req.GetAgentId(), owner)
	}
	resp := &cpv1.RegisterAgentResponse{
		HeartbeatIntervalSeconds: int32(a.fleet.Heartbeat() / time.Second),
		SessionIdleTimeoutMs:     a.cfg.SessionIdleTimeout.Milliseconds(),
	}
	if req.GetRegistriesByFingerprint() && !a.fleet.FillRegistries(req) {
		return resp, nil // not held: the agent sends them in full at once
	}
	if csr := req.GetCertificateRequest(); len(csr) > 0 && a.ca != nil {
		if err := a.admit(req, who.Name, a.fleet.Hold); err != nil {
			return nil, err
		}
		cert, err := a.ca.SignAgent(csr, req.GetAgentId(), agentCertValidity)
		if err != nil {
			return nil, badField("certificate_request", err.Error())
		}
		resp.Certificate, resp.CaCertificate = cert, a.ca.CertPEM()
		a.log.Info("agent certificate issued", "agent_id", req.GetAgentId(), "principal", who.Name)
	}
	a.cfg.Metrics.Heartbeat()
	a.pullCheckpoints(req.GetAgentId(), req.GetHeldSessions())
	if moved := a.movedSessions(req.GetAgentId(), req.GetHeldSessions()); len(moved) > 0 {
		resp.MovedSessions = moved
		a.log.Warn("agent holds sessions that run elsewhere now; it drops them", "agent_id", req.GetAgentId(), "sessions", moved)
	}
	if resp.Certificate == nil {
		// An agent that was just issued a certificate cannot serve with it
		// yet: it joins the fleet at its next registration, which it sends
		// as soon as the certificate is installed.
		if err := a.admit(req, who.Name, a.fleet.Register); err != nil {
			return nil, err
		}
		resp.RegistriesHeld = true
	}
	for _, rt := range req.GetRuntimes() {
		// Compiled once per fingerprint, in the background; a registry that
		// does not compile is logged there, and plans against it are
		// refused, while the agent's other runtimes serve.
		go a.registries.get(rt.GetRegistry().GetFingerprint(), known(rt.GetRegistry()))
	}
	return resp, nil
}

// admit runs a fleet's check of a registration (Admit or Register) and
// maps its refusals.
func (a *App) admit(req *cpv1.RegisterAgentRequest, owner string, check func(*cpv1.RegisterAgentRequest, string) error) error {
	err := check(req, owner)
	if errors.Is(err, fleet.ErrTooManyAgents) || errors.Is(err, fleet.ErrTooManyRegistries) {
		return fmt.Errorf("%w: %w", ErrQuotaExceeded, err)
	}
	return err
}

// checkRegistry refuses a runtime whose tool registry is not the one its
// fingerprint names (registries are kept, and compiled once, by
// fingerprint: another under the same one would stand in for it in every
// session that names it) or that misdeclares a tool the control plane
// knows.
func (a *App) checkRegistry(rt *cpv1.Runtime) error {
	if n := proto.Size(rt.GetRegistry()); n > maxRegistryBytes {
		return fmt.Errorf("%w: runtime %s: its tool registry is %d bytes, at most %d", ErrRegistryInvalid, rt.GetRuntimeId(), n, maxRegistryBytes)
	}
	if err := toolregistry.Check(rt.GetRegistry()); err != nil {
		return fmt.Errorf("%w: runtime %s: %w", ErrRegistryInvalid, rt.GetRuntimeId(), err)
	}
	// Args are a JSON object (plans, MCP tools): a tool whose schema says
	// otherwise could never be called, and the MCP SDK refuses to list it.
	for _, t := range rt.GetRegistry().GetTools() {
		if t.GetInputSchema().GetFields()["type"].GetStringValue() != "object" {
			return fmt.Errorf("%w: runtime %s: the input schema of %s is not a JSON object's (\"type\": \"object\")", ErrRegistryInvalid, rt.GetRuntimeId(), t.GetName())
		}
	}
	return checkPinned(rt)
}

// Agents lists the known agents with their state and the sessions placed
// on them, by id, a page at a time.
func (a *App) Agents(ctx context.Context, size int32, token string) ([]*cpv1.Agent, string, error) {
	after, err := decodeNamePageToken(token, "agents")
	if err != nil {
		return nil, "", badPageToken(err)
	}
	held, err := a.store.SessionsByAgent()
	if err != nil {
		return nil, "", err
	}
	var out []*cpv1.Agent
	for _, ag := range a.fleet.List() {
		if ag.GetAgentId() <= after {
			continue
		}
		if len(out) == pageSize(size) {
			return out, encodeNamePageToken("agents", out[len(out)-1].GetAgentId()), nil
		}
		ag.SessionIds = held[ag.GetAgentId()]
		out = append(out, ag)
	}
	return out, "", nil
}
