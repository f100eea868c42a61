package auth

import (
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"net"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestServerCert(t *testing.T) {
	ca := newTestCA(t)
	cert, err := ca.ServerCert([]string{"", "0.0.0.0", "::", "Render-Host.Example.", "10.1.2.3", "fe80::1%eth0", "::ffff:10.1.2.3", "localhost", "render-host.example"}, 24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	leaf := cert.Leaf
	if leaf.Subject.CommonName != ControlPlaneName {
		t.Errorf("CommonName %q", leaf.Subject.CommonName)
	}
	if want := []string{"localhost", "render-host.example"}; !slices.Equal(leaf.DNSNames, want) {
		t.Errorf("DNS SANs %q, want %q", leaf.DNSNames, want)
	}
	var ips []string
	for _, ip := range leaf.IPAddresses {
		ips = append(ips, ip.String())
	}
	if want := []string{"127.0.0.1", "::1", "10.1.2.3", "fe80::1"}; !slices.Equal(ips, want) {
		t.Errorf("IP SANs %q, want %q", ips, want)
	}
	if !slices.Equal(leaf.ExtKeyUsage, []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}) || leaf.IsCA {
		t.Errorf("ExtKeyUsage %v, IsCA %v", leaf.ExtKeyUsage, leaf.IsCA)
	}
	for _, host := range []string{"localhost", "127.0.0.1", "::1", "RENDER-HOST.example", "10.1.2.3"} {
		if _, err := leaf.Verify(x509.VerifyOptions{DNSName: host, Roots: ca.Pool()}); err != nil {
			t.Errorf("verify for %s: %v", host, err)
		}
	}
	if _, err := leaf.Verify(x509.VerifyOptions{DNSName: "other.example", Roots: ca.Pool()}); err == nil {
		t.Error("verified for a host it does not name")
	}
	if _, ok := cert.PrivateKey.(*ecdsa.PrivateKey); !ok {
		t.Errorf("key %T", cert.PrivateKey)
	}
	if got := leaf.NotAfter.Sub(leaf.NotBefore); got != 24*time.Hour+clockSkew {
		t.Errorf("valid for %v, want a day and the clock skew", got)
	}

	for _, host := range []string{"a b", "*.example", "[::1]", "host:8443", "a..b", "é.example", strings.Repeat("a", 64), "under/score"} {
		if _, err := ca.ServerCert([]string{host}, time.Hour); err == nil {
			t.Errorf("ServerCert(%q) succeeded", host)
		}
	}
	if _, err := ca.ServerCert(nil, 0); err == nil {
		t.Error("ServerCert with no validity succeeded")
	}
}

func TestClientCert(t *testing.T) {
	ca := newTestCA(t)
	cert, err := ca.ClientCert(ControlPlaneName, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	leaf := cert.Leaf
	if leaf.Subject.CommonName != ControlPlaneName || len(leaf.DNSNames) != 0 || len(leaf.IPAddresses) != 0 {
		t.Errorf("leaf %q %q %v", leaf.Subject.CommonName, leaf.DNSNames, leaf.IPAddresses)
	}
	if !slices.Equal(leaf.ExtKeyUsage, []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}) {
		t.Errorf("ExtKeyUsage %v", leaf.ExtKeyUsage)
	}
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: ca.Pool(), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Error(err)
	}
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: ca.Pool()}); err == nil {
		t.Error("a client certificate verified as a server's")
	}
	for _, name := range []string{"", "Control Plane", "a/b"} {
		if _, err := ca.ClientCert(name, time.Hour); err == nil {
			t.Errorf("ClientCert(%q) succeeded", name)
		}
	}
	if _, err := ca.ClientCert("a", -time.Second); err == nil {
		t.Error("ClientCert with negative validity succeeded")
	}
}

// Leaves nest in the CA's validity, and none is issued by an expired CA.
func TestSignValidity(t *testing.T) {
	ca := newTestCA(t)
	now := time.Now()
	leaf, err := ca.sign(&x509.Certificate{Subject: pkix.Name{CommonName: "a"}}, &ca.key.PublicKey, 20*365*24*time.Hour, now)
	if err != nil {
		t.Fatal(err)
	}
	if !leaf.NotAfter.Equal(ca.cert.NotAfter) {
		t.Errorf("NotAfter %v, want the CA's %v", leaf.NotAfter, ca.cert.NotAfter)
	}
	if !leaf.NotBefore.Equal(ca.cert.NotBefore) {
		t.Errorf("NotBefore %v, want the CA's %v", leaf.NotBefore, ca.cert.NotBefore)
	}
	later := now.Add(time.Hour)
	leaf, err = ca.sign(&x509.Certificate{Subject: pkix.Name{CommonName: "a"}}, &ca.key.PublicKey, time.Hour, later)
	if err != nil {
		t.Fatal(err)
	}
	if !leaf.NotBefore.Equal(later.Add(-clockSkew).Truncate(time.Second)) || !leaf.NotAfter.Equal(later.Add(time.Hour).Truncate(time.Second)) {
		t.Errorf("valid %v to %v", leaf.NotBefore, leaf.NotAfter)
	}
	if _, err := ca.sign(&x509.Certificate{}, &ca.key.PublicKey, time.Hour, ca.cert.NotAfter); err == nil || !strings.Contains(err.Error(), "expired") {
		t.Errorf("signing with an expired CA: %v", err)
	}
}

