package auth

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestLoadOrCreateCA(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data") // created too
	ca, created, err := LoadOrCreateCA(dir)
	if err != nil || !created {
		t.Fatalf("LoadOrCreateCA = %v, %v; want a new CA", created, err)
	}
	for file, want := range map[string]os.FileMode{CAKeyFile: 0o600, CACertFile: 0o644} {
		fi, err := os.Stat(filepath.Join(dir, file))
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != want {
			t.Errorf("%s has mode %#o, want %#o", file, fi.Mode().Perm(), want)
		}
	}
	onDisk, err := os.ReadFile(filepath.Join(dir, CACertFile))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(onDisk, ca.CertPEM()) {
		t.Fatal("CertPEM differs from ca.pem")
	}
	assertOnlyCAFiles(t, dir)

	cert := parsePEMCert(t, ca.CertPEM())
	if cert.Subject.CommonName != "Blendplane CA" || !cert.IsCA || !cert.MaxPathLenZero || cert.KeyUsage&x509.KeyUsageCertSign == 0 {
		t.Fatalf("CA certificate %+v", cert.Subject)
	}
	if years := cert.NotAfter.Sub(cert.NotBefore).Hours() / 24 / 365; years < 9.9 || years > 10.1 {
		t.Fatalf("the CA is valid for %.1f years, want 10", years)
	}
	if pub, ok := cert.PublicKey.(*ecdsa.PublicKey); !ok || pub.Curve != elliptic.P256() {
		t.Fatalf("CA key %T, want ECDSA P-256", cert.PublicKey)
	}

	again, created, err := LoadOrCreateCA(dir)
	if err != nil || created {
		t.Fatalf("second LoadOrCreateCA = %v, %v; want the same CA loaded", created, err)
	}
	if !bytes.Equal(again.CertPEM(), ca.CertPEM()) || !again.key.Equal(ca.key) {
		t.Fatal("the loaded CA is not the one created")
	}
	// What the first one signed, the loaded one's pool verifies.
	leaf, err := ca.ClientCert("someone", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := leaf.Leaf.Verify(x509.VerifyOptions{Roots: again.Pool(), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Fatal(err)
	}
}

// assertOnlyCAFiles fails if writes left temp files behind.
func assertOnlyCAFiles(t *testing.T, dir string) {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if strings.Join(names, " ") != CAKeyFile+" "+CACertFile {
		t.Fatalf("dir holds %q", names)
	}
}

// A crash between the key's write and the certificate's leaves a key alone:
// the next start makes a certificate for that key, and certificates signed
// under a previous certificate for the same key still verify.
func TestLoadOrCreateCAKeyWithoutCertificate(t *testing.T) {
	dir := t.TempDir()
	ca, _, err := LoadOrCreateCA(dir)
	if err != nil {
		t.Fatal(err)
	}
	agent := agentCert(t, ca, "agent-1")
	if err := os.Remove(filepath.Join(dir, CACertFile)); err != nil {
		t.Fatal(err)
	}
	again, created, err := LoadOrCreateCA(dir)
	if err != nil || !created {
		t.Fatalf("LoadOrCreateCA = %v, %v; want a new certificate", created, err)
	}
	if !again.key.Equal(ca.key) {
		t.Fatal("the key was replaced")
	}
	if _, err := os.Stat(filepath.Join(dir, CACertFile)); err != nil {
		t.Fatal(err)
	}
	if _, err := agent.Leaf.Verify(x509.VerifyOptions{Roots: again.Pool(), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}); err != nil {
		t.Fatalf("a certificate of the same key no longer verifies: %v", err)
	}
	assertOnlyCAFiles(t, dir)
}

func TestLoadOrCreateCARefuses(t *testing.T) {
	other := newTestCA(t)
	otherKey := pkcs8PEM(t, other.key)
	p384, err := ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name  string
		setup func(t *testing.T, dir string)
		want  string
	}{
		{"certificate without key", func(t *testing.T, dir string) {
			must(t, os.Remove(filepath.Join(dir, CAKeyFile)))
		}, "does not"},
		{"group-readable key", func(t *testing.T, dir string) {
			must(t, os.Chmod(filepath.Join(dir, CAKeyFile), 0o640))
		}, "chmod 600"},
		{"world-readable key", func(t *testing.T, dir string) {
			must(t, os.Chmod(filepath.Join(dir, CAKeyFile), 0o604))
		}, "chmod 600"},
		{"group-writable key", func(t *testing.T, dir string) {
			must(t, os.Chmod(filepath.Join(dir, CAKeyFile), 0o620))
		}, "chmod 600"},
		{"key is a directory", func(t *testing.T, dir string) {
			must(t, os.Remove(filepath.Join(dir, CAKeyFile)))
			must(t, os.Mkdir(filepath.Join(dir, CAKeyFile), 0o700))
		}, "not a regular file"},
		{"key is not PEM", func(t *testing.T, dir string) {
			writeKey(t, dir, []byte("not a key"))
		}, "no PEM block"},
		{"two keys", func(t *testing.T, dir string) {
			writeKey(t, dir, append(otherKey, otherKey...))
		}, "more than one PEM block"},
		{"key of another CA", func(t *testing.T, dir string) {
			writeKey(t, dir, otherKey)
		}, "not the certificate of"},
		{"P-384 key", func(t *testing.T, dir string) {
			writeKey(t, dir, pkcs8PEM(t, p384))
		}, "want ECDSA P-256"},
		{"certificate block in the key file", func(t *testing.T, dir string) {
			writeKey(t, dir, other.CertPEM())
		}, "want PRIVATE KEY"},
		{"key file too large", func(t *testing.T, dir string) {
			writeKey(t, dir, bytes.Repeat([]byte{'\n'}, maxPEMFile+1))
		}, "over"},
		{"certificate is garbage", func(t *testing.T, dir string) {
			must(t, os.WriteFile(filepath.Join(dir, CACertFile), []byte("-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"), 0o644))
		}, "x509"},
		{"certificate is a key", func(t *testing.T, dir string) {
			must(t, os.WriteFile(filepath.Join(dir, CACertFile), otherKey, 0o644))
		}, "want CERTIFICATE"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			if _, _, err := LoadOrCreateCA(dir); err != nil {
				t.Fatal(err)
			}
			tt.setup(t, dir)
			ca, _, err := LoadOrCreateCA(dir)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("LoadOrCreateCA = %v, %v; want an error with %q", ca, err, tt.want)
			}
		})
	}
}

