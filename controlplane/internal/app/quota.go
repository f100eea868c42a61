package app

import (
	"errors"
	"fmt"
	"math"
	"sync"

	"github.com/blendplane/blendplane/controlplane/internal/store"
)

// quotas holds the bytes being added to each principal's artifacts right
// now (uploads streaming in, receipts' files and frames being fetched), so
// that calls at once cannot each take the same room under its quota
// (Config.ArtifactQuotaMiB). What counts is the size of each version (a
// name and its content) of a principal's sessions' files that the control
// plane keeps, once, until an expiry forgets it (store.ArtifactBytes).
type quotas struct {
	mu       sync.Mutex
	reserved map[string]int64
	handed   map[string]handed // receipt → room its files took, until collect records them
}

type handed struct {
	owner string
	n     int64
}

// receiptKey names a receipt for a hand-over.
func receiptKey(ref store.PlanRef, operationID string) string {
	return ref.Owner + "\x00" + ref.RequestID + "\x00" + operationID
}

// handOver keeps n reserved bytes of owner's until collect records the
// receipt's files (takeBack): a distributed render's frames, fetched
// before the receipt exists.
func (a *App) handOver(key, owner string, n int64) {
	if a.cfg.ArtifactQuotaMiB <= 0 || n <= 0 {
		return
	}
	a.quotas.mu.Lock()
	defer a.quotas.mu.Unlock()
	h := a.quotas.handed[key]
	a.quotas.handed[key] = handed{owner: owner, n: h.n + n}
}

// takeBack gives back what handOver kept for a receipt.
func (a *App) takeBack(key string) {
	a.quotas.mu.Lock()
	h, ok := a.quotas.handed[key]
	delete(a.quotas.handed, key)
	a.quotas.mu.Unlock()
	if ok {
		a.unreserve(h.owner, h.n)
	}
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

// overQuota is the error for n more bytes (past what the caller reserved
// already) that do not fit under owner's quota.
func (a *App) overQuota(owner string, n int64) error {
	used, _ := a.store.ArtifactBytes(owner)
	a.quotas.mu.Lock()
	reserved := a.quotas.reserved[owner]
	a.quotas.mu.Unlock()
	taking := ""
	if reserved > 0 {
		taking = fmt.Sprintf(" (and %s more that uploads and fetches under way are taking)", bytesText(reserved))
	}
	hint := "ask an admin to raise it (without --artifact-retention, nothing a principal keeps is forgotten)"
	if a.cfg.ArtifactRetention > 0 {
		hint = fmt.Sprintf("close sessions you are done with (their artifacts are forgotten %s after), or ask an admin to raise it", a.cfg.ArtifactRetention)
	}
	more := fmt.Sprintf("%d bytes more would pass its quota of %d MiB", n, a.cfg.ArtifactQuotaMiB)
	if n >= 1<<10 {
		more = fmt.Sprintf("%d bytes (%s) more would pass its quota of %d MiB", n, bytesText(n), a.cfg.ArtifactQuotaMiB)
	}
	if n <= 0 {
		more = fmt.Sprintf("its quota is %d MiB", a.cfg.ArtifactQuotaMiB)
	}
	return fmt.Errorf("%w (%w): %q keeps %s of artifacts%s; %s: %s",
		ErrQuotaExceeded, errArtifactQuota, owner, bytesText(used), taking, more, hint)
}

// bytesText writes a size in the unit that shows it: 38100 bytes is
// "37.2 KiB", not "0.0 MiB".
func bytesText(n int64) string {
	switch {
	case n < 1<<10:
		return fmt.Sprintf("%d bytes", n)
	case n < 1<<20:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
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
