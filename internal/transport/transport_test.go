package transport

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestLoopback(t *testing.T) {
	for addr, want := range map[string]bool{
		"127.0.0.1:7400": true, "127.9.9.9:1": true, "[::1]:7400": true, "localhost:7400": true,
		"0.0.0.0:7400": false, "[::]:7400": false, "192.0.2.1:7400": false, "cp.studio.lan:7400": false,
		"127.0.0.1": false, "": false,
	} {
		if got := Loopback(addr); got != want {
			t.Errorf("Loopback(%q) = %v, want %v", addr, got, want)
		}
	}
}

// TestClientCreds: plain only on loopback, TLS with a CA, and a clear
// error rather than a token in the clear beyond loopback.
func TestClientCreds(t *testing.T) {
	dir := t.TempDir()
	notPEM := filepath.Join(dir, "not.pem")
	if err := os.WriteFile(notPEM, []byte("hello"), 0o644); err != nil {
		t.Fatal(err)
	}
	if c, err := ClientCreds("127.0.0.1:7400", ""); err != nil || c.Info().SecurityProtocol != "insecure" {
		t.Fatalf("loopback: %v %v", c, err)
	}
	if _, err := ClientCreds("127.0.0.1", ""); err == nil || !strings.Contains(err.Error(), "is not HOST:PORT") {
		t.Fatalf("an address without its port: %v", err) // it said "not on loopback"
	}
	if _, err := ClientCreds("192.0.2.1:7400", ""); err == nil || !strings.Contains(err.Error(), "--ca-file") {
		t.Fatalf("beyond loopback without a CA: %v", err)
	}
	for _, f := range []string{notPEM, filepath.Join(dir, "missing.pem")} {
		if _, err := ClientCreds("192.0.2.1:7400", f); err == nil {
			t.Fatalf("CA file %s accepted", f)
		}
	}
	if _, err := ClientCreds("127.0.0.1:7400", notPEM); err == nil {
		t.Fatal("a CA file that holds no certificate, on loopback, accepted")
	}
}

func TestBearer(t *testing.T) {
	md, err := Bearer("bpt_x").GetRequestMetadata(context.Background())
	if err != nil || md["authorization"] != "Bearer bpt_x" {
		t.Fatalf("%v %v", md, err)
	}
}
