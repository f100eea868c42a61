package app

import (
	"errors"
	"fmt"
	"math"
	"sync"
)

// quotas holds the bytes being added to each principal's artifacts right
// now (uploads streaming in, receipts' files and frames being fetched), so
// that calls at once cannot each take the same room under its quota
// (Config.ArtifactQuotaMiB). What counts is what a principal's sessions'
// artifact records declare, every version, until an expiry forgets them.
type quotas struct {
	mu       sync.Mutex
	reserved map[string]int64
}

// reserve takes n bytes of the room under owner's quota, until unreserve
// gives them back: false, with nothing taken, when they do not fit.
func (a *App) reserve(owner string, n int64) (bool, error) {
	if a.cfg.ArtifactQuotaMiB <= 0 || n <= 0 {
		return true, nil
	}
	a.quotas.mu.Lock()
	defer a.quotas.mu.Unlock()
	used, err := a.store.ArtifactBytes(owner)
	if err != nil {
		return false, err
	}
	if used+a.quotas.reserved[owner]+n > a.cfg.ArtifactQuotaMiB<<20 {
		return false, nil
	}
	a.quotas.reserved[owner] += n
	return true, nil
}

// unreserve gives back n bytes reserve took: once they are recorded (the
// store counts them then), or not kept after all.
func (a *App) unreserve(owner string, n int64) {
	if a.cfg.ArtifactQuotaMiB <= 0 || n <= 0 {
		return
	}
	a.quotas.mu.Lock()
	defer a.quotas.mu.Unlock()
	if a.quotas.reserved[owner] -= n; a.quotas.reserved[owner] <= 0 {
		delete(a.quotas.reserved, owner)
	}
}

// errArtifactQuota marks the ErrQuotaExceeded of the artifact quota, which
// other agents would meet too, from an agent's own (a session's
// temp_storage_mib).
var errArtifactQuota = errors.New("--artifact-quota-mib")

// overQuota is the error for n bytes that do not fit under owner's quota.
func (a *App) overQuota(owner string, n int64) error {
	used, _ := a.store.ArtifactBytes(owner)
	return fmt.Errorf("%w (%w): %q keeps %.1f MiB of artifacts; %d more bytes pass its quota of %d MiB: "+
		"close sessions you are done with (their artifacts are forgotten --artifact-retention after), or ask an admin to raise it",
		ErrQuotaExceeded, errArtifactQuota, owner, float64(used)/(1<<20), n, a.cfg.ArtifactQuotaMiB)
}

// quotaLeft is the room under owner's quota, its reservations taken
// (negative: over it; math.MaxInt64 without a quota).
func (a *App) quotaLeft(owner string) (int64, error) {
	if a.cfg.ArtifactQuotaMiB <= 0 {
		return math.MaxInt64, nil
	}
	a.quotas.mu.Lock()
	defer a.quotas.mu.Unlock()
	used, err := a.store.ArtifactBytes(owner)
	return a.cfg.ArtifactQuotaMiB<<20 - used - a.quotas.reserved[owner], err
}