func TestAgentServerName(t *testing.T) {
	for id, want := range map[string]string{
		"agent-0a1b2c3d4e5f": "agent-0a1b2c3d4e5f.agent.blendplane.invalid",
		"Render_01.Studio":   "render_01.studio.agent.blendplane.invalid",
		"cp.studio.lan":      "cp.studio.lan.agent.blendplane.invalid",
	} {
		if got := AgentServerName(id); got != want {
			t.Errorf("AgentServerName(%q) = %q, want %q", id, got, want)
		}
	}
}

func TestSignAgent(t *testing.T) {
	ca := newTestCA(t)
	for _, id := range []string{"agent-0a1b2c3d4e5f", "Agent-7", "render_01.studio", "_a-", strings.Repeat("a", 63) + "." + strings.Repeat("b", 62) + ".c"} {
		t.Run(id, func(t *testing.T) {
			csr, _ := agentRequest(t, id)
			certPEM, err := ca.SignAgent(csr, id, 90*24*time.Hour)
			if err != nil {
				t.Fatal(err)
			}
			leaf := parsePEMCert(t, certPEM)
			if leaf.Subject.CommonName != id {
				t.Errorf("CommonName %q", leaf.Subject.CommonName)
			}
			name := AgentServerName(id)
			if want := []string{name}; !slices.Equal(leaf.DNSNames, want) {
				t.Errorf("DNS SANs %q, want %q", leaf.DNSNames, want)
			}
			if len(leaf.IPAddresses) != 0 || len(leaf.URIs) != 0 || len(leaf.EmailAddresses) != 0 {
				t.Errorf("other SANs %v %v %q", leaf.IPAddresses, leaf.URIs, leaf.EmailAddresses)
			}
			if !slices.Equal(leaf.ExtKeyUsage, []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}) {
				t.Errorf("ExtKeyUsage %v", leaf.ExtKeyUsage)
			}
			for _, usage := range []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth} {
				for _, dnsName := range []string{name, strings.ToUpper(name), name + "."} {
					if _, err := leaf.Verify(x509.VerifyOptions{DNSName: dnsName, Roots: ca.Pool(), KeyUsages: []x509.ExtKeyUsage{usage}}); err != nil {
						t.Errorf("verify %q as %v: %v", dnsName, usage, err)
					}
				}
			}
			// The id itself is no name the certificate is good for.
			if err := leaf.VerifyHostname(id); err == nil {
				t.Errorf("the certificate verifies for the bare id %q", id)
			}
			if got := leaf.NotAfter.Sub(leaf.NotBefore); got != 90*24*time.Hour+clockSkew {
				t.Errorf("valid for %v", got)
			}
		})
	}
}

