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
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
	"time"
)

// maxCSRBytes bounds a certificate request: RegisterAgentRequest's
// certificate_request field allows 8192 bytes.
const maxCSRBytes = 8192

// ServerCert issues a certificate for the control plane's own listener,
// CommonName ControlPlaneName, valid for validity (at most until the CA
// expires). Each host becomes an IP SAN if it is an IP address and a DNS
// SAN otherwise; "localhost", 127.0.0.1 and ::1 are always in. Empty hosts
// and unspecified addresses (0.0.0.0, ::) are skipped: they come from
// listen addresses such as ":8443", which name no host to dial.
func (ca *CA) ServerCert(hosts []string, validity time.Duration) (tls.Certificate, error) {
	ips, names, err := subjectAltNames(append([]string{"localhost", "127.0.0.1", "::1"}, hosts...))
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("server certificate: %w", err)
	}
	return ca.issue(&x509.Certificate{
		Subject:     pkix.Name{CommonName: ControlPlaneName},
		DNSNames:    names,
		IPAddresses: ips,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}, validity)
}

// ClientCert issues a client certificate with CommonName name (a
// [ValidName]), valid for validity (at most until the CA expires). The
// control plane dials agents with ClientCert(ControlPlaneName, …).
func (ca *CA) ClientCert(name string, validity time.Duration) (tls.Certificate, error) {
	if !ValidName(name) {
		return tls.Certificate{}, fmt.Errorf("client certificate: %q is not a valid name", name)
	}
	return ca.issue(&x509.Certificate{
		Subject:     pkix.Name{CommonName: name},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}, validity)
}

// agentNameSuffix ends the one DNS SAN of every agent certificate
// ([AgentServerName]). Clients trust the same CA for the control plane's
// own listener, so an agent certificate must never name a host by which
// anyone reaches the control plane (or anything else): agent ids and
// addresses are what agents claim for themselves. ".invalid" is a
// top-level domain reserved by RFC 2606 (and RFC 6761) never to resolve,
// so no client ever dials a name under it, and no control plane listener
// is ever reached by one: a certificate for "<id>.agent.blendplane.invalid"
// is good only for the control plane dialing that agent with that exact
// ServerName.
const agentNameSuffix = ".agent.blendplane.invalid"

// AgentServerName is the TLS server name of agent agentID: the agent
// certificate's only DNS SAN, and the ServerName the control plane dials
// the agent with. It is the id in lower case (TLS names are
// case-insensitive; crypto/x509 matches them so) under the reserved
// agentNameSuffix ".agent.blendplane.invalid".
func AgentServerName(agentID string) string {
	return strings.ToLower(agentID) + agentNameSuffix
}

// SignAgent signs an agent's certificate request and returns the
// certificate, PEM-encoded. The request must be one PEM block "CERTIFICATE
// REQUEST" (at most 8192 bytes) with a valid signature, an ECDSA P-256 key
// and CommonName agentID. The certificate has CommonName agentID, exactly
// one DNS SAN, [AgentServerName](agentID), no IP SANs, ExtKeyUsage server
// and client, and is valid for validity (at most until the CA expires).
// Whatever else the request asks for (SANs, extensions) is ignored: the CA
// decides what an agent is.
//
// The SAN sits under the reserved ".invalid" top-level domain so that an
// agent certificate never names a real host: whatever id or address an
// agent claims, its certificate cannot pose as the control plane (or any
// other server) to clients that trust the same CA.
//
// The agent id must match RegisterAgentRequest.agent_id's pattern
// ^[a-zA-Z0-9_.:-]{1,128}$, must not be an IP address, must not be
// ControlPlaneName or "localhost" in any case, and must make a server name
// that is a DNS host name and that crypto/tls matches: ids such as "a:b",
// ".", "a..b" or with a dot-free run of more than 63 bytes are refused.
func (ca *CA) SignAgent(csrPEM []byte, agentID string, validity time.Duration) (certPEM []byte, err error) {
	if err := checkAgentID(agentID); err != nil {
		return nil, err
	}
	csr, err := parseCSR(csrPEM)
	if err != nil {
		return nil, fmt.Errorf("certificate request: %w", err)
	}
	if cn := csr.Subject.CommonName; cn != agentID {
		return nil, fmt.Errorf("certificate request is for %q, not agent %q", cn, agentID)
	}
	serverName := AgentServerName(agentID)
	leaf, err := ca.sign(&x509.Certificate{
		Subject:     pkix.Name{CommonName: agentID},
		DNSNames:    []string{serverName},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}, csr.PublicKey, validity, time.Now())
	if err != nil {
		return nil, err
	}
	// checkAgentID made sure the name is a DNS host name; this makes sure
	// crypto/tls matches it too, so a bad id is refused now rather than at
	// every dial.
	if err := leaf.VerifyHostname(serverName); err != nil {
		return nil, fmt.Errorf("agent id %q cannot make a TLS server name: %w", agentID, err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: leaf.Raw}), nil
}

