package auth

import (
	"crypto/ecdsa"
	"crypto/x509"
	"encoding/base64"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"
)

// FuzzParseBearer holds ParseBearer's contract: it never panics; it
// accepts only one value "<bearer in any case> <secret>" whose secret has
// exactly NewSecret's format; every secret NewSecret can make (any 32
// bytes) parses back to itself; a refusal is exactly one sentinel, with a
// fixed message that never repeats the value.
func FuzzParseBearer(f *testing.F) {
	secret, err := NewSecret()
	if err != nil {
		f.Fatal(err)
	}
	for _, v := range []string{"Bearer " + secret, "bearer " + secret, "Bearer  " + secret, "Basic " + secret, "Bearer bpt_", "", "Bearer " + secret[:46] + "B"} {
		f.Add(v, "", uint8(1), []byte("0123456789abcdef0123456789abcdef"))
	}
	f.Add("Bearer "+secret, "Bearer "+secret, uint8(2), []byte{})
	f.Add("", "", uint8(0), []byte{0xff})
	_, badScheme := ParseBearer([]string{""})
	_, badSecret := ParseBearer([]string{"Bearer x"})
	f.Fuzz(func(t *testing.T, a, b string, n uint8, random []byte) {
		values := []string{a, b}[:n%3]
		got, err := ParseBearer(values)
		if again, err2 := ParseBearer(values); again != got || (err == nil) != (err2 == nil) {
			t.Fatal("ParseBearer is not deterministic")
		}
		if err != nil {
			if got != "" || errors.Is(err, ErrNoToken) == errors.Is(err, ErrMalformedToken) {
				t.Fatalf("refusal %q, %v", got, err)
			}
			if errors.Is(err, ErrNoToken) != (len(values) == 0) {
				t.Fatalf("ErrNoToken for %d values: %v", len(values), err)
			}
			// The message depends on which rule failed, never on the value.
			if len(values) == 1 && err.Error() != badScheme.Error() && err.Error() != badSecret.Error() {
				t.Fatalf("error %q is not one of the fixed messages", err)
			}
		} else {
			if len(values) != 1 || !secretFormat.MatchString(got) || !validSecret(got) {
				t.Fatalf("accepted %q from %q", got, values)
			}
			if v := values[0]; len(v) != len(bearerScheme)+1+secretLen || !strings.EqualFold(v[:len(bearerScheme)], bearerScheme) || v[len(bearerScheme)] != ' ' || v[len(bearerScheme)+1:] != got {
				t.Fatalf("accepted %q from %q", got, v)
			}
			raw, err := base64.RawURLEncoding.DecodeString(got[len(secretPrefix):])
			if err != nil || secretPrefix+base64.RawURLEncoding.EncodeToString(raw) != got {
				t.Fatalf("accepted %q, which is not the one spelling of its bytes", got)
			}
		}

		if len(random) >= secretBytes {
			s := secretPrefix + base64.RawURLEncoding.EncodeToString(random[:secretBytes])
			if got, err := ParseBearer([]string{"Bearer " + s}); err != nil || got != s {
				t.Fatalf("NewSecret's format %q does not parse back: %q, %v", s, got, err)
			}
		}
	})
}

// FuzzValidName holds ValidName to its regular expression.
func FuzzValidName(f *testing.F) {
	for _, s := range []string{"a", "admin", ".a", "a/b", "A", strings.Repeat("x", 63), strings.Repeat("x", 64), "a\x00", "é"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		if got, want := ValidName(name), nameRule.MatchString(name); got != want {
			t.Fatalf("ValidName(%q) = %v, the rule says %v", name, got, want)
		}
	})
}

// FuzzSubjectAltNames: hosts never panic, and what is accepted is lower
// case, unique, specified IPs and plain DNS names.
func FuzzSubjectAltNames(f *testing.F) {
	for _, s := range []string{"localhost,127.0.0.1,::1", "A.example.,a.example", "0.0.0.0,,::", "fe80::1%eth0", "*.x", "[::1]", "a..b"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, joined string) {
		ips, names, err := subjectAltNames(strings.Split(joined, ","))
		if err != nil {
			return
		}
		for _, ip := range ips {
			if ip.IsUnspecified() || (len(ip) != 4 && len(ip) != 16) {
				t.Fatalf("IP SAN %v", ip)
			}
		}
		for _, n := range names {
			if !validDNSName(n) || strings.ToLower(n) != n || strings.Contains(n, "*") {
				t.Fatalf("DNS SAN %q", n)
			}
		}
		if len(slices.Compact(slices.Clone(names))) != len(names) {
			t.Fatalf("duplicate DNS SANs %q", names)
		}
	})
}

