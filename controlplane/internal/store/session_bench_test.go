package store

import (
	"fmt"
	"testing"

	cpv1 "github.com/blendplane/blendplane/gen/blendplane/controlplane/v1"
)

// BenchmarkSessionReads reads a session with a contract of a negotiated
// session's size (35 tools, its profiles and fingerprints) whole (Session)
// and in the parts dispatch reads per plan (Placement, Terms).
func BenchmarkSessionReads(b *testing.B) {
	s, _ := openTest(b)
	sess := testSession("alice", "s1")
	c := sess.Info.Contract
	c.Capabilities = &cpv1.Capabilities{Macros: true, AuditLog: true, FeatureFlags: []string{"progress_events"}}
	for i := range 35 {
		c.Capabilities.Tools = append(c.Capabilities.Tools, fmt.Sprintf("family%d.tool%d", i%9, i))
	}
	c.HostProfile = &cpv1.HostProfile{ClientName: "bench", ClientVersion: "1.0", Capabilities: []string{"a", "b"}, FeatureFlags: []string{"progress_events"}}
	c.BlenderProfile = &cpv1.BlenderProfile{Version: "4.5.0", BuildHash: "abcdef", Platform: "linux", Runtime: "bpy", PythonVersion: "3.11", Features: []string{"eevee", "cycles", "geometry_nodes"}}
	c.Constraints = &cpv1.Constraints{MaxMemoryMib: 4096, ToolTimeBudgetMs: 30000, TempStorageMib: 1024, SafetyRails: []string{"headless", "sandboxed_paths", "no_unsafe_ops"}}
	c.Limits = &cpv1.Limits{MaxOperationsPerPlan: 100000, MaxPayloadBytes: 64 << 20, ToolSurfaceCap: 35, MaxConcurrentCalls: 4}
	c.Audit = &cpv1.AuditPolicy{Verbosity: "minimal", Sinks: []string{"controlplane"}}
	c.Fingerprints = map[string]string{}
	for _, k := range []string{"tool_registry", "macro_registry", "schemas", "contract"} {
		c.Fingerprints[k] = fmt.Sprintf("%064x", len(k))
	}
	if err := s.PutSession(sess, testRegistry); err != nil {
		b.Fatal(err)
	}
	b.Run("Session", func(b *testing.B) {
		b.ReportAllocs()
		for range b.N {
			if _, err := s.Session("s1"); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("PlacementTerms", func(b *testing.B) {
		b.ReportAllocs()
		for range b.N {
			if _, err := s.Placement("s1"); err != nil {
				b.Fatal(err)
			}
			if _, err := s.Terms("s1"); err != nil {
				b.Fatal(err)
			}
		}
	})
}
