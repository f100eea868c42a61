// Package contract negotiates session contracts (seed 003): what a client
// asks for against what the control plane and a runtime offer. Everything
// here is a pure function of its inputs: the same request against the same
// offer yields the same contract, byte for byte, but for the session id and
// time.
package contract

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"sort"
	"strings"

	"google.golang.org/protobuf/proto"

	cpv1 "github.com/blendplane/blendplane/gen/blendplane/controlplane/v1"
)

// Version is the only contract version this control plane speaks.
const Version = "1.0.0"

// Feature flags the control plane supports. Requested flags are negotiated
// as a set intersection; an unsupported one is refused, never dropped.
const (
	// FlagUnsafeOps allows tools whose safety mode is unsafe_ops (python.exec).
	FlagUnsafeOps = "unsafe_ops"
	// FlagProgressEvents streams progress of long operations with receipts.
	FlagProgressEvents = "progress_events"
	// FlagNondeterministic allows tools that promise no determinism
	// (python.exec); their replay after a crash may not reproduce the scene.
	FlagNondeterministic = "nondeterministic_tools"
)

// CapabilityEphemeral, among a host profile's capabilities, says that the
// client lives in the control plane's memory (its MCP sessions over HTTP):
// the session ends with the control plane's process, and a control plane
// that starts closes the ephemeral sessions its previous run left open.
const CapabilityEphemeral = "ephemeral"

// SupportedFlags lists the flags above, sorted.
var SupportedFlags = []string{FlagNondeterministic, FlagProgressEvents, FlagUnsafeOps}

// Safety modes of tools.
const (
	ModeHeadlessSafe = "headless_safe"
	ModeUIAssisted   = "ui_assisted"
	ModeUnsafeOps    = "unsafe_ops"
)

// Limits of the control plane: proposals above them are tightened.
const (
	ToolSurfaceCap     = 35
	MaxConcurrentCalls = 1
)

// Violation is a refused negotiation: which field, what was asked, why.
type Violation struct {
	Field   string
	Value   string
	Message string
}

func (v *Violation) Error() string {
	return fmt.Sprintf("contract violation: %s %q: %s", v.Field, v.Value, v.Message)
}

// Offer is what the control plane can give one session.
type Offer struct {
	// The runtime the session would be placed on, and its agent's resources.
	Runtime   *cpv1.Runtime
	Resources *cpv1.Resources
	// The control plane's own ceilings.
	MaxOperationsPerPlan int32
	MaxPayloadBytes      int64
	MaxArtifactBytes     int64
	// Tool time budgets: the least and most a contract may ask for, and the
	// default.
	MinToolTimeBudgetMs int64
	MaxToolTimeBudgetMs int64
	DefaultToolBudgetMs int64
	MacroRegistry       *cpv1.MacroRegistryRef
}

// CheckRequest refuses what no runtime could satisfy: the contract version,
// unsupported feature flags, a malformed version range, an unknown macro
// registry, an audit policy we cannot honour.
func CheckRequest(req *cpv1.NegotiateRequest, macros *cpv1.MacroRegistryRef) error {
	if req.GetContractVersion() != Version {
		return &Violation{"contract_version", req.GetContractVersion(), fmt.Sprintf("this control plane speaks %q", Version)}
	}
	for _, f := range req.GetHostProfile().GetFeatureFlags() {
		if !contains(SupportedFlags, f) {
			return &Violation{"host_profile.feature_flags", f, "unsupported feature flag; supported: " + strings.Join(SupportedFlags, ", ")}
		}
	}
	if _, err := ParseRange(req.GetBlenderVersionRange()); err != nil {
		return &Violation{"blender_version_range", req.GetBlenderVersionRange(), err.Error()}
	}
	if ref := req.GetMacroRegistryRef(); ref != nil && (ref.GetFingerprint() != macros.GetFingerprint() || ref.GetVersion() != "" && ref.GetVersion() != macros.GetVersion()) {
		return &Violation{"macro_registry_ref", ref.GetVersion() + "@" + ref.GetFingerprint(),
			fmt.Sprintf("unknown macro registry; this control plane has %s@%s", macros.GetVersion(), macros.GetFingerprint())}
	}
	a := req.GetAudit()
	if v := a.GetVerbosity(); v != "" && v != "minimal" && v != "full" {
		return &Violation{"audit.verbosity", v, "want minimal or full"}
	}
	for _, r := range a.GetRedact() {
		if r != "args" && r != "result" {
			return &Violation{"audit.redact", r, "only args and result can be redacted"}
		}
	}
	for _, s := range a.GetSinks() {
		if s != "controlplane" {
			return &Violation{"audit.sinks", s, "the only audit sink is controlplane (ListAuditRecords)"}
		}
	}
	return nil
}

