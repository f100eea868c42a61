package plan

import (
	"fmt"
	"sort"

	"github.com/blendplane/blendplane/internal/filename"
)

// SandboxPathKeyword marks, in a tool's input schema, a string property that
// names a file in the session's sandbox directory ("x-sandbox-path": true).
const SandboxPathKeyword = "x-sandbox-path"

// Reasons of the contract gate (seed 001's lifecycle: after validation, a
// call must pass the session's contract).
const (
	ReasonCapabilityMissing = "CAPABILITY_MISSING"
	ReasonPolicyRefused     = "POLICY_REFUSED"
	ReasonContractViolation = "CONTRACT_VIOLATION"
	ReasonNondeterministic  = "NONDETERMINISTIC_REFUSED"
)

// Contract is what a session's contract lets its plans do.
type Contract struct {
	// Callable lists the tools the session may call.
	Callable map[string]bool
	// Atomic is set for plans that roll back whole on failure.
	Atomic bool
	// Nondeterministic allows tools without a determinism promise.
	Nondeterministic bool
}

// CheckContract is the contract gate, run after Check on a valid plan. It
// refuses tools that need a UI (CAPABILITY_MISSING: sessions are headless),
// unsafe_ops tools without the negotiated flag (POLICY_REFUSED), tools the
// contract left out, and, in atomic plans, mutating tools that cannot be
// rolled back (both CONTRACT_VIOLATION), and tools that promise no
// determinism without the negotiated flag (NONDETERMINISTIC_REFUSED). The first of these reasons found
// names the refusal; all offending operations are listed.
func CheckContract(ops []Operation, reg *Registry, c Contract) error {
	var e *Error
	for i, op := range ops {
		t, ok := reg.lookup(op.Tool)
		if !ok {
			continue // Check reported it
		}
		def := t.def
		reason, desc, action := "", "", ActionDrop
		arg := escapingPath(t.sandboxArgs, op.Args)
		switch {
		case def.Mode == "ui_assisted":
			reason, desc = ReasonCapabilityMissing, fmt.Sprintf("operation %q: %s needs a UI, and sessions are headless", op.ID, op.Tool)
		case def.Mode == "unsafe_ops" && !c.Callable[op.Tool]:
			reason, desc = ReasonPolicyRefused, fmt.Sprintf("operation %q: %s runs unsafe operations; negotiate the unsafe_ops feature flag to use it", op.ID, op.Tool)
		case def.Determinism == "nondeterministic" && !c.Nondeterministic:
			reason, desc = ReasonNondeterministic, fmt.Sprintf("operation %q: %s promises no determinism; negotiate the nondeterministic_tools feature flag to use it", op.ID, op.Tool)
		case !c.Callable[op.Tool]:
			reason, desc = ReasonContractViolation, fmt.Sprintf("operation %q: %s is not among the tools of the session's contract", op.ID, op.Tool)
		case arg != "":
			reason, desc, action = ReasonPolicyRefused, fmt.Sprintf("operation %q: %s %q is not a plain file name in the session's sandbox directory; "+
				`give a name other than "." or ".." without "/", "\" or control characters`, op.ID, arg, op.Args[arg]), ActionReplaceArgs
		case c.Atomic && def.Rollback == "none" && def.Safety != SafetyReadOnly:
			reason, desc, action = ReasonContractViolation, fmt.Sprintf("operation %q: %s cannot be rolled back, so it cannot be part of an atomic plan", op.ID, op.Tool), ActionDrop
		default:
			continue
		}
		if e == nil {
			e = &Error{Reason: reason, Message: desc}
		}
		field := opField(i, "tool_name")
		if reason == ReasonPolicyRefused && arg != "" {
			field = opField(i, "args."+arg)
		}
		e.Violations = append(e.Violations, Violation{Field: field, Description: desc})
		e.Repair = append(e.Repair, RepairStep{OperationID: op.ID, Action: action})
	}
	if e == nil {
		return nil
	}
	if n := len(e.Violations); n > 1 {
		e.Message += fmt.Sprintf(" (and %d more)", n-1)
	}
	return e
}

// escapingPath returns the first sandbox-path arg of args that is not a plain
// file name: empty, ".", "..", or containing "/", "\" or a control
// character (U+0000 to U+001F, U+007F). These rules are the bridge's
// sandbox.is_plain_name (agentd/internal/blender/bridge/sandbox.py), which
// checks again before a tool touches a file: keep the two identical, so that
// the control plane refuses every such name before anything runs. (A
// symlink planted in the sandbox is caught by the agent, which resolves it.)
func escapingPath(sandboxArgs []string, args map[string]any) string {
	for _, name := range sandboxArgs {
		if v, ok := args[name].(string); ok && !isPlainFileName(v) {
			return name
		}
	}
	return ""
}

// sandboxArgs lists, sorted, the properties of a tool's input schema marked
// SandboxPathKeyword.
func sandboxArgs(inputSchema map[string]any) []string {
	props, _ := inputSchema["properties"].(map[string]any)
	var names []string
	for name, schema := range props {
		if s, _ := schema.(map[string]any); s != nil {
			if marked, _ := s[SandboxPathKeyword].(bool); marked {
				names = append(names, name)
			}
		}
	}
	sort.Strings(names)
	return names
}

// isPlainFileName is sandbox.is_plain_name, plus the file system's limit
// on a name's length (see filename.Problem).
func isPlainFileName(name string) bool { return filename.Problem(name) == "" }
