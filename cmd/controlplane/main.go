// Command controlplane serves ControlPlaneService: sessions, plans, receipts.
package main

import (
	"context"
	"flag"
	"log/slog"
	"os"

	"github.com/blendplane/blendplane/cmd/internal/flagenv"
	"github.com/blendplane/blendplane/controlplane"
)

func main() {
	cfg := controlplane.Defaults()
	fs := flag.NewFlagSet("controlplane", flag.ExitOnError)
	fs.StringVar(&cfg.Listen, "listen", cfg.Listen, "gRPC listen address")
	fs.StringVar(&cfg.HTTPListen, "http-listen", cfg.HTTPListen, "HTTP front doors' address (/mcp, /v1, /openapi.json, the lesson API); empty: none; beyond loopback: HTTPS")
	fs.Func("lesson-public-key", "PEM Ed25519 public key that signed lessons verify against (repeatable)", func(v string) error {
		cfg.LessonPublicKeys = append(cfg.LessonPublicKeys, v)
		return nil
	})
	fs.BoolVar(&cfg.RequireSignedLessons, "require-signed-lessons", cfg.RequireSignedLessons, "refuse unsigned lessons")
	fs.DurationVar(&cfg.LessonMaxAge, "lesson-max-age", cfg.LessonMaxAge, "how far a lesson's metadata.issued_at may lie from now")
	fs.BoolVar(&cfg.LessonCustomCommands, "lesson-custom-commands", cfg.LessonCustomCommands, "let lessons' X_CUSTOM.<name> commands run the registry's macro.<name>")
	fs.BoolVar(&cfg.AllowInsecureLocal, "allow-insecure-local", cfg.AllowInsecureLocal, "no authentication, no TLS: development on one machine (loopback only)")
	fs.DurationVar(&cfg.AgentLostAfter, "agent-lost-after", cfg.AgentLostAfter, "mark an agent silent this long LOST (unreachable after three missed heartbeats); 0: never")
	fs.DurationVar(&cfg.ArtifactRetention, "artifact-retention", cfg.ArtifactRetention, "forget the artifacts of a session this long after it closed, and remove their content once no other artifact names it (0: keep them for good)")
	fs.DurationVar(&cfg.AgentForgetAfter, "agent-forget-after", cfg.AgentForgetAfter, "drop an agent silent this long from the fleet, unless it holds sessions")
	fs.StringVar(&cfg.PolicyFile, "policy", cfg.PolicyFile, "policy file (YAML or JSON, docs/POLICY.md); default: destructive and unsafe_ops operations need approval")
	fs.StringVar(&cfg.DataDir, "data-dir", cfg.DataDir, "directory for controlplane.db, blobs/ (artifacts), admin.token and the CA (ca.pem)")
	fs.IntVar(&cfg.MaxMessageBytes, "max-message-bytes", cfg.MaxMessageBytes, "largest gRPC message accepted or sent")
	fs.Int64Var(&cfg.MaxArtifactBytes, "max-artifact-bytes", cfg.MaxArtifactBytes, "largest artifact a client may upload")
	fs.Int64Var(&cfg.MinFreeDiskMiB, "min-free-disk-mib", cfg.MinFreeDiskMiB, "disk kept free under --data-dir for the control plane's database, in MiB: artifact content (uploads, files of receipts, checkpoints) that would leave less is not kept (uploads are refused RESOURCE_EXHAUSTED / STORAGE_EXHAUSTED; 0: none)")
	fs.Int64Var(&cfg.ArtifactQuotaMiB, "artifact-quota-mib", cfg.ArtifactQuotaMiB, "most MiB of artifacts one principal's sessions keep on the control plane (every version of uploads and receipts' files, until --artifact-retention forgets them): over it, uploads are refused RESOURCE_EXHAUSTED / QUOTA_EXCEEDED, receipts' files stay on their agents (downloads relay them while the session lives) and distributed renders fail; 0: no quota")
	fs.IntVar(&cfg.MaxSessionsPerPrincipal, "max-sessions-per-principal", cfg.MaxSessionsPerPrincipal,
		"most sessions one principal may hold open (each keeps files on its agent); 0: no bound")
	fs.IntVar(&cfg.MaxAgentsPerPrincipal, "max-agents-per-principal", cfg.MaxAgentsPerPrincipal,
		"most agents one agent token may have registered at once (forgotten after --agent-forget-after of silence); 0: no bound")
	fs.DurationVar(&cfg.SessionIdleTimeout, "session-idle-timeout", cfg.SessionIdleTimeout, "park a session (checkpoint it, stop its Blender) after this long without plans; 0: never")
	fs.IntVar(&cfg.MaxOperationsPerPlan, "max-operations-per-plan", cfg.MaxOperationsPerPlan, "largest plan accepted")
	fs.DurationVar(&cfg.Heartbeat, "heartbeat", cfg.Heartbeat, "interval agents register at")
	fs.DurationVar(&cfg.OperationTimeout, "operation-timeout", cfg.OperationTimeout, "cancel an agent call silent this long; also the largest tool time budget")
	fs.DurationVar(&cfg.ToolTimeBudget, "tool-time-budget", cfg.ToolTimeBudget, "a tool call's time budget when the contract asks for none")
	fs.DurationVar(&cfg.AgentRetryWindow, "agent-retry-window", cfg.AgentRetryWindow, "how long an unreachable agent is retried before its operation fails; keep it above --agent-lost-after, so that a lost agent's sessions move first")
	fs.DurationVar(&cfg.OpenSessionTimeout, "open-session-timeout", cfg.OpenSessionTimeout, "time limit for opening a session on an agent")
	fs.Func("tls-host", "a further name or address clients reach the control plane by, for its TLS certificate (repeatable)", func(v string) error {
		cfg.TLSHosts = append(cfg.TLSHosts, v)
		return nil
	})
	fs.StringVar(&cfg.Planner, "planner", cfg.Planner, "the planner runtime's model provider (/api/agent/*, PlannerService): gemini (GEMINI_API_KEY) or openai (OPENAI_API_KEY; any OpenAI-compatible endpoint: Ollama, llama.cpp's server, vLLM); empty: none")
	fs.StringVar(&cfg.PlannerModel, "planner-model", cfg.PlannerModel, "the planner's model, e.g. gemini-2.5-flash, qwen3:8b")
	fs.StringVar(&cfg.PlannerBaseURL, "planner-base-url", cfg.PlannerBaseURL, "the planner provider's endpoint, e.g. http://127.0.0.1:11434/v1 for Ollama; empty: the provider's own")
	fs.IntVar(&cfg.PlannerMaxTurns, "planner-max-turns", cfg.PlannerMaxTurns, "model turns per run, 1 to 3")
	flagenv.Daemon("controlplane", fs, func(ctx context.Context, log *slog.Logger) error {
		switch cfg.Planner {
		case "gemini":
			cfg.PlannerAPIKey = os.Getenv("GEMINI_API_KEY")
		case "openai":
			cfg.PlannerAPIKey = os.Getenv("OPENAI_API_KEY")
		}
		return controlplane.Run(ctx, cfg, log, nil)
	})
}