// Fits reports why a runtime cannot take the session, or nil if it can.
func Fits(req *cpv1.NegotiateRequest, rt *cpv1.Runtime) *Violation {
	rng, _ := ParseRange(req.GetBlenderVersionRange())
	if !rng.Contains(rt.GetBlenderProfile().GetVersion()) {
		return &Violation{"blender_version_range", req.GetBlenderVersionRange(), "no ready agent has a runtime with a Blender in this range (see blendctl agents)"}
	}
	if ref := req.GetToolRegistryRef(); ref != nil {
		reg := rt.GetRegistry()
		if ref.GetFingerprint() != reg.GetFingerprint() || ref.GetVersion() != "" && ref.GetVersion() != reg.GetVersion() {
			return &Violation{"tool_registry_ref", ref.GetVersion() + "@" + ref.GetFingerprint(), "no ready agent has a runtime with this tool registry (see blendctl agents)"}
		}
	}
	return nil
}

// MinMemoryMiB is the smallest memory ceiling a session may ask for: an
// idle Blender holds about 250 MiB, and the ceiling is enforced on it.
const MinMemoryMiB = 512

// Build negotiates the contract for a runtime that Fits the request. It
// refuses constraints the offer cannot meet and tightens limits above its
// ceilings.
func Build(req *cpv1.NegotiateRequest, offer Offer) (*cpv1.SessionContract, error) {
	want := req.GetConstraints()
	cons := &cpv1.Constraints{
		MaxMemoryMib:     want.GetMaxMemoryMib(),
		ToolTimeBudgetMs: want.GetToolTimeBudgetMs(),
		TempStorageMib:   want.GetTempStorageMib(),
	}
	if cons.MaxMemoryMib > 0 && cons.MaxMemoryMib < MinMemoryMiB {
		return nil, &Violation{"constraints.max_memory_mib", fmt.Sprint(cons.MaxMemoryMib),
			fmt.Sprintf("at least %d MiB: Blender alone takes about 250 (0 means the agent's memory)", MinMemoryMiB)}
	}
	if have := offer.Resources.GetMemoryMib(); cons.MaxMemoryMib > have {
		return nil, &Violation{"constraints.max_memory_mib", fmt.Sprint(cons.MaxMemoryMib), fmt.Sprintf("the agent has %d MiB", have)}
	}
	if have := offer.Resources.GetTempStorageMib(); cons.TempStorageMib > have {
		return nil, &Violation{"constraints.temp_storage_mib", fmt.Sprint(cons.TempStorageMib), fmt.Sprintf("the agent offers a session at most %d MiB of disk", have)}
	}
	if cons.ToolTimeBudgetMs > 0 && cons.ToolTimeBudgetMs < offer.MinToolTimeBudgetMs {
		// Below this every call would time out, and each timeout stops
		// and rebuilds the session's Blender.
		return nil, &Violation{"constraints.tool_time_budget_ms", fmt.Sprint(cons.ToolTimeBudgetMs),
			fmt.Sprintf("at least %d ms per tool call (0 means the default)", offer.MinToolTimeBudgetMs)}
	}
	if cons.ToolTimeBudgetMs > offer.MaxToolTimeBudgetMs {
		return nil, &Violation{"constraints.tool_time_budget_ms", fmt.Sprint(cons.ToolTimeBudgetMs),
			fmt.Sprintf("at most %d ms per tool call", offer.MaxToolTimeBudgetMs)}
	}
	if cons.MaxMemoryMib == 0 {
		cons.MaxMemoryMib = offer.Resources.GetMemoryMib()
	}
	if cons.TempStorageMib == 0 {
		cons.TempStorageMib = offer.Resources.GetTempStorageMib()
	}
	if cons.ToolTimeBudgetMs == 0 {
		cons.ToolTimeBudgetMs = min(offer.DefaultToolBudgetMs, offer.MaxToolTimeBudgetMs)
	}
	flags := sortedCopy(req.GetHostProfile().GetFeatureFlags())
	cons.SafetyRails = []string{"headless", "sandboxed_paths"}
	if !contains(flags, FlagUnsafeOps) {
		cons.SafetyRails = append(cons.SafetyRails, "no_unsafe_ops")
	}

	proposed := req.GetLimits()
	limits := &cpv1.Limits{
		MaxOperationsPerPlan: tighten(proposed.GetMaxOperationsPerPlan(), offer.MaxOperationsPerPlan),
		MaxPayloadBytes:      tighten(proposed.GetMaxPayloadBytes(), offer.MaxPayloadBytes),
		ToolSurfaceCap:       tighten(proposed.GetToolSurfaceCap(), ToolSurfaceCap),
		MaxConcurrentCalls:   tighten(proposed.GetMaxConcurrentCalls(), MaxConcurrentCalls),
		MaxArtifactBytes:     tighten(proposed.GetMaxArtifactBytes(), offer.MaxArtifactBytes),
	}

	reg := offer.Runtime.GetRegistry()
	tools, err := callable(reg.GetTools(), flags, req.GetHostProfile().GetSupportedToolVersions(), limits.GetToolSurfaceCap())
	if err != nil {
		return nil, err
	}
	audit := &cpv1.AuditPolicy{Verbosity: "minimal", Redact: req.GetAudit().GetRedact(), Sinks: []string{"controlplane"}}
	if v := req.GetAudit().GetVerbosity(); v != "" {
		audit.Verbosity = v
	}
	c := &cpv1.SessionContract{
		ContractVersion: Version,
		HostProfile:     req.GetHostProfile(),
		BlenderProfile:  offer.Runtime.GetBlenderProfile(),
		ToolRegistryRef: &cpv1.ToolRegistryRef{Version: reg.GetVersion(), Fingerprint: reg.GetFingerprint()},
		Limits:          limits,
		UiOptional:      true,
		Capabilities: &cpv1.Capabilities{
			Tools: tools, Macros: true, VersionNegotiation: true, AuditLog: true, FeatureFlags: flags,
		},
		Constraints:      cons,
		MacroRegistryRef: offer.MacroRegistry,
		Audit:            audit,
		AgentSelector:    req.GetAgentSelector(),
		Fingerprints: map[string]string{
			"tool_registry":  reg.GetFingerprint(),
			"macro_registry": offer.MacroRegistry.GetFingerprint(),
			"schemas":        schemasFingerprint(reg.GetTools()),
		},
	}
	return c, nil
}

