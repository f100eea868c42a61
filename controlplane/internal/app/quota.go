package app

import (
	"fmt"
	"math"
)

// artifactRoom is how many more bytes of artifacts the principal owner may
// keep under its quota (Config.ArtifactQuotaMiB; math.MaxInt64 without
// one): what its sessions' artifact records declare counts, every version,
// until an expiry forgets them.
func (a *App) artifactRoom(owner string) (int64, error) {
	if a.cfg.ArtifactQuotaMiB <= 0 {
		return math.MaxInt64, nil
	}
	used, err := a.store.ArtifactBytes(owner)
	if err != nil {
		return 0, err
	}
	return a.cfg.ArtifactQuotaMiB<<20 - used, nil
}

// overQuota says how far over its quota owner's artifacts are, for an error
// message.
func (a *App) overQuota(owner string, size int64) error {
	used, _ := a.store.ArtifactBytes(owner)
	return fmt.Errorf("%w: %q keeps %.1f MiB of artifacts; %d more bytes pass its quota of %d MiB (--artifact-quota-mib): "+
		"close sessions you are done with (their artifacts are forgotten --artifact-retention after), or ask an admin to raise it",
		ErrQuotaExceeded, owner, float64(used)/(1<<20), size, a.cfg.ArtifactQuotaMiB)
}
