package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// TestPythonClient runs the Python client's tests (clients/python/tests,
// pytest from `make clients`) against a live control plane and agent on the
// default policy, as admin.
func TestPythonClient(t *testing.T) {
	py := mcpPython(t)
	c := startClusterOpts(t, clusterOpts{policy: defaultPolicy})
	cmd := exec.Command(py, "-m", "pytest", "-q", "-p", "no:cacheprovider", filepath.Join(repoRoot(), "clients", "python", "tests"))
	cmd.Dir = repoRoot()
	cmd.Env = append(os.Environ(), "BLENDPLANE_ADDR="+c.cpAddr, "BLENDPLANE_TOKEN_FILE="+c.adminTokenFile())
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("pytest: %v\n%s", err, out)
	}
	t.Logf("%s", out)
}
