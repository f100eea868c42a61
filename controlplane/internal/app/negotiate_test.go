package app

import (
	"strings"
	"testing"

	"github.com/blendplane/blendplane/controlplane/internal/fleet"
	cpv1 "github.com/blendplane/blendplane/gen/blendplane/controlplane/v1"
)

// TestDiskLast: agents with no disk to offer a session's files come last,
// the order of the others kept.
func TestDiskLast(t *testing.T) {
	places := []fleet.Placement{{AgentID: "short-1", Resources: &cpv1.Resources{TempStorageMib: 1}},
		{AgentID: "a", Resources: &cpv1.Resources{TempStorageMib: 500}}, {AgentID: "short-2"},
		{AgentID: "b", Resources: &cpv1.Resources{TempStorageMib: 10240}}}
	diskLast(places)
	var got []string
	for _, p := range places {
		got = append(got, p.AgentID)
	}
	if strings.Join(got, " ") != "a b short-1 short-2" {
		t.Fatalf("order %v", got)
	}
}