// TestAgentCannotPoseAsControlPlane: an agent token lets its holder pick
// an agent id and have a CSR signed by the CA that clients (blendctl,
// grpcurl -cacert ca.pem) also trust for the control plane's listener.
// Whatever id it picks, the certificate is good for no name or address a
// client reaches the control plane by.
func TestAgentCannotPoseAsControlPlane(t *testing.T) {
	ca := newTestCA(t)
	const cpHost = "cp.studio.lan"
	// The names clients dial the control plane by: its host names and IPs,
	// and everything ServerCert puts in by itself.
	cpNames := []string{cpHost, "CP.Studio.Lan", cpHost + ".", "127.0.0.1", "::1", "[::1]", "localhost", "10.0.0.1", ControlPlaneName, "render-7.studio.lan"}
	serverCert := mustCert(t)(ca.ServerCert([]string{cpHost, "10.0.0.1", "render-7.studio.lan"}, time.Hour))
	for _, name := range cpNames {
		if err := serverCert.Leaf.VerifyHostname(name); err != nil && name != ControlPlaneName {
			t.Fatalf("the control plane's own certificate does not verify for %q: %v", name, err)
		}
	}

	// Ids an attacker would try: the control plane's host names (in any
	// case, with a trailing dot, under the agent suffix's parent), and
	// ordinary ids. IPs, "localhost" and "controlplane" SignAgent refuses
	// outright (TestSignAgentRefuses).
	ids := []string{cpHost, "CP.STUDIO.LAN", "render-7.studio.lan", "cp", "studio.lan", "lan", "agent-1",
		"cp.studio.lan.agent.blendplane", "blendplane.invalid", "invalid"}
	for _, id := range ids {
		csr, keyPEM := agentRequest(t, id)
		certPEM, err := ca.SignAgent(csr, id, time.Hour)
		if err != nil {
			t.Fatalf("SignAgent(%q): %v", id, err)
		}
		leaf := parsePEMCert(t, certPEM)
		for _, name := range cpNames {
			if err := leaf.VerifyHostname(name); err == nil {
				t.Errorf("agent %q: certificate verifies for %q", id, name)
			}
			if _, err := leaf.Verify(x509.VerifyOptions{DNSName: name, Roots: ca.Pool()}); err == nil {
				t.Errorf("agent %q: certificate verifies as a server for %q", id, name)
			}
		}
		// A real client of the control plane, trusting ca.pem and dialing
		// cp.studio.lan, refuses a server that presents the agent's
		// certificate.
		cert, err := tls.X509KeyPair(certPEM, keyPEM)
		if err != nil {
			t.Fatal(err)
		}
		server := &tls.Config{MinVersion: tls.VersionTLS13, Certificates: []tls.Certificate{cert}}
		for _, serverName := range []string{cpHost, "127.0.0.1"} {
			client := &tls.Config{MinVersion: tls.VersionTLS13, RootCAs: ca.Pool(), ServerName: serverName}
			serverErr, clientErr := handshake(t, server, client)
			var wrongName x509.HostnameError
			if clientErr == nil {
				t.Errorf("agent %q: a client dialing %q accepted its certificate", id, serverName)
			} else if !errors.As(clientErr, new(*tls.CertificateVerificationError)) || !errors.As(clientErr, &wrongName) || wrongName.Host != serverName {
				t.Errorf("agent %q, dialing %q: %v; want a certificate verification error for the name", id, serverName, clientErr)
			}
			if serverErr == nil {
				t.Errorf("agent %q: the handshake with a client dialing %q went through on the server's side", id, serverName)
			}
		}
	}

	// The same client does accept the control plane's own certificate: the
	// refusals above are for the name, not the setup.
	serverErr, clientErr := handshake(t, &tls.Config{MinVersion: tls.VersionTLS13, Certificates: []tls.Certificate{serverCert}},
		&tls.Config{MinVersion: tls.VersionTLS13, RootCAs: ca.Pool(), ServerName: cpHost})
	if serverErr != nil || clientErr != nil {
		t.Fatalf("the control plane's own certificate: server %v, client %v", serverErr, clientErr)
	}
}