func TestLoadOrCreateCAUnwritableDir(t *testing.T) {
	file := filepath.Join(t.TempDir(), "file")
	must(t, os.WriteFile(file, nil, 0o600))
	if _, _, err := LoadOrCreateCA(file); err == nil {
		t.Fatal("created a CA inside a file")
	}
	if _, _, err := LoadOrCreateCA(filepath.Join(file, "sub")); err == nil {
		t.Fatal("created a CA below a file")
	}
}

// An openssl-made key ("EC PRIVATE KEY", SEC 1) loads too.
func TestLoadOrCreateCASEC1Key(t *testing.T) {
	dir := t.TempDir()
	ca, _, err := LoadOrCreateCA(dir)
	if err != nil {
		t.Fatal(err)
	}
	writeKey(t, dir, ecKeyPEM(t, ca.key))
	again, created, err := LoadOrCreateCA(dir)
	if err != nil || created || !again.key.Equal(ca.key) {
		t.Fatalf("LoadOrCreateCA = %v, %v", created, err)
	}
}

func TestParseCACert(t *testing.T) {
	ca := newTestCA(t)
	cert := parsePEMCert(t, ca.CertPEM())
	if _, err := parseCACert(ca.CertPEM(), ca.key, cert.NotAfter.Add(-time.Second)); err != nil {
		t.Fatalf("a CA a second before it expires: %v", err)
	}
	if _, err := parseCACert(ca.CertPEM(), ca.key, cert.NotAfter); err == nil || !strings.Contains(err.Error(), "expired") {
		t.Fatalf("an expired CA: %v", err)
	}
	// A leaf for the CA's own key is not a CA certificate.
	leaf, err := ca.sign(&x509.Certificate{Subject: cert.Subject}, &ca.key.PublicKey, time.Hour, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	leafPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: leaf.Raw})
	if _, err := parseCACert(leafPEM, ca.key, time.Now()); err == nil || !strings.Contains(err.Error(), "not a CA") {
		t.Fatalf("a leaf as the CA: %v", err)
	}
	// A CA certificate for this key signed by another CA is not self-signed.
	other := newTestCA(t)
	tmpl := *cert
	tmpl.IsCA, tmpl.BasicConstraintsValid, tmpl.KeyUsage = true, true, x509.KeyUsageCertSign
	der, err := x509.CreateCertificate(rand.Reader, &tmpl, other.cert, &ca.key.PublicKey, other.key)
	if err != nil {
		t.Fatal(err)
	}
	crossPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	if _, err := parseCACert(crossPEM, ca.key, time.Now()); err == nil || !strings.Contains(err.Error(), "self-signed") {
		t.Fatalf("a CA signed by another: %v", err)
	}
}

