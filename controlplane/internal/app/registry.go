package app

import (
	"fmt"
	"log/slog"
	"sync"

	"github.com/blendplane/blendplane/controlplane/internal/plan"
	cpv1 "github.com/blendplane/blendplane/gen/blendplane/controlplane/v1"
)

// registries compiles each tool registry once per fingerprint, errors
// included, and never holds a lock that others wait on while compiling:
// a compile takes milliseconds to seconds, and plans of other registries
// must not wait for it.
type registries struct {
	log     *slog.Logger
	compile func(*cpv1.ToolRegistry) (*plan.Registry, error)

	mu   sync.Mutex
	byFP map[string]*compiled
}

type compiled struct {
	once sync.Once
	reg  *plan.Registry
	err  error
}

func newRegistries(log *slog.Logger) *registries {
	return &registries{log: log, compile: compileRegistry, byFP: map[string]*compiled{}}
}

// get returns the compiled registry, compiling it on first use. A registry
// that does not compile fails with ErrRegistryInvalid, every time, and is
// logged once.
func (r *registries) get(tr *cpv1.ToolRegistry) (*plan.Registry, error) {
	fp := tr.GetFingerprint()
	r.mu.Lock()
	c, ok := r.byFP[fp]
	if !ok {
		c = &compiled{}
		r.byFP[fp] = c
	}
	r.mu.Unlock()
	c.once.Do(func() {
		c.reg, c.err = r.compile(tr)
		if c.err != nil {
			c.err = fmt.Errorf("%w: registry %s: %w", ErrRegistryInvalid, fp, c.err)
			r.log.Error("tool registry does not compile; plans against it are refused", "fingerprint", fp, "err", c.err)
		}
	})
	return c.reg, c.err
}

func compileRegistry(r *cpv1.ToolRegistry) (*plan.Registry, error) {
	defs := make([]plan.ToolDef, 0, len(r.GetTools()))
	for _, t := range r.GetTools() {
		defs = append(defs, plan.ToolDef{Name: t.GetName(), Safety: plan.SafetyLevel(t.GetSafetyLevel()),
			InputSchema: t.GetInputSchema().AsMap(), Mode: t.GetSafetyMode(), Rollback: t.GetRollbackMethod(),
			Determinism: t.GetDeterminismClass()})
	}
	return plan.NewRegistry(defs)
}
