package auth

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"time"
)

// The CA's files in its directory (the control plane's data dir).
const (
	// CACertFile is the CA certificate that clients and agents trust.
	CACertFile = "ca.pem"
	// CAKeyFile is the CA's private key; only its owner may read it.
	CAKeyFile = "ca-key.pem"
)

const (
	caCommonName = "Blendplane CA"
	caYears      = 10
	// clockSkew backdates every certificate, so that a host whose clock is
	// a little behind the control plane's accepts one issued just now.
	clockSkew = 5 * time.Minute
	// maxPEMFile bounds what the CA reads from its files: a certificate or
	// key is well under 2 KiB.
	maxPEMFile = 64 << 10
)

// CA is the control plane's certificate authority: a self-signed ECDSA P-256
// certificate and its key. It signs the control plane's own certificates
// and its agents'. Its methods are safe for concurrent use.
type CA struct {
	cert    *x509.Certificate
	key     *ecdsa.PrivateKey
	certPEM []byte
}

// LoadOrCreateCA reads the CA from dir (CACertFile and CAKeyFile), or creates
// one there, and reports whether it created anything. A new CA is
// "Blendplane CA", valid for 10 years. Both files are written atomically,
// the key first: the certificate is the commit point. A key without its
// certificate (a crash between the two) gets a new certificate for the
// same key; a certificate without its key is an error, since agents trust
// that certificate and nothing can sign for it any more. A key file that
// its group or others may access is refused rather than used or fixed: the
// key mints every agent's identity and the control plane's, so whoever can
// read it can pose as the control plane to every agent, and a lax mode
// means the file was copied or edited carelessly.
//
// Only one process may call it for a dir at a time (the control plane holds
// its database's lock by then).
func LoadOrCreateCA(dir string) (ca *CA, created bool, err error) {
	certPath, keyPath := filepath.Join(dir, CACertFile), filepath.Join(dir, CAKeyFile)
	keyPEM, err := readKeyFile(keyPath)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		if _, err := os.Stat(certPath); err == nil {
			return nil, false, fmt.Errorf("%s exists but its key %s does not: agents trust this CA and nothing can sign for it now; "+
				"restore the key, or remove %s to create a new CA (every agent then joins again)", certPath, keyPath, certPath)
		} else if !errors.Is(err, fs.ErrNotExist) {
			return nil, false, err
		}
		ca, err := createCA(dir)
		if err != nil {
			return nil, false, err
		}
		return ca, true, nil
	case err != nil:
		return nil, false, err
	}
	key, err := parseCAKey(keyPEM)
	if err != nil {
		return nil, false, fmt.Errorf("%s: %w", keyPath, err)
	}
	certPEM, err := readFile(certPath)
	if errors.Is(err, fs.ErrNotExist) {
		ca, err := selfSign(key, time.Now())
		if err != nil {
			return nil, false, err
		}
		if err := writeFileAtomic(certPath, ca.certPEM, 0o644); err != nil {
			return nil, false, err
		}
		return ca, true, nil
	}
	if err != nil {
		return nil, false, err
	}
	ca, err = parseCACert(certPEM, key, time.Now())
	if err != nil {
		return nil, false, fmt.Errorf("%s: %w", certPath, err)
	}
	return ca, false, nil
}

// CertPEM returns the CA certificate, PEM-encoded, for clients and agents to
// trust.
func (ca *CA) CertPEM() []byte {
	return bytes.Clone(ca.certPEM)
}

// Pool returns a new pool holding only the CA certificate, for RootCAs and
// ClientCAs. It is new on each call because a CertPool is mutable.
func (ca *CA) Pool() *x509.CertPool {
	pool := x509.NewCertPool()
	pool.AddCert(ca.cert)
	return pool
}

func createCA(dir string) (*CA, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, err
	}
	keyPEM := pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})
	if err := writeFileAtomic(filepath.Join(dir, CAKeyFile), keyPEM, 0o600); err != nil {
		return nil, err
	}
	ca, err := selfSign(key, time.Now())
	if err != nil {
		return nil, err
	}
	if err := writeFileAtomic(filepath.Join(dir, CACertFile), ca.certPEM, 0o644); err != nil {
		return nil, err
	}
	return ca, nil
}

