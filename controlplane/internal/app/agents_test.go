package app

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"testing"

	"github.com/blendplane/blendplane/controlplane/internal/auth"
	"github.com/blendplane/blendplane/controlplane/internal/fleet"
	cpv1 "github.com/blendplane/blendplane/gen/blendplane/controlplane/v1"
)

// TestCertificateRequestHoldsItsPlace: an agent issued a certificate joins
// the fleet only at its next registration, but holds its place under its
// principal's agent limit from the request on: another agent of the
// principal is refused meanwhile (QUOTA_EXCEEDED), and the first one joins.
func TestCertificateRequestHoldsItsPlace(t *testing.T) {
	a := newTestApp(t)
	ca, _, err := auth.LoadOrCreateCA(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	a.ca = ca
	a.fleet.Limit(fleet.Limits{AgentsPerPrincipal: 1, RegistriesPerPrincipal: registriesPerPrincipal})
	who := Principal{Name: "studio-agents", Scopes: []string{auth.ScopeAgent}}
	register := func(id string, csr []byte) (*cpv1.RegisterAgentResponse, error) {
		return a.RegisterAgent(context.Background(), who, &cpv1.RegisterAgentRequest{AgentId: id, Address: "127.0.0.1:1", CertificateRequest: csr})
	}
	if resp, err := register("agent-1", certificateRequest(t, "agent-1")); err != nil || len(resp.GetCertificate()) == 0 {
		t.Fatalf("agent-1's certificate request: %v %v", resp, err)
	}
	if _, err := register("agent-2", nil); !errors.Is(err, ErrQuotaExceeded) {
		t.Fatalf("another agent while agent-1 holds the principal's one place: %v", err)
	}
	if _, err := register("agent-1", nil); err != nil {
		t.Fatalf("agent-1 with its certificate: %v", err)
	}
}

// certificateRequest is a certificate request for agentID as agentd makes
// it: ECDSA P-256, CommonName the agent id, PEM.
func certificateRequest(t *testing.T, agentID string) []byte {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{Subject: pkix.Name{CommonName: agentID}}, key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der})
}
