package auth

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"testing"
	"time"
)

// newTestCA creates a CA in a fresh directory.
func newTestCA(t testing.TB) *CA {
	t.Helper()
	ca, created, err := LoadOrCreateCA(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if !created {
		t.Fatal("a CA in an empty dir was not created")
	}
	return ca
}

// agentRequest makes a key and a certificate request for it the way agentd
// does (agentd/identity.go), which does not import this package: ECDSA
// P-256, CommonName = the agent id, PEM "CERTIFICATE REQUEST"; the key PEM
// is SEC 1 ("EC PRIVATE KEY"), as agentd stores it.
func agentRequest(t testing.TB, agentID string) (csrPEM, keyPEM []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return requestFor(t, key, &x509.CertificateRequest{Subject: pkix.Name{CommonName: agentID}}), ecKeyPEM(t, key)
}

func requestFor(t testing.TB, key crypto.Signer, tmpl *x509.CertificateRequest) []byte {
	t.Helper()
	der, err := x509.CreateCertificateRequest(rand.Reader, tmpl, key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der})
}

func ecKeyPEM(t testing.TB, key *ecdsa.PrivateKey) []byte {
	t.Helper()
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der})
}

// agentCert is an agent's TLS certificate, issued by ca through SignAgent.
func agentCert(t testing.TB, ca *CA, agentID string) tls.Certificate {
	t.Helper()
	csr, keyPEM := agentRequest(t, agentID)
	certPEM, err := ca.SignAgent(csr, agentID, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	return cert
}

func parsePEMCert(t testing.TB, certPEM []byte) *x509.Certificate {
	t.Helper()
	block, err := onePEMBlock(certPEM)
	if err != nil {
		t.Fatal(err)
	}
	if block.Type != "CERTIFICATE" {
		t.Fatalf("PEM block %q", block.Type)
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return cert
}