func TestCertPEMAndPool(t *testing.T) {
	ca := newTestCA(t)
	p := ca.CertPEM()
	p[0] = 'X'
	if ca.CertPEM()[0] != '-' {
		t.Fatal("CertPEM returned the CA's own slice")
	}
	leaf, err := ca.ClientCert("a", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	pool := ca.Pool()
	if _, err := leaf.Leaf.Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Fatal(err)
	}
	other := newTestCA(t)
	pool.AddCert(other.cert)
	if ca.Pool().Equal(pool) {
		t.Fatal("Pool returned a shared pool")
	}
	if _, err := leaf.Leaf.Verify(x509.VerifyOptions{Roots: other.Pool(), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err == nil {
		t.Fatal("another CA's pool verified the leaf")
	}
}

func TestWriteFileAtomic(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "f")
	for _, tt := range []struct {
		data string
		mode os.FileMode
	}{{"one", 0o600}, {"two, longer", 0o644}, {"3", 0o600}} {
		if err := writeFileAtomic(path, []byte(tt.data), tt.mode); err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(path)
		if err != nil || string(got) != tt.data {
			t.Fatalf("read %q, %v; want %q", got, err, tt.data)
		}
		fi, err := os.Stat(path)
		if err != nil || fi.Mode().Perm() != tt.mode {
			t.Fatalf("mode %v, %v; want %#o", fi.Mode(), err, tt.mode)
		}
	}
	if err := writeFileAtomic(filepath.Join(dir, "missing", "f"), nil, 0o600); err == nil {
		t.Fatal("wrote into a missing directory")
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Fatalf("temp files left: %v", entries)
	}
}

func TestOnePEMBlock(t *testing.T) {
	block := pem.EncodeToMemory(&pem.Block{Type: "X", Bytes: []byte{1}})
	for _, tt := range []struct {
		data []byte
		ok   bool
	}{
		{block, true},
		{append(append([]byte("leading text\n"), block...), "\n \t\n"...), true},
		{nil, false},
		{[]byte("junk"), false},
		{append(bytes.Clone(block), block...), false},
		{append(bytes.Clone(block), "trailing"...), false},
	} {
		if _, err := onePEMBlock(tt.data); (err == nil) != tt.ok {
			t.Errorf("onePEMBlock(%q) = %v, want ok %v", tt.data, err, tt.ok)
		}
	}
}

func pkcs8PEM(t testing.TB, key *ecdsa.PrivateKey) []byte {
	t.Helper()
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})
}

func writeKey(t *testing.T, dir string, data []byte) {
	t.Helper()
	must(t, os.WriteFile(filepath.Join(dir, CAKeyFile), data, 0o600))
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