// Seal sets the "contract" fingerprint over everything agreed, once the
// session id and placement are filled in.
func Seal(c *cpv1.SessionContract) {
	c.Fingerprints["contract"] = ""
	clone := proto.Clone(c).(*cpv1.SessionContract)
	clone.CreateTime = nil
	delete(clone.Fingerprints, "contract")
	raw, _ := proto.MarshalOptions{Deterministic: true}.Marshal(clone)
	sum := sha256.Sum256(raw)
	c.Fingerprints["contract"] = hex.EncodeToString(sum[:])
}

// callable returns the tools a session may call: headless ones, unsafe ones
// only with the unsafe_ops flag, restricted to the client's tool versions
// when it names any. More than the surface cap is refused.
func callable(tools []*cpv1.ToolDefinition, flags, versions []string, surfaceCap int32) ([]string, error) {
	var out []string
	for _, t := range tools {
		switch t.GetSafetyMode() {
		case ModeUIAssisted:
			continue
		case ModeUnsafeOps:
			if !contains(flags, FlagUnsafeOps) {
				continue
			}
		}
		if len(versions) > 0 && !contains(versions, t.GetName()+"@"+t.GetVersion()) {
			continue
		}
		out = append(out, t.GetName())
	}
	sort.Strings(out)
	if int32(len(out)) > surfaceCap {
		return nil, &Violation{"limits.tool_surface_cap", fmt.Sprint(surfaceCap), fmt.Sprintf("the registry exposes %d callable tools", len(out))}
	}
	return out, nil
}

func schemasFingerprint(tools []*cpv1.ToolDefinition) string {
	h := sha256.New()
	for _, t := range tools {
		raw, _ := proto.MarshalOptions{Deterministic: true}.Marshal(t.GetInputSchema())
		fmt.Fprintf(h, "%s@%s:%d:", t.GetName(), t.GetVersion(), len(raw))
		h.Write(raw)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// tighten keeps a proposal if it is within the ceiling, else the ceiling; 0
// means no proposal.
func tighten[T int32 | int64](proposed, ceiling T) T {
	if proposed <= 0 || proposed > ceiling {
		return ceiling
	}
	return proposed
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

func sortedCopy(s []string) []string {
	out := append([]string(nil), s...)
	sort.Strings(out)
	return out
}
