package metrics

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	cpv1 "github.com/blendplane/blendplane/gen/blendplane/controlplane/v1"
)

// A commit's receipts are counted by tool and status, and timed by tool,
// whatever order their runs come in.
func TestCommitted(t *testing.T) {
	m := New()
	r := func(tool string, status cpv1.Receipt_Status, micros int64) *cpv1.Receipt {
		return &cpv1.Receipt{ToolName: tool, Status: status, DurationMicros: micros}
	}
	ok, failed := cpv1.Receipt_STATUS_SUCCEEDED, cpv1.Receipt_STATUS_FAILED
	m.Committed(&cpv1.Plan{State: cpv1.Plan_STATE_SUCCEEDED}, []*cpv1.Receipt{
		r("object.create", ok, 100), r("object.create", ok, 200), r("object.delete", failed, 0),
		r("object.create", ok, 300), r("object.create", failed, 50),
	}, true)
	for _, c := range []struct {
		tool, status string
		want         float64
	}{{"object.create", "succeeded", 3}, {"object.create", "failed", 1}, {"object.delete", "failed", 1}} {
		if got := testutil.ToFloat64(m.operations.WithLabelValues(c.tool, c.status)); got != c.want {
			t.Errorf("%s %s: %v, want %v", c.tool, c.status, got, c.want)
		}
	}
	if n := testutil.CollectAndCount(m.duration); n != 1 { // object.delete took no time: not timed
		t.Errorf("%d tools timed, want 1", n)
	}
	if got := testutil.ToFloat64(m.receipts); got != 5 {
		t.Errorf("receipts %v", got)
	}
	if got := testutil.ToFloat64(m.plans.WithLabelValues("succeeded")); got != 1 {
		t.Errorf("plans %v", got)
	}
}