// FuzzSignAgent holds SignAgent's contract on arbitrary requests and ids:
// it never panics, and what it signs is for the request's own key, with
// CommonName the (valid, unreserved) agent id, AgentServerName(id) its one
// SAN, server and client usage, and verifies against the CA under that
// name and under no name outside ".agent.blendplane.invalid" (host: a name
// a client might dial the control plane by).
func FuzzSignAgent(f *testing.F) {
	ca := newTestCA(f)
	good, _ := agentRequest(f, "agent-1")
	f.Add(good, "agent-1", "agent-1")
	f.Add(good, "agent-2", "")
	f.Add(good, "controlplane", "controlplane")
	f.Add([]byte("-----BEGIN CERTIFICATE REQUEST-----\nMAA=\n-----END CERTIFICATE REQUEST-----\n"), "a", "*.a")
	controlPlaneCSR, _ := agentRequest(f, "controlplane")
	f.Add(controlPlaneCSR, "controlplane", "localhost")
	hostCSR, _ := agentRequest(f, "cp.studio.lan")
	f.Add(hostCSR, "cp.studio.lan", "cp.studio.lan")
	f.Add(hostCSR, "cp.studio.lan", "CP.studio.lan.agent.blendplane.invalid.")
	colonCSR, _ := agentRequest(f, "agent:7")
	f.Add(colonCSR, "agent:7", "agent:7.agent.blendplane.invalid")
	f.Fuzz(func(t *testing.T, csrPEM []byte, agentID, host string) {
		certPEM, err := ca.SignAgent(csrPEM, agentID, time.Hour)
		if err != nil {
			if certPEM != nil {
				t.Fatal("a refusal returned a certificate")
			}
			return
		}
		if err := checkAgentID(agentID); err != nil {
			t.Fatalf("signed for agent id %q: %v", agentID, err)
		}
		name := AgentServerName(agentID)
		if !validDNSName(name) {
			t.Fatalf("signed for agent id %q, whose server name %q is no DNS name", agentID, name)
		}
		leaf := parsePEMCert(t, certPEM)
		csr, err := parseCSR(csrPEM)
		if err != nil || csr.Subject.CommonName != agentID {
			t.Fatalf("signed a request it cannot read (%v) or for another id", err)
		}
		if !leaf.PublicKey.(*ecdsa.PublicKey).Equal(csr.PublicKey) {
			t.Fatal("the certificate is not for the request's key")
		}
		if leaf.Subject.CommonName != agentID || !slices.Equal(leaf.DNSNames, []string{name}) || leaf.IsCA {
			t.Fatalf("leaf %q %q", leaf.Subject.CommonName, leaf.DNSNames)
		}
		if len(leaf.IPAddresses) != 0 || len(leaf.URIs) != 0 || len(leaf.EmailAddresses) != 0 {
			t.Fatalf("other SANs %v %v %q", leaf.IPAddresses, leaf.URIs, leaf.EmailAddresses)
		}
		if !slices.Equal(leaf.ExtKeyUsage, []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}) {
			t.Fatalf("ExtKeyUsage %v", leaf.ExtKeyUsage)
		}
		if _, err := leaf.Verify(x509.VerifyOptions{DNSName: name, Roots: ca.Pool()}); err != nil {
			t.Fatal(err)
		}
		// The attack: no name outside the reserved suffix, whatever the id.
		for _, h := range []string{host, agentID} {
			if err := leaf.VerifyHostname(h); err == nil && !strings.HasSuffix(strings.ToLower(strings.TrimSuffix(h, ".")), agentNameSuffix) {
				t.Fatalf("the certificate for agent %q verifies for %q", agentID, h)
			}
		}
		if err := VerifyAgent(verified(ca, leaf), agentID); err != nil {
			t.Fatal(err)
		}
		if VerifyControlPlane(verified(ca, leaf)) == nil {
			t.Fatal("an agent certificate passes as the control plane's")
		}
	})
}

// FuzzParseCA holds the CA loader's parsers: they never panic, and what
// they accept is a P-256 key and a self-signed, unexpired CA certificate
// for it.
func FuzzParseCA(f *testing.F) {
	ca := newTestCA(f)
	other := newTestCA(f)
	f.Add(pkcs8PEM(f, ca.key), ca.CertPEM())
	f.Add(ecKeyPEM(f, ca.key), ca.CertPEM())
	f.Add(pkcs8PEM(f, other.key), ca.CertPEM())
	f.Add(ca.CertPEM(), pkcs8PEM(f, ca.key))
	f.Add([]byte("-----BEGIN PRIVATE KEY-----\nMAA=\n-----END PRIVATE KEY-----\n"), []byte{})
	now := time.Now()
	f.Fuzz(func(t *testing.T, keyPEM, certPEM []byte) {
		key, err := parseCAKey(keyPEM)
		if err != nil {
			return
		}
		if key.Curve.Params().Name != "P-256" {
			t.Fatalf("accepted a %s key", key.Curve.Params().Name)
		}
		got, err := parseCACert(certPEM, key, now)
		if err != nil {
			return
		}
		if !got.cert.IsCA || !got.cert.PublicKey.(*ecdsa.PublicKey).Equal(&key.PublicKey) || !now.Before(got.cert.NotAfter) {
			t.Fatal("accepted a certificate that is not this key's CA")
		}
		if err := got.cert.CheckSignatureFrom(got.cert); err != nil {
			t.Fatal(err)
		}
		if !parsePEMCert(t, got.CertPEM()).Equal(got.cert) {
			t.Fatal("CertPEM is not the certificate")
		}
	})
}
