package app

import (
	"context"
	"time"
)

// Retention: the artifacts of a session closed more than
// Config.ArtifactRetention ago are forgotten (store.ExpireArtifacts), and
// the blobs no artifact names any more are removed once unused for
// blobIdle: a blob written or found for a new artifact (a file of a
// receipt, an upload, a frame of a distributed render, all named within
// the calls that bound them) is not removed under its new record
// (blob.Store's RemoveIdle, which also asks the store again under its
// lock). Checkpoint copies are not artifacts: they go when replaced, as
// before.

// blobIdle is how long a blob no artifact names stays unused before a
// sweep removes it: longer than any call that finds or writes a blob before
// it names it (a distributed render, bounded by the tool time budget).
const blobIdle = 24 * time.Hour

// expireBatch is how many sessions one transaction expires, and how many
// blobs one pass removes: a sweep never holds the store for long.
const expireBatch = 64

// sweepEvery is how often the sweep runs for a retention: a tenth of it,
// at least a second, at most an hour.
func sweepEvery(retention time.Duration) time.Duration {
	return min(max(retention/10, time.Second), time.Hour)
}

func (a *App) retentionLoop(ctx context.Context) {
	t := time.NewTicker(sweepEvery(a.cfg.ArtifactRetention))
	defer t.Stop()
	for {
		a.sweep(ctx, time.Now())
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// sweep expires the artifacts of sessions closed before now less the
// retention, then removes the garbage blobs unused for blobIdle.
func (a *App) sweep(ctx context.Context, now time.Time) {
	retention := a.cfg.ArtifactRetention
	sessions, blobs := 0, 0
	for ctx.Err() == nil {
		n, err := a.store.ExpireArtifacts(now.Add(-retention), expireBatch)
		if err != nil {
			a.log.Warn("expiring the artifacts of closed sessions", "err", err)
			return
		}
		if sessions += n; n < expireBatch {
			break
		}
	}
	for after := ""; ctx.Err() == nil; {
		garbage, err := a.store.Garbage(after, expireBatch)
		if err != nil || len(garbage) == 0 {
			break
		}
		after = garbage[len(garbage)-1]
		var gone []string
		for _, sum := range garbage {
			unwanted := func() (bool, error) { return a.store.IsGarbage(sum) }
			switch removed, err := a.blobs.RemoveIdle(sum, blobIdle, unwanted); {
			case err != nil:
				a.log.Warn("removing an expired artifact's content", "sha256", sum, "err", err)
			case removed:
				gone = append(gone, sum)
			}
		}
		if err := a.store.Collected(gone); err != nil {
			a.log.Warn("forgetting removed artifact content", "err", err)
			break
		}
		if blobs += len(gone); len(garbage) < expireBatch {
			break // those in use lately wait for a later sweep
		}
	}
	if sessions > 0 || blobs > 0 {
		a.log.Info("artifacts of closed sessions expired", "sessions", sessions, "blobs_removed", blobs, "retention", retention)
	}
}