// The CA decides what an agent is: SANs and extensions the request asks
// for are not copied.
func TestSignAgentIgnoresRequestedNames(t *testing.T) {
	ca := newTestCA(t)
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	csr := requestFor(t, key, &x509.CertificateRequest{
		Subject:     pkix.Name{CommonName: "agent-1", Organization: []string{"evil"}},
		DNSNames:    []string{"controlplane.studio.lan", "*.studio.lan"},
		IPAddresses: []net.IP{net.ParseIP("10.0.0.1")},
	})
	certPEM, err := ca.SignAgent(csr, "agent-1", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	leaf := parsePEMCert(t, certPEM)
	if !slices.Equal(leaf.DNSNames, []string{"agent-1.agent.blendplane.invalid"}) || len(leaf.IPAddresses) != 0 || len(leaf.Subject.Organization) != 0 {
		t.Fatalf("leaf copies the request: %q %v %q", leaf.DNSNames, leaf.IPAddresses, leaf.Subject.Organization)
	}
	if !leaf.PublicKey.(*ecdsa.PublicKey).Equal(&key.PublicKey) {
		t.Fatal("the certificate is not for the request's key")
	}
}

func TestSignAgentRefuses(t *testing.T) {
	ca := newTestCA(t)
	good, _ := agentRequest(t, "agent-1")
	p384, err := ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	_, edKey, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	named := func(id string) []byte { csr, _ := agentRequest(t, id); return csr }
	block, _ := pem.Decode(good)
	tampered := pem.EncodeToMemory(&pem.Block{Type: block.Type, Bytes: flipLastByte(block.Bytes)})

	tests := []struct {
		name  string
		csr   []byte
		id    string
		valid time.Duration
		want  string
	}{
		{"another agent's request", named("agent-2"), "agent-1", time.Hour, `is for "agent-2", not agent "agent-1"`},
		{"CommonName in another case", named("Agent-1"), "agent-1", time.Hour, "not agent"},
		{"bad signature", tampered, "agent-1", time.Hour, "signature"},
		{"P-384 key", requestFor(t, p384, &x509.CertificateRequest{Subject: pkix.Name{CommonName: "agent-1"}}), "agent-1", time.Hour, "want ECDSA P-256"},
		{"Ed25519 key", requestFor(t, edKey, &x509.CertificateRequest{Subject: pkix.Name{CommonName: "agent-1"}}), "agent-1", time.Hour, "want ECDSA P-256"},
		{"not PEM", []byte("hello"), "agent-1", time.Hour, "no PEM block"},
		{"DER without PEM", block.Bytes, "agent-1", time.Hour, "no PEM block"},
		{"wrong PEM type", pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: block.Bytes}), "agent-1", time.Hour, "want CERTIFICATE REQUEST"},
		{"old PEM type", pem.EncodeToMemory(&pem.Block{Type: "NEW CERTIFICATE REQUEST", Bytes: block.Bytes}), "agent-1", time.Hour, "want CERTIFICATE REQUEST"},
		{"two requests", append(append([]byte{}, good...), good...), "agent-1", time.Hour, "more than one"},
		{"garbage DER", pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: []byte{0x30, 0x03, 1, 2, 3}}), "agent-1", time.Hour, "not a certificate request"},
		{"too large", append(append([]byte{}, good...), make([]byte, maxCSRBytes)...), "agent-1", time.Hour, "at most 8192"},
		{"empty", nil, "agent-1", time.Hour, "no PEM block"},
		{"empty id", named(""), "", time.Hour, "want 1 to 128"},
		{"long id", named(strings.Repeat("a", 129)), strings.Repeat("a", 129), time.Hour, "want 1 to 128"},
		{"id with a slash", named("a/b"), "a/b", time.Hour, "want letters"},
		{"id with a space", named("a b"), "a b", time.Hour, "want letters"},
		{"wildcard id", named("*"), "*", time.Hour, "want letters"},
		{"control plane's name", named("controlplane"), "controlplane", time.Hour, "reserved"},
		{"control plane's name in capitals", named("ControlPlane"), "ControlPlane", time.Hour, "reserved"},
		{"localhost", named("localhost"), "localhost", time.Hour, "reserved"},
		{"IPv4 id", named("10.0.0.1"), "10.0.0.1", time.Hour, "IP address"},
		{"IPv6 id", named("::1"), "::1", time.Hour, "IP address"},
		{"id of a dot", named("."), ".", time.Hour, "cannot make a TLS server name"},
		{"id with a colon", named("agent:7"), "agent:7", time.Hour, "cannot make a TLS server name"},
		{"id with a port", named("cp.studio.lan:443"), "cp.studio.lan:443", time.Hour, "cannot make a TLS server name"},
		{"id with an empty label", named("a..b"), "a..b", time.Hour, "cannot make a TLS server name"},
		{"id with a leading dot", named(".a"), ".a", time.Hour, "cannot make a TLS server name"},
		{"id with a trailing dot", named("a."), "a.", time.Hour, "cannot make a TLS server name"},
		{"id with a 64-byte label", named(strings.Repeat("a", 64)), strings.Repeat("a", 64), time.Hour, "cannot make a TLS server name"},
		{"no validity", good, "agent-1", 0, "validity"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cert, err := ca.SignAgent(tt.csr, tt.id, tt.valid)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("SignAgent = %d bytes, %v; want an error with %q", len(cert), err, tt.want)
			}
			if cert != nil {
				t.Fatal("a refusal returned a certificate")
			}
		})
	}
}

func flipLastByte(b []byte) []byte {
	c := append([]byte{}, b...)
	c[len(c)-1] ^= 1
	return c
}

func TestSubjectAltNames(t *testing.T) {
	ips, names, err := subjectAltNames([]string{"B.example", "b.example.", "10.0.0.1", "::ffff:10.0.0.1", "", "::", "host_1"})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(names, []string{"b.example", "host_1"}) || len(ips) != 1 || !ips[0].Equal(net.ParseIP("10.0.0.1")) || len(ips[0]) != 4 {
		t.Fatalf("subjectAltNames = %v %q", ips, names)
	}
	if ips, names, err := subjectAltNames(nil); err != nil || ips != nil || names != nil {
		t.Fatalf("subjectAltNames(nil) = %v %q %v", ips, names, err)
	}
}

func TestValidDNSName(t *testing.T) {
	for _, tt := range []struct {
		name string
		ok   bool
	}{
		{"a", true},
		{"render-7.studio.lan", true},
		{"host_1", true},
		{strings.Repeat("a", 63) + ".b", true},
		{strings.Repeat("a.", 126) + "a", true},
		{"", false},
		{strings.Repeat("a", 64), false},
		{strings.Repeat("a.", 126) + "ab", false},
		{"a..b", false},
		{".a", false},
		{"a.", false},
		{"A", false}, // callers lower-case first
		{"*.a", false},
		{"a b", false},
		{"a:1", false},
	} {
		if got := validDNSName(tt.name); got != tt.ok {
			t.Errorf("validDNSName(%q) = %v", tt.name, got)
		}
	}
}
