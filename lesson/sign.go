package lesson

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"os"

	"github.com/blendplane/blendplane/internal/jcs"
)

// SigningPayload is what a lesson's signature covers: the RFC 8785
// canonical JSON of {"lesson": …, "metadata": …}, the pack without its
// signature (metadata null when absent).
func SigningPayload(lesson []Step, metadata json.RawMessage) ([]byte, error) {
	if len(metadata) == 0 {
		metadata = json.RawMessage("null")
	}
	raw, err := json.Marshal(struct {
		Lesson   []Step          `json:"lesson"`
		Metadata json.RawMessage `json:"metadata"`
	}{lesson, metadata})
	if err != nil {
		return nil, err
	}
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		return nil, err
	}
	return jcs.Marshal(v)
}

// Sign signs a pack with key and sets its signature (base64, standard).
func Sign(p *Pack, key ed25519.PrivateKey) error {
	payload, err := SigningPayload(p.Lesson, p.Metadata)
	if err != nil {
		return err
	}
	sig := base64.StdEncoding.EncodeToString(ed25519.Sign(key, payload))
	p.Signature = &sig
	return nil
}

// Verify reports whether a pack's signature verifies against one of keys.
func Verify(p *Pack, keys []ed25519.PublicKey) error {
	if p.Signature == nil || *p.Signature == "" {
		return errors.New("the lesson is not signed")
	}
	sig, err := base64.StdEncoding.DecodeString(*p.Signature)
	if err != nil || len(sig) != ed25519.SignatureSize {
		return errors.New("signature: not base64 of an Ed25519 signature")
	}
	payload, err := SigningPayload(p.Lesson, p.Metadata)
	if err != nil {
		return fmt.Errorf("signing payload: %w", err)
	}
	for _, k := range keys {
		if ed25519.Verify(k, payload, sig) {
			return nil
		}
	}
	return errors.New("the signature does not verify against any configured lesson key")
}

// GenerateKey writes a new Ed25519 key pair as PEM: the private key
// (PKCS #8, mode 0600) and the public key (SubjectPublicKeyInfo), the
// formats `openssl genpkey -algorithm ed25519` and `openssl pkey -pubout`
// write.
func GenerateKey(privateFile, publicFile string) error {
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return err
	}
	p8, err := x509.MarshalPKCS8PrivateKey(priv)
	if err != nil {
		return err
	}
	spki, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		return err
	}
	if err := os.WriteFile(privateFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: p8}), 0o600); err != nil {
		return err
	}
	return os.WriteFile(publicFile, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: spki}), 0o644)
}

// LoadPrivateKey reads a PEM PKCS #8 Ed25519 private key.
func LoadPrivateKey(file string) (ed25519.PrivateKey, error) {
	block, err := readPEM(file, "PRIVATE KEY")
	if err != nil {
		return nil, err
	}
	k, err := x509.ParsePKCS8PrivateKey(block)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	ek, ok := k.(ed25519.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("%s: not an Ed25519 key", file)
	}
	return ek, nil
}

// LoadPublicKey reads a PEM SubjectPublicKeyInfo Ed25519 public key.
func LoadPublicKey(file string) (ed25519.PublicKey, error) {
	block, err := readPEM(file, "PUBLIC KEY")
	if err != nil {
		return nil, err
	}
	k, err := x509.ParsePKIXPublicKey(block)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	ek, ok := k.(ed25519.PublicKey)
	if !ok {
		return nil, fmt.Errorf("%s: not an Ed25519 key", file)
	}
	return ek, nil
}

func readPEM(file, typ string) ([]byte, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	block, _ := pem.Decode(data)
	if block == nil || block.Type != typ {
		return nil, fmt.Errorf("%s: no PEM %q block", file, typ)
	}
	return block.Bytes, nil
}
