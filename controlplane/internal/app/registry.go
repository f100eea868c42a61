package app

import (
	"fmt"
	"log/slog"
	"sync"

	"github.com/blendplane/blendplane/controlplane/internal/plan"
	cpv1 "github.com/blendplane/blendplane/gen/blendplane/controlplane/v1"
	"github.com/blendplane/blendplane/internal/panicguard"
)

// registries compiles each tool registry once per fingerprint, errors
// included, and never holds a lock that others wait on while compiling:
// a compile takes milliseconds to seconds, and plans of other registries
// must not wait for it. It keeps at most maxRegistries, dropping the least
// recently used (a fleet has a handful; registrations that make up new ones
// must not grow it without bound).
type registries struct {
	log     *slog.Logger
	compile func(*cpv1.ToolRegistry) (*plan.Registry, error)

	mu    sync.Mutex
	byFP  map[string]*compiled
	clock uint64
}

// maxRegistries bounds the compiled registries kept.
const maxRegistries = 64

type compiled struct {
	once sync.Once
	used uint64 // registries.clock at the last get
	raw  *cpv1.ToolRegistry
	reg  *plan.Registry
	err  error
}

func newRegistries(log *slog.Logger) *registries {
	return &registries{log: log, compile: compileRegistry, byFP: map[string]*compiled{}}
}

// get returns the compiled registry with fingerprint fp, loading it with
// load and compiling it on first use. A registry that does not compile fails
// with ErrRegistryInvalid, every time, and is logged once; one that could
// not be loaded is loaded again at the next get.
func (r *registries) get(fp string, load func() (*cpv1.ToolRegistry, error)) (*plan.Registry, error) {
	r.mu.Lock()
	c, ok := r.byFP[fp]
	if !ok {
		if len(r.byFP) >= maxRegistries {
			r.evict()
		}
		c = &compiled{}
		r.byFP[fp] = c
	}
	r.clock++
	c.used = r.clock
	r.mu.Unlock()
	c.once.Do(func() {
		// A compiler's panic on a registry an agent sent (compiled on a
		// goroutine of its own at registration) is that registry's error.
		defer func() {
			if p := recover(); p != nil {
				c.reg, c.err = nil, fmt.Errorf("%w: registry %s: %w", ErrRegistryInvalid, fp, panicguard.Recovered(r.log, "compiling a tool registry", p))
			}
		}()
		c.raw, c.err = load()
		if c.err != nil {
			return
		}
		c.reg, c.err = r.compile(c.raw)
		if c.err != nil {
			c.err = fmt.Errorf("%w: registry %s: %w", ErrRegistryInvalid, fp, c.err)
			r.log.Error("tool registry does not compile; plans against it are refused", "fingerprint", fp, "err", c.err)
		}
	})
	if c.err != nil && c.raw == nil {
		// Not loaded (the store failed to read it): the next get tries again.
		r.mu.Lock()
		if r.byFP[fp] == c {
			delete(r.byFP, fp)
		}
		r.mu.Unlock()
	}
	return c.reg, c.err
}

// evict drops the least recently used registry. The caller holds r.mu.
func (r *registries) evict() {
	var oldest string
	for fp, c := range r.byFP {
		if oldest == "" || c.used < r.byFP[oldest].used {
			oldest = fp
		}
	}
	delete(r.byFP, oldest)
}

// known is a loader of a registry at hand (a runtime's, from its agent).
func known(tr *cpv1.ToolRegistry) func() (*cpv1.ToolRegistry, error) {
	return func() (*cpv1.ToolRegistry, error) { return tr, nil }
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
