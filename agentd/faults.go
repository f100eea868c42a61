//go:build faults

package agentd

import (
	"os"
	"strings"
)

// testFaults reads BLENDPLANE_TEST_FAULTS (comma separated, e.g. "undo"):
// fault injection on the real code path, compiled only into test builds
// (go build -tags faults; the e2e tests build such an agentd for their
// fault tests). A production agentd ignores the variable (nofaults.go).
func testFaults() []string {
	var faults []string
	for _, f := range strings.Split(os.Getenv("BLENDPLANE_TEST_FAULTS"), ",") {
		if f = strings.TrimSpace(f); f != "" {
			faults = append(faults, f)
		}
	}
	return faults
}
