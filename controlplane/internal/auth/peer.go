package auth

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"slices"
)

// ControlPlaneName is the CommonName of the control plane's certificates,
// the only client certificate agents serve AgentService to.
const ControlPlaneName = "controlplane"

// VerifyAgent checks, in a tls.Config's VerifyConnection on the control
// plane's side, that the peer is agent agentID: its verified certificate is
// an agent certificate ([CA.SignAgent]: server and client) with CommonName
// agentID and a DNS SAN [AgentServerName](agentID). The handshake checks
// the SAN already when ServerName is AgentServerName(agentID); VerifyAgent
// also holds if a caller forgot that, and refuses the control plane's own
// server certificate (server only). The CommonName check is exact: server
// names ignore case, so "Agent-1" and "agent-1" share one.
func VerifyAgent(cs tls.ConnectionState, agentID string) error {
	leaf, err := verifiedLeaf(cs)
	if err != nil {
		return err
	}
	if leaf.Subject.CommonName != agentID {
		return fmt.Errorf("the peer's certificate is for %q, not agent %q", leaf.Subject.CommonName, agentID)
	}
	if err := leaf.VerifyHostname(AgentServerName(agentID)); err != nil {
		return fmt.Errorf("the peer's certificate is not for agent %q: %w", agentID, err)
	}
	if !hasExtKeyUsage(leaf, x509.ExtKeyUsageServerAuth) || !hasExtKeyUsage(leaf, x509.ExtKeyUsageClientAuth) {
		return fmt.Errorf("the peer's certificate for %q is not an agent certificate", agentID)
	}
	return nil
}

// VerifyControlPlane checks, in a tls.Config's VerifyConnection on an
// agent's side, that the peer is the control plane: its verified
// certificate has CommonName ControlPlaneName and is a client certificate
// only ([CA.ClientCert]). An agent certificate (server and client) is never
// the control plane's, whatever its name, so that one agent cannot drive
// another even if the CA once signed an agent id "controlplane".
func VerifyControlPlane(cs tls.ConnectionState) error {
	leaf, err := verifiedLeaf(cs)
	if err != nil {
		return err
	}
	if leaf.Subject.CommonName != ControlPlaneName {
		return fmt.Errorf("the peer's certificate is for %q: only the control plane (%q) may call", leaf.Subject.CommonName, ControlPlaneName)
	}
	if !hasExtKeyUsage(leaf, x509.ExtKeyUsageClientAuth) || hasExtKeyUsage(leaf, x509.ExtKeyUsageServerAuth) {
		return fmt.Errorf("the peer's certificate for %q is not the control plane's client certificate", ControlPlaneName)
	}
	return nil
}

// errNotVerified is a peer certificate that the handshake did not verify.
var errNotVerified = errors.New("the peer's certificate was not verified against the CA " +
	"(want RootCAs or ClientCAs = CA.Pool(), and ClientAuth = tls.RequireAndVerifyClientCert on servers)")

// verifiedLeaf is the peer's certificate as the handshake verified it.
// PeerCertificates alone is not enough: with InsecureSkipVerify or
// ClientAuth below RequireAndVerifyClientCert, it holds whatever the peer
// sent.
func verifiedLeaf(cs tls.ConnectionState) (*x509.Certificate, error) {
	if len(cs.VerifiedChains) == 0 || len(cs.VerifiedChains[0]) == 0 {
		return nil, errNotVerified
	}
	return cs.VerifiedChains[0][0], nil
}

func hasExtKeyUsage(c *x509.Certificate, u x509.ExtKeyUsage) bool {
	return slices.Contains(c.ExtKeyUsage, u)
}
