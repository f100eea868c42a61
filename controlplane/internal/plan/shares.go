package plan

import (
	"errors"
	"runtime"
	"sync"

	"github.com/blendplane/blendplane/internal/panicguard"
)

// MinOperationShare is the fewest operations worth a goroutine of their own
// when a plan's operations are decoded, validated or checked in parallel.
const MinOperationShare = 2048

// Shares is how many shares InShares cuts n operations into: one per CPU,
// each of at least MinOperationShare, or one.
func Shares(n int) int { return max(1, min(runtime.GOMAXPROCS(0), n/MinOperationShare)) }

// InShares runs work over the operations [0, n) in shares, share w being
// [lo, hi): on one goroutine each when there are several, at once on the
// caller's (whose handler recovers) when one covers them all. A share's
// panic, on a goroutine no handler's recovery reaches, is its error, named
// by what (a validator's bug, on args and schemas that come from outside,
// would take the daemon down). It returns the shares' errors, joined.
func InShares(n int, what string, work func(w, lo, hi int) error) error {
	k := Shares(n)
	if k == 1 {
		return work(0, 0, n)
	}
	errs := make([]error, k)
	var wg sync.WaitGroup
	for w := range k {
		wg.Go(func() {
			defer panicguard.Catch(what, &errs[w])
			errs[w] = work(w, w*n/k, (w+1)*n/k)
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}
