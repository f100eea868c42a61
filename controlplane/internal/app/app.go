// Package app holds the control plane's use cases — negotiate, submit,
// watch, cancel, sessions, artifacts, catalogs — for every transport: the
// gRPC layer (package service) only checks requests, calls these, maps
// their errors and responds. It is the only caller of the store, the blob
// directory, the fleet and the executor.
//
// Every use case takes the Principal that calls: sessions, plans and
// artifacts belong to the principal that made them, and request ids are
// unique per principal. Until identities exist every caller is Anonymous.
package app

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/blendplane/blendplane/controlplane/internal/auth"
	"github.com/blendplane/blendplane/controlplane/internal/blob"
	"github.com/blendplane/blendplane/controlplane/internal/executor"
	"github.com/blendplane/blendplane/controlplane/internal/fleet"
	"github.com/blendplane/blendplane/controlplane/internal/macro"
	"github.com/blendplane/blendplane/controlplane/internal/metrics"
	"github.com/blendplane/blendplane/controlplane/internal/policy"
	"github.com/blendplane/blendplane/controlplane/internal/store"
	cpv1 "github.com/blendplane/blendplane/gen/blendplane/controlplane/v1"
)

// Config holds the control plane's ceilings and timings.
type Config struct {
	MaxOperationsPerPlan int
	MaxPayloadBytes      int64
	// MaxArtifactBytes is the largest artifact a session may upload.
	MaxArtifactBytes int64
	// MaxSessionsPerPrincipal bounds the sessions a principal holds open
	// (each keeps files on its agent); 0: no bound.
	MaxSessionsPerPrincipal int
	// MaxAgentsPerPrincipal bounds the agents one agent principal has in
	// the fleet; 0: no bound.
	MaxAgentsPerPrincipal int
	// OpenSessionTimeout bounds opening a session on an agent.
	OpenSessionTimeout time.Duration
	// Tool time budgets: the default, and the least and most a contract
	// may ask for.
	DefaultToolTimeBudget, MinToolTimeBudget, MaxToolTimeBudget time.Duration
	// SessionIdleTimeout parks a session's Blender after this long without
	// plans (told to agents at registration); 0: never.
	SessionIdleTimeout time.Duration
	// ReleaseInterval is how often closed sessions whose agent could not be
	// told are retried (and silent agents are forgotten).
	ReleaseInterval time.Duration
	// ArtifactRetention forgets the artifacts of a session this long after
	// it closed, and removes their content when no other artifact names
	// it (retention.go); 0: kept for good.
	ArtifactRetention time.Duration
	// ArtifactQuotaMiB bounds the artifacts one principal's sessions keep
	// on the control plane (quota.go); 0: no bound.
	ArtifactQuotaMiB int64
	// AgentForgetAfter drops an agent that has not registered for this long
	// from the fleet (it registers again when it is back); 0: never.
	AgentForgetAfter time.Duration
	// Policy decides which operations run, wait for approval or are
	// refused; nil: the defaults (package policy).
	Policy *policy.Policy
	// Metrics counts heartbeats and moves (nil: none).
	Metrics *metrics.Metrics
}

// App is the control plane's application layer.
type App struct {
	cfg        Config
	ca         *auth.CA // nil when authentication is off
	store      *store.Store
	blobs      *blob.Store
	fleet      *fleet.Fleet
	exec       *executor.Executor
	macros     *macro.Registry
	registries *registries
	quotas     quotas
	rebuilds   rebuilds
	pulls      checkpointPulls
	log        *slog.Logger

	stop    context.CancelFunc
	bg      context.Context // background work's, from Start until Stop
	stopped sync.WaitGroup

	// negotiating counts each principal's negotiations under way, which
	// the quota counts with the sessions it holds.
	quotaMu     sync.Mutex
	negotiating map[string]int

	// Previews run in the background until Stop ends previewCtx.
	previewCtx   context.Context
	stopPreview  context.CancelFunc
	previews     sync.WaitGroup
	previewSlots *previewSlots
	// unplaced is, by session id, why failoverLost could not move a lost
	// agent's session at its last try (its goroutine's alone).
	unplaced map[string]string
}

// New returns the application layer and the executor it drives (the
// executor collects receipts' files through the app). Call Start to resume
// unfinished plans and background work, Stop to end it. log is the
// daemon's: the app and the executor each name their component in it.
func New(cfg Config, st *store.Store, blobs *blob.Store, fl *fleet.Fleet, ca *auth.CA, exCfg executor.Config, log *slog.Logger) *App {
	a := &App{cfg: cfg, store: st, blobs: blobs, fleet: fl, ca: ca, macros: macro.Default(), log: log.With("component", "app")}
	a.registries = newRegistries(a.log)
	a.quotas.reserved, a.quotas.handed = map[string]int64{}, map[string]handed{}
	fl.Limit(fleet.Limits{AgentsPerPrincipal: cfg.MaxAgentsPerPrincipal, RegistriesPerPrincipal: registriesPerPrincipal})
	a.previewCtx, a.stopPreview = context.WithCancel(context.Background())
	a.previewSlots = newPreviewSlots()
	a.rebuilds.running, a.pulls.running = map[string]*rebuild{}, map[string]bool{}
	exCfg.Place, exCfg.Distribute, exCfg.AwaitApproval = a.placement, a.distribute, a.awaitApproval
	a.exec = executor.New(exCfg, st, fl, a.collect, log.With("component", "executor"))
	return a
}

// Start closes the sessions whose clients ended with the previous run
// (ephemeral ones), resumes the plans the store holds as unfinished (those
// waiting for approval wait on, previewed at their turn), and starts
// releasing closed sessions on their agents.
func (a *App) Start() error {
	held, err := a.store.SessionsByAgent()
	if err != nil {
		return err
	}
	for id := range held {
		a.fleet.Known(id) // silent until it registers again
	}
	orphans, err := a.closeEphemeral()
	if err != nil {
		return err
	}
	if err := a.exec.Resume(); err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	a.stop, a.bg = cancel, ctx
	a.stopped.Add(1)
	go func() {
		defer a.stopped.Done()
		for _, s := range orphans {
			a.endClosed(ctx, s.Owner, s.Info.GetSessionId())
		}
	}()
	a.stopped.Add(1)
	go func() {
		defer a.stopped.Done()
		a.releaseLoop(ctx)
	}()
	if a.cfg.ArtifactRetention > 0 {
		a.stopped.Add(1)
		go func() {
			defer a.stopped.Done()
			a.retentionLoop(ctx)
		}()
	}
	a.stopped.Add(1)
	go func() {
		defer a.stopped.Done()
		t := time.NewTicker(a.fleet.Heartbeat())
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				a.failoverLost(ctx)
			}
		}
	}()
	return nil
}

// Stop stops the executor (unfinished plans resume at the next Start) and
// the background work.
func (a *App) Stop() {
	if a.stop != nil {
		a.stop()
	}
	a.stopped.Wait()
	a.stopPreview()
	a.previews.Wait()
	a.exec.Stop()
}

func (a *App) macroRef() *cpv1.MacroRegistryRef {
	return &cpv1.MacroRegistryRef{Version: macro.Version, Fingerprint: a.macros.Fingerprint()}
}
