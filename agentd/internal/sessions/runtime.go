// Package sessions owns agentd's Blender runtimes and sessions: one Blender
// process per session, one batch of operations at a time, a journal that makes
// every receipt durable before it is returned and lets a session be rebuilt
// after Blender or agentd dies (see manager.go: recover).
package sessions

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"sort"
	"time"

	"google.golang.org/protobuf/types/known/structpb"

	"github.com/blendplane/blendplane/agentd/internal/blender"
	cpv1 "github.com/blendplane/blendplane/gen/blendplane/controlplane/v1"
	"github.com/blendplane/blendplane/internal/toolregistry"
)

// SceneHashTolerance is the float tolerance of scene_state_v1 hashes.
const SceneHashTolerance = "1e-5"

// Runtime is a probed Blender runtime: how to start it and what it offers.
type Runtime struct {
	blender.Runtime
	Info *cpv1.Runtime
	// determinism is each tool's determinism class, for receipts.
	determinism map[string]string
	// writes are the tools that write files into the sandbox: a batch
	// that runs one holds session.files.
	writes map[string]bool
}

// Probe starts each runtime once to learn its profile and tool registry
// (which fills the cache its Blenders share, CacheDir(dataDir)).
func Probe(ctx context.Context, rts []blender.Runtime, dataDir string, log *slog.Logger) ([]Runtime, error) {
	var out []Runtime
	for _, rt := range rts {
		dir, err := os.MkdirTemp(dataDir, "probe-")
		if err != nil {
			return nil, err
		}
		p, err := blender.Start(ctx, rt, blender.Options{Logger: log, WorkDir: dir, SandboxDir: dir, CacheDir: CacheDir(dataDir)})
		if err != nil {
			return nil, fmt.Errorf("probe %s: %w", rt.Path, err)
		}
		info, err := runtimeInfo(rt, p.Profile(), p.Tools())
		if err == nil {
			// Every session of the runtime starts from this scene.
			info.BaselineSceneHash, err = p.SceneHash(ctx)
		}
		p.Stop(5 * time.Second)
		os.RemoveAll(dir)
		if err != nil {
			return nil, err
		}
		log.Info("blender runtime ready", "runtime_id", info.GetRuntimeId(), "path", rt.Path,
			"tools", len(info.GetRegistry().GetTools()), "registry_fingerprint", info.GetRegistry().GetFingerprint())
		det, writes := map[string]string{}, map[string]bool{}
		for _, t := range p.Tools() {
			det[t.Name] = t.DeterminismClass
			if t.WritesFiles {
				writes[t.Name] = true
			}
		}
		out = append(out, Runtime{Runtime: rt, Info: info, determinism: det, writes: writes})
	}
	return out, nil
}

func runtimeInfo(rt blender.Runtime, prof blender.Profile, tools []blender.Tool) (*cpv1.Runtime, error) {
	reg := &cpv1.ToolRegistry{Version: toolregistry.Version}
	for _, t := range tools {
		schema, err := structpb.NewStruct(t.InputSchema)
		if err != nil {
			return nil, fmt.Errorf("tool %s schema: %w", t.Name, err)
		}
		reg.Tools = append(reg.Tools, &cpv1.ToolDefinition{
			Name: t.Name, Version: t.Version, Description: t.Description,
			InputSchema: schema, SafetyLevel: toolregistry.SafetyLevel(t.SafetyLevel),
			DeterminismClass: t.DeterminismClass, RollbackMethod: t.RollbackMethod,
			SafetyMode: t.SafetyMode, IdempotenceClass: t.IdempotenceClass, BlenderVersions: t.BlenderVersions,
		})
	}
	sort.Slice(reg.Tools, func(i, j int) bool { return reg.Tools[i].GetName() < reg.Tools[j].GetName() })
	fp, err := toolregistry.Fingerprint(reg)
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
