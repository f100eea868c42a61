package contract

import (
	"errors"
	"testing"

	"google.golang.org/protobuf/proto"

	cpv1 "github.com/blendplane/blendplane/gen/blendplane/controlplane/v1"
)

func TestRange(t *testing.T) {
	cases := []struct {
		rng     string
		version string
		want    bool
	}{
		{"", "4.5.15", true},
		{">=4.2", "4.5.15", true},
		{">=4.2", "3.4.1", false},
		{">=3.4,<4.0", "3.4.1", true},
		{">=3.4,<4.0", "4.0.0", false},
		{"<4", "3.99", true},
		{"==4.5.15", "4.5.15", true},
		{"=4.5", "4.5.0", true},
		{">4.5", "4.5.0", false},
	}
	for _, c := range cases {
		r, err := ParseRange(c.rng)
		if err != nil {
			t.Fatalf("%q: %v", c.rng, err)
		}
		if got := r.Contains(c.version); got != c.want {
			t.Errorf("%q contains %s = %v, want %v", c.rng, c.version, got, c.want)
		}
	}
	for _, bad := range []string{"4.5", "~4", ">=x", ">=1.2.3.4", ">=4,"} {
		if _, err := ParseRange(bad); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
}

func FuzzParseRange(f *testing.F) {
	for _, s := range []string{"", ">=4.2", ">=3.4,<4.0", "==4.5.15", "<4", "x"} {
		f.Add(s, "4.5.15")
	}
	f.Fuzz(func(t *testing.T, rng, version string) {
		r, err := ParseRange(rng)
		if err != nil {
			return
		}
		r.Contains(version) // never panics
	})
}

func runtime() *cpv1.Runtime {
	return &cpv1.Runtime{
		RuntimeId:      "rt",
		BlenderProfile: &cpv1.BlenderProfile{Version: "4.5.15"},
		Registry: &cpv1.ToolRegistry{Version: "v1", Fingerprint: "fp", Tools: []*cpv1.ToolDefinition{
			{Name: "object.create", Version: "1.0.0", SafetyMode: ModeHeadlessSafe},
			{Name: "python.exec", Version: "1.0.0", SafetyMode: ModeUnsafeOps},
			{Name: "ui.highlight", Version: "1.0.0", SafetyMode: ModeUIAssisted},
		}},
	}
}

func offer() Offer {
	return Offer{
		Runtime: runtime(), Resources: &cpv1.Resources{MemoryMib: 8000, TempStorageMib: 1000},
		MaxOperationsPerPlan: 1000, MaxPayloadBytes: 1 << 20, MaxArtifactBytes: 1 << 30,
		MinToolTimeBudgetMs: 1000, MaxToolTimeBudgetMs: 60000, DefaultToolBudgetMs: 30000,
		MacroRegistry: &cpv1.MacroRegistryRef{Version: "m1", Fingerprint: "mfp"},
	}
}

func request(flags ...string) *cpv1.NegotiateRequest {
	return &cpv1.NegotiateRequest{ContractVersion: Version, HostProfile: &cpv1.HostProfile{ClientName: "t", FeatureFlags: flags}}
}

func TestRefusals(t *testing.T) {
	macros := offer().MacroRegistry
	cases := []struct {
		name  string
		mod   func(*cpv1.NegotiateRequest)
		field string
	}{
		{"version", func(r *cpv1.NegotiateRequest) { r.ContractVersion = "2.0.0" }, "contract_version"},
		{"flag", func(r *cpv1.NegotiateRequest) { r.HostProfile.FeatureFlags = []string{"unsafe_ops", "time_travel"} }, "host_profile.feature_flags"},
		{"range", func(r *cpv1.NegotiateRequest) { r.BlenderVersionRange = "~4" }, "blender_version_range"},
		{"macros", func(r *cpv1.NegotiateRequest) { r.MacroRegistryRef = &cpv1.MacroRegistryRef{Fingerprint: "other"} }, "macro_registry_ref"},
		{"audit sink", func(r *cpv1.NegotiateRequest) { r.Audit = &cpv1.AuditPolicy{Sinks: []string{"splunk"}} }, "audit.sinks"},
	}
	for _, c := range cases {
		req := request()
		c.mod(req)
		var v *Violation
		if err := CheckRequest(req, macros); !errors.As(err, &v) || v.Field != c.field {
			t.Errorf("%s: %v, want a violation of %s", c.name, err, c.field)
		}
	}
	req := request()
	req.BlenderVersionRange = "<4"
	if v := Fits(req, runtime()); v == nil || v.Field != "blender_version_range" {
		t.Errorf("version range: %v", v)
	}
	req = request()
	req.ToolRegistryRef = &cpv1.ToolRegistryRef{Fingerprint: "nope"}
	if v := Fits(req, runtime()); v == nil || v.Field != "tool_registry_ref" {
		t.Errorf("registry ref: %v", v)
	}
	for _, c := range []struct {
		field string
		cons  *cpv1.Constraints
	}{
		{"constraints.max_memory_mib", &cpv1.Constraints{MaxMemoryMib: 9000}},
		// Enforced on the session's Blender, which could not even start.
		{"constraints.max_memory_mib", &cpv1.Constraints{MaxMemoryMib: 64}},
		{"constraints.temp_storage_mib", &cpv1.Constraints{TempStorageMib: 2000}},
		{"constraints.tool_time_budget_ms", &cpv1.Constraints{ToolTimeBudgetMs: 120000}},
		// A budget of 1 ms would time out every call, each timeout
		// restarting the session's Blender.
		{"constraints.tool_time_budget_ms", &cpv1.Constraints{ToolTimeBudgetMs: 1}},
		{"constraints.tool_time_budget_ms", &cpv1.Constraints{ToolTimeBudgetMs: 999}},
	} {
		req := request()
		req.Constraints = c.cons
		var v *Violation
		if _, err := Build(req, offer()); !errors.As(err, &v) || v.Field != c.field {
			t.Errorf("%s %v: %v", c.field, c.cons, err)
		}
	}
}

func TestBuild(t *testing.T) {
	req := request("unsafe_ops")
	req.Limits = &cpv1.Limits{MaxOperationsPerPlan: 50, MaxPayloadBytes: 1 << 30, ToolSurfaceCap: 100, MaxConcurrentCalls: 8, MaxArtifactBytes: 1 << 40}
	req.Constraints = &cpv1.Constraints{ToolTimeBudgetMs: 5000}
	c, err := Build(req, offer())
	if err != nil {
		t.Fatal(err)
	}
	l := c.GetLimits()
	if l.GetMaxOperationsPerPlan() != 50 || l.GetMaxPayloadBytes() != 1<<20 || l.GetToolSurfaceCap() != 35 || l.GetMaxConcurrentCalls() != 1 ||
		l.GetMaxArtifactBytes() != 1<<30 {
		t.Errorf("limits not tightened: %v", l)
	}
	if got := c.GetCapabilities().GetTools(); len(got) != 2 || got[1] != "python.exec" {
		t.Errorf("callable tools %v: want object.create and python.exec (unsafe_ops negotiated), never ui.highlight", got)
	}
	if c.GetConstraints().GetToolTimeBudgetMs() != 5000 || c.GetConstraints().GetMaxMemoryMib() != 8000 || !c.GetUiOptional() {
		t.Errorf("constraints %v", c.GetConstraints())
	}
	c.SessionId = "s1"
	Seal(c)
	again, _ := Build(req, offer())
	again.SessionId = "s1"
	Seal(again)
	if !proto.Equal(c, again) || c.GetFingerprints()["contract"] == "" {
		t.Errorf("negotiation is not deterministic")
	}
	plain, _ := Build(request(), offer())
	if got := plain.GetCapabilities().GetTools(); len(got) != 1 {
		t.Errorf("without unsafe_ops the callable tools are %v", got)
	}
}