// selfSign makes the CA certificate for key. It signs leaves only
// (MaxPathLen 0): there are no intermediate CAs to trust by mistake.
func selfSign(key *ecdsa.PrivateKey, now time.Time) (*CA, error) {
	tmpl := &x509.Certificate{
		// SerialNumber nil: crypto/x509 picks a random, RFC 5280 compliant one.
		Subject:               pkix.Name{CommonName: caCommonName},
		NotBefore:             now.Add(-clockSkew),
		NotAfter:              now.AddDate(caYears, 0, 0),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("CA certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("CA certificate: %w", err)
	}
	return &CA{cert: cert, key: key, certPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}, nil
}

// parseCAKey reads the CA key: PKCS#8 ("PRIVATE KEY", what the CA writes) or
// SEC 1 ("EC PRIVATE KEY", what openssl ecparam writes), ECDSA P-256 only.
func parseCAKey(keyPEM []byte) (*ecdsa.PrivateKey, error) {
	block, err := onePEMBlock(keyPEM)
	if err != nil {
		return nil, err
	}
	var key any
	switch block.Type {
	case "PRIVATE KEY":
		key, err = x509.ParsePKCS8PrivateKey(block.Bytes)
	case "EC PRIVATE KEY":
		key, err = x509.ParseECPrivateKey(block.Bytes)
	default:
		return nil, fmt.Errorf("PEM block %q, want PRIVATE KEY", block.Type)
	}
	if err != nil {
		return nil, err
	}
	ec, ok := key.(*ecdsa.PrivateKey)
	if !ok || ec.Curve != elliptic.P256() {
		return nil, fmt.Errorf("a %T key, want ECDSA P-256", key)
	}
	return ec, nil
}

// parseCACert reads the CA certificate and checks that it is a CA, for key,
// self-signed and not expired at now. An expired CA is refused here rather
// than found out when every leaf it signs fails to verify.
func parseCACert(certPEM []byte, key *ecdsa.PrivateKey, now time.Time) (*CA, error) {
	block, err := onePEMBlock(certPEM)
	if err != nil {
		return nil, err
	}
	if block.Type != "CERTIFICATE" {
		return nil, fmt.Errorf("PEM block %q, want CERTIFICATE", block.Type)
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return nil, err
	}
	pub, ok := cert.PublicKey.(*ecdsa.PublicKey)
	switch {
	case !cert.BasicConstraintsValid || !cert.IsCA || cert.KeyUsage&x509.KeyUsageCertSign == 0:
		return nil, errors.New("not a CA certificate")
	case !ok || !pub.Equal(&key.PublicKey):
		return nil, fmt.Errorf("not the certificate of %s", CAKeyFile)
	case !now.Before(cert.NotAfter):
		return nil, fmt.Errorf("the CA expired at %s; remove %s and %s to create a new one (every agent then joins again)",
			cert.NotAfter.UTC().Format(time.RFC3339), CACertFile, CAKeyFile)
	}
	if err := cert.CheckSignatureFrom(cert); err != nil {
		return nil, fmt.Errorf("not self-signed: %w", err)
	}
	return &CA{cert: cert, key: key, certPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert.Raw})}, nil
}

// onePEMBlock decodes data that holds exactly one PEM block, so that a file
// with a second key or certificate appended is not half read.
func onePEMBlock(data []byte) (*pem.Block, error) {
	block, rest := pem.Decode(data)
	if block == nil {
		return nil, errors.New("no PEM block")
	}
	if len(bytes.TrimSpace(rest)) != 0 {
		return nil, errors.New("more than one PEM block")
	}
	return block, nil
}

// readKeyFile reads the CA key, refusing it if its group or others have any
// access. The mode is read from the open file, so it is the file read.
func readKeyFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is not a regular file", path)
	}
	if perm := fi.Mode().Perm(); perm&0o077 != 0 {
		return nil, fmt.Errorf("%s has mode %#o: it is the CA's private key, which signs the identities of the control plane and every agent, "+
			"so only its owner may read it (chmod 600 %s)", path, perm, path)
	}
	return readLimited(f, path)
}

func readFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return readLimited(f, path)
}

func readLimited(f *os.File, path string) ([]byte, error) {
	data, err := io.ReadAll(io.LimitReader(f, maxPEMFile+1))
	if err != nil {
		return nil, err
	}
	if len(data) > maxPEMFile {
		return nil, fmt.Errorf("%s is over %d bytes", path, maxPEMFile)
	}
	return data, nil
}

// writeFileAtomic writes path with mode through a synced temp file in the
// same directory and a rename, then syncs the directory: after a crash the
// file is either whole or absent.
func writeFileAtomic(path string, data []byte, mode os.FileMode) (err error) {
	dir := filepath.Dir(path)
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	// CreateTemp made it 0600; Chmod sets mode exactly, whatever the umask.
	if err := tmp.Chmod(mode); err != nil {
		return err
	}
	if _, err := tmp.Write(data); err != nil {
		return err
	}
	if err := tmp.Sync(); err != nil {
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return err
	}
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
