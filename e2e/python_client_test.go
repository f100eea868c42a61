package e2e

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
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

// TestClientsOverTLS: both clients reach a control plane beyond loopback
// over TLS with its CA, and are refused without it.
func TestClientsOverTLS(t *testing.T) {
	host := networkAddress(t)
	py := mcpPython(t)
	c := startClusterOpts(t, clusterOpts{host: host})
	env := append(os.Environ(), "BLENDPLANE_ADDR="+c.cpAddr, "BLENDPLANE_TOKEN_FILE="+c.adminTokenFile(), "BLENDPLANE_CA_FILE="+c.caFile())
	script := `import os, blendplane
with blendplane.connect(os.environ["BLENDPLANE_ADDR"], token_file=os.environ["BLENDPLANE_TOKEN_FILE"], ca_file=os.environ["BLENDPLANE_CA_FILE"]) as bp:
    sid = bp.negotiate().session_id
    plan, receipts = bp.run(sid, [{"operation_id": "a", "tool_name": "object.create", "args": {"type": "cube"}}])
    assert plan.state == 4, plan  # STATE_SUCCEEDED
    print("python", sid, len(receipts))
try:
    blendplane.connect(os.environ["BLENDPLANE_ADDR"], token_file=os.environ["BLENDPLANE_TOKEN_FILE"]).negotiate()
    raise SystemExit("plaintext reached a TLS control plane")
except blendplane.BlendplaneError as e:
    print("plaintext refused:", e.code.name)
`
	cmd := exec.Command(py, "-c", script)
	cmd.Env = env
	if out, err := cmd.CombinedOutput(); err != nil || !strings.Contains(string(out), "python s-") || !strings.Contains(string(out), "plaintext refused") {
		t.Fatalf("python over TLS: %v\n%s", err, out)
	}
	node := filepath.Join(repoRoot(), ".clients", "node", "node_modules", ".bin", "node")
	ts := `import { connect } from "./src/client.ts";
const bp = connect(process.env.BLENDPLANE_ADDR, { tokenFile: process.env.BLENDPLANE_TOKEN_FILE, caFile: process.env.BLENDPLANE_CA_FILE });
const c = await bp.negotiate();
const { plan } = await bp.run(c.sessionId, [{ operation_id: "a", tool_name: "object.create", args: { type: "cube" } }]);
if (plan.state !== 4) throw new Error("plan " + plan.state);
console.log("typescript", c.sessionId);
`
	cmd = exec.Command(node, "--input-type=module", "-e", ts)
	cmd.Dir = filepath.Join(repoRoot(), "clients", "typescript")
	cmd.Env = env
	if out, err := cmd.CombinedOutput(); err != nil || !strings.Contains(string(out), "typescript s-") {
		t.Fatalf("typescript over TLS: %v\n%s", err, out)
	}
}

// TestPythonClientResumesAcrossRestart: the Python client follows a plan's
// receipts while the control plane is restarted under it; its iterator
// opens the stream again after the last receipt it gave and ends with every
// receipt once, in order.
func TestPythonClientResumesAcrossRestart(t *testing.T) {
	py := mcpPython(t)
	c := startCluster(t)
	script := `import os, sys, blendplane
bp = blendplane.connect(os.environ["BLENDPLANE_ADDR"], token_file=os.environ["BLENDPLANE_TOKEN_FILE"])
sid = bp.negotiate().session_id
ops = [{"operation_id": "c%03d" % i, "tool_name": "object.create", "args": {"type": "cube", "name": "R%03d" % i, "location": [i, 0, 0]}} for i in range(600)]
plan = bp.submit(sid, ops, request_id="resume")
seqs = []
for r in bp.receipts("resume", retry_for=120):
    seqs.append(r.sequence)
    if len(seqs) == 20:
        print("READY", flush=True)
        sys.stdin.readline()  # the control plane is restarted meanwhile
assert seqs == list(range(1, 601)), seqs[:30]
print("DONE", bp.plan("resume").state, flush=True)
`
	cmd := exec.Command(py, "-c", script)
	cmd.Env = append(os.Environ(), "BLENDPLANE_ADDR="+c.cpAddr, "BLENDPLANE_TOKEN_FILE="+c.adminTokenFile())
	stdin, _ := cmd.StdinPipe()
	var out syncBuffer
	stdout, _ := cmd.StdoutPipe()
	cmd.Stderr = &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := bufio.NewScanner(stdout)
	if !lines.Scan() || lines.Text() != "READY" {
		t.Fatalf("the client did not start following: %q\n%s", lines.Text(), out.String())
	}
	c.cp.stop(t, syscall.SIGTERM)
	c.cp = startDaemon(t, "controlplane", c.cp.cmd.Args[1:]...)
	stdin.Write([]byte("go\n"))
	var last string
	for lines.Scan() {
		last = lines.Text()
	}
	if err := cmd.Wait(); err != nil || last != "DONE 4" { // 4: STATE_SUCCEEDED
		t.Fatalf("the client after the restart: %v, last line %q\n%s", err, last, out.String())
	}
}