// checkAgentID applies SignAgent's rules for agent ids.
func checkAgentID(id string) error {
	if len(id) == 0 || len(id) > 128 {
		return fmt.Errorf("agent id of %d bytes, want 1 to 128", len(id))
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '.' || c == ':' || c == '-') {
			return fmt.Errorf("agent id %q: want letters, digits, '_', '.', ':', '-'", id)
		}
	}
	if _, err := netip.ParseAddr(id); err == nil {
		return fmt.Errorf("agent id %q is an IP address; agents are dialed by id, which must be a name", id)
	}
	if strings.EqualFold(id, ControlPlaneName) || strings.EqualFold(id, "localhost") {
		return fmt.Errorf("agent id %q is reserved", id)
	}
	// The pattern lets through ids that make no DNS host name, such as
	// "a:b", "." or "a..b": crypto/x509 matches those only verbatim, and
	// other TLS stacks not at all.
	if name := AgentServerName(id); !validDNSName(name) {
		return fmt.Errorf("agent id %q cannot make a TLS server name: %q is not a DNS host name "+
			"(dot-separated labels of 1 to 63 letters, digits, '-' or '_')", id, name)
	}
	return nil
}

// parseCSR reads a certificate request as agentd makes it and checks its
// signature, which proves the agent holds the key.
func parseCSR(csrPEM []byte) (*x509.CertificateRequest, error) {
	if len(csrPEM) > maxCSRBytes {
		return nil, fmt.Errorf("%d bytes, at most %d", len(csrPEM), maxCSRBytes)
	}
	block, err := onePEMBlock(csrPEM)
	if err != nil {
		return nil, err
	}
	if block.Type != "CERTIFICATE REQUEST" {
		return nil, fmt.Errorf("PEM block %q, want CERTIFICATE REQUEST", block.Type)
	}
	csr, err := x509.ParseCertificateRequest(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("not a certificate request: %w", err)
	}
	if err := csr.CheckSignature(); err != nil {
		return nil, fmt.Errorf("bad signature: %w", err)
	}
	if pub, ok := csr.PublicKey.(*ecdsa.PublicKey); !ok || pub.Curve != elliptic.P256() {
		return nil, fmt.Errorf("a %s key, want ECDSA P-256", csr.PublicKeyAlgorithm)
	}
	return csr, nil
}

// issue makes a new ECDSA P-256 key and a certificate for it from tmpl.
func (ca *CA) issue(tmpl *x509.Certificate, validity time.Duration) (tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, err
	}
	leaf, err := ca.sign(tmpl, &key.PublicKey, validity, time.Now())
	if err != nil {
		return tls.Certificate{}, err
	}
	return tls.Certificate{Certificate: [][]byte{leaf.Raw}, PrivateKey: key, Leaf: leaf}, nil
}

// sign completes tmpl as a leaf of the CA for pub and signs it. Its
// validity nests in the CA's: a leaf that outlives its CA fails
// verification anyway, and a short one says so in its own dates.
func (ca *CA) sign(tmpl *x509.Certificate, pub crypto.PublicKey, validity time.Duration, now time.Time) (*x509.Certificate, error) {
	if validity <= 0 {
		return nil, fmt.Errorf("certificate validity %v, want more than 0", validity)
	}
	if !now.Before(ca.cert.NotAfter) {
		return nil, fmt.Errorf("the CA expired at %s", ca.cert.NotAfter.UTC().Format(time.RFC3339))
	}
	t := *tmpl
	t.SerialNumber = nil // crypto/x509 picks a random, RFC 5280 compliant one
	t.NotBefore = now.Add(-clockSkew)
	if t.NotBefore.Before(ca.cert.NotBefore) {
		t.NotBefore = ca.cert.NotBefore
	}
	t.NotAfter = now.Add(validity)
	if t.NotAfter.After(ca.cert.NotAfter) {
		t.NotAfter = ca.cert.NotAfter
	}
	t.KeyUsage = x509.KeyUsageDigitalSignature
	t.BasicConstraintsValid = true
	t.IsCA = false
	der, err := x509.CreateCertificate(rand.Reader, &t, ca.cert, pub, ca.key)
	if err != nil {
		return nil, fmt.Errorf("sign %q: %w", t.Subject.CommonName, err)
	}
	return x509.ParseCertificate(der)
}

// subjectAltNames sorts hosts into IP and DNS SANs, lower-cased, without
// duplicates. Empty hosts and unspecified addresses are skipped. DNS names
// are plain host names: no wildcards, which an agent could otherwise ask
// for to cover every host of a domain.
func subjectAltNames(hosts []string) (ips []net.IP, names []string, err error) {
	var seenIP []netip.Addr
	for _, h := range hosts {
		if h == "" {
			continue
		}
		if a, err := netip.ParseAddr(h); err == nil {
			a = a.WithZone("").Unmap()
			if a.IsUnspecified() || slices.Contains(seenIP, a) {
				continue
			}
			seenIP = append(seenIP, a)
			ips = append(ips, net.IP(a.AsSlice()))
			continue
		}
		name := strings.TrimSuffix(strings.ToLower(h), ".")
		if !validDNSName(name) {
			return nil, nil, fmt.Errorf("host %q is neither an IP address nor a DNS name", h)
		}
		if !slices.Contains(names, name) {
			names = append(names, name)
		}
	}
	return ips, names, nil
}

// validDNSName reports whether name is a lower-case host name: labels of 1
// to 63 letters, digits, '-' or '_' (tolerated, as crypto/x509 does, for
// hosts named so), 253 bytes at most.
func validDNSName(name string) bool {
	if len(name) == 0 || len(name) > 253 {
		return false
	}
	for label := range strings.SplitSeq(name, ".") {
		if len(label) == 0 || len(label) > 63 {
			return false
		}
		for i := 0; i < len(label); i++ {
			if c := label[i]; !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' || c == '_') {
				return false
			}
		}
	}
	return true
}
