package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// TestTypeScriptClient runs the TypeScript client's tests
// (clients/typescript/test, Node 22's test runner, the packages `make
// clients` installed) against a live control plane and agent on the
// default policy, as admin.
func TestTypeScriptClient(t *testing.T) {
	node := filepath.Join(repoRoot(), ".clients", "node", "node_modules", ".bin", "node")
	if _, err := os.Stat(filepath.Join(repoRoot(), "clients", "typescript", "node_modules")); err != nil {
		t.Fatalf("clients/typescript has no node_modules: run `make clients`")
	}
	c := startClusterOpts(t, clusterOpts{policy: defaultPolicy})
	cmd := exec.Command(node, "--test", "test/client.test.ts")
	cmd.Dir = filepath.Join(repoRoot(), "clients", "typescript")
	cmd.Env = append(os.Environ(), "BLENDPLANE_ADDR="+c.cpAddr, "BLENDPLANE_TOKEN_FILE="+c.adminTokenFile())
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("node --test: %v\n%s", err, out)
	}
	t.Logf("%s", out)
}
