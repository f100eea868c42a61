package agentd

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"
)

// The agent's identity on disk, in its data dir: its key (made once, mode
// 0600), the certificate the control plane issued for it and the control
// plane's CA, which signs both that certificate and the control plane's
// client certificate, the only one AgentService accepts.
const (
	keyFile  = "agent-key.pem"
	certFile = "agent-cert.pem"
	caFile   = "ca.pem"
	// controlPlaneName is the CommonName of the control plane's client
	// certificate.
	controlPlaneName = "controlplane"
	// renewBefore asks for a new certificate this long before it expires.
	renewBefore = 30 * 24 * time.Hour
)

// identity is the agent's key and, once registered, its certificate.
type identity struct {
	dir     string
	agentID string
	key     *ecdsa.PrivateKey

	mu   sync.Mutex
	cert *tls.Certificate
	leaf *x509.Certificate
	cas  *x509.CertPool
	// issued: the certificate was issued to this run. The first
	// registration of every run asks for one, so that an agent whose
	// control plane has a new CA (a new data dir) is not locked out.
	issued bool
}

// loadIdentity reads (or makes) the agent's key and reads the certificate
// and CA it was issued, if any.
func loadIdentity(dir, agentID string) (*identity, error) {
	id := &identity{dir: dir, agentID: agentID}
	path := filepath.Join(dir, keyFile)
	raw, err := os.ReadFile(path)
	switch {
	case errors.Is(err, os.ErrNotExist):
		if id.key, err = ecdsa.GenerateKey(elliptic.P256(), rand.Reader); err != nil {
			return nil, err
		}
		der, err := x509.MarshalECPrivateKey(id.key)
		if err != nil {
			return nil, err
		}
		if err := writeFile(path, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}), 0o600); err != nil {
			return nil, err
		}
	case err != nil:
		return nil, err
	default:
		if fi, err := os.Stat(path); err == nil && fi.Mode().Perm()&0o077 != 0 {
			return nil, fmt.Errorf("%s is readable by others (mode %v): it is the agent's private key; chmod 600 it", path, fi.Mode().Perm())
		}
		block, _ := pem.Decode(raw)
		if block == nil {
			return nil, fmt.Errorf("%s: no PEM key", path)
		}
		if id.key, err = x509.ParseECPrivateKey(block.Bytes); err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
	}
	certPEM, err1 := os.ReadFile(filepath.Join(dir, certFile))
	caPEM, err2 := os.ReadFile(filepath.Join(dir, caFile))
	if err1 == nil && err2 == nil {
		if err := id.install(certPEM, caPEM); err != nil {
			return nil, err
		}
		id.issued = false
	}
	return id, nil
}

// request is a certificate request for the agent's key, or nil when this
// run's certificate is good for a while yet.
func (id *identity) request() ([]byte, error) {
	id.mu.Lock()
	leaf, issued := id.leaf, id.issued
	id.mu.Unlock()
	if issued && time.Until(leaf.NotAfter) > renewBefore {
		return nil, nil
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{
		Subject: pkix.Name{CommonName: id.agentID}}, id.key)
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der}), nil
}

// install checks an issued certificate against the agent's key and id,
// keeps it and the CA, and saves both.
func (id *identity) install(certPEM, caPEM []byte) error {
	cert, err := tls.X509KeyPair(certPEM, keyPEM(id.key))
	if err != nil {
		return fmt.Errorf("issued certificate: %w", err)
	}
	leaf, err := x509.ParseCertificate(cert.Certificate[0])
	if err != nil {
		return fmt.Errorf("issued certificate: %w", err)
	}
	if leaf.Subject.CommonName != id.agentID {
		return fmt.Errorf("issued certificate is for %q, not agent %q", leaf.Subject.CommonName, id.agentID)
	}
	cas := x509.NewCertPool()
	if !cas.AppendCertsFromPEM(caPEM) {
		return errors.New("no CA certificate in the control plane's answer")
	}
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: cas, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
		return fmt.Errorf("issued certificate: %w", err)
	}
	if err := writeFile(filepath.Join(id.dir, certFile), certPEM, 0o644); err != nil {
		return err
	}
	if err := writeFile(filepath.Join(id.dir, caFile), caPEM, 0o644); err != nil {
		return err
	}
	id.mu.Lock()
	id.cert, id.leaf, id.cas, id.issued = &cert, leaf, cas, true
	id.mu.Unlock()
	return nil
}

// serverTLS serves AgentService only to the control plane: a client
// certificate from the CA with the control plane's name. Until the agent
// has a certificate, handshakes fail (the control plane places nothing on
// an agent before its registration, which brings the certificate).
func (id *identity) serverTLS() *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS13,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			id.mu.Lock()
			cert, cas := id.cert, id.cas
			id.mu.Unlock()
			if cert == nil {
				return nil, errors.New("agent not registered yet: no certificate")
			}
			return &tls.Config{
				MinVersion:       tls.VersionTLS13,
				Certificates:     []tls.Certificate{*cert},
				ClientAuth:       tls.RequireAndVerifyClientCert,
				ClientCAs:        cas,
				VerifyConnection: verifyControlPlane,
			}, nil
		},
	}
}

// verifyControlPlane admits only the control plane's client certificate:
// verified against the CA, named controlPlaneName, for client use only (an
// agent's certificate, for server and client, never drives another agent).
func verifyControlPlane(cs tls.ConnectionState) error {
	if len(cs.VerifiedChains) == 0 || len(cs.VerifiedChains[0]) == 0 {
		return errors.New("only the control plane may call AgentService: no verified client certificate")
	}
	leaf := cs.VerifiedChains[0][0]
	server := slices.Contains(leaf.ExtKeyUsage, x509.ExtKeyUsageServerAuth)
	if leaf.Subject.CommonName != controlPlaneName || server || !slices.Contains(leaf.ExtKeyUsage, x509.ExtKeyUsageClientAuth) {
		return fmt.Errorf("only the control plane may call AgentService, not %q", leaf.Subject.CommonName)
	}
	return nil
}

func keyPEM(key *ecdsa.PrivateKey) []byte {
	der, _ := x509.MarshalECPrivateKey(key)
	return pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der})
}

// writeFile writes a file atomically (temp file, fsync, rename).
func writeFile(path string, data []byte, mode os.FileMode) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+"-")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if err := tmp.Chmod(mode); err != nil {
		tmp.Close()
		return err
	}
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}
