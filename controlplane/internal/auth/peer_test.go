package auth

import (
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"
)

// agentServerConfig is how agentd serves AgentService (agentd/identity.go,
// which repeats VerifyControlPlane's check since it cannot import it).
func agentServerConfig(ca *CA, cert tls.Certificate) *tls.Config {
	return &tls.Config{
		MinVersion:       tls.VersionTLS13,
		Certificates:     []tls.Certificate{cert},
		ClientAuth:       tls.RequireAndVerifyClientCert,
		ClientCAs:        ca.Pool(),
		VerifyConnection: VerifyControlPlane,
	}
}

// controlPlaneDialConfig is how the control plane dials agent agentID
// (controlplane.go), with serverName usually AgentServerName(agentID).
func controlPlaneDialConfig(ca *CA, client []tls.Certificate, serverName, agentID string) *tls.Config {
	return &tls.Config{
		MinVersion:       tls.VersionTLS13,
		Certificates:     client,
		RootCAs:          ca.Pool(),
		ServerName:       serverName,
		VerifyConnection: func(cs tls.ConnectionState) error { return VerifyAgent(cs, agentID) },
	}
}

// handshake runs one TLS connection over real loopback TCP and returns
// each side's error. The server writes a byte that the client reads: in
// TLS 1.3 the client's handshake ends before the server has checked the
// client's certificate, so a refusal reaches the client only as an alert
// on its first read.
func handshake(t *testing.T, server, client *tls.Config) (serverErr, clientErr error) {
	t.Helper()
	ln, err := tls.Listen("tcp", "127.0.0.1:0", server)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	done := make(chan error, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			done <- err
			return
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(10 * time.Second))
		if err := c.(*tls.Conn).Handshake(); err != nil {
			done <- err
			return
		}
		_, err = c.Write([]byte{1})
		done <- err
	}()
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 10 * time.Second}, "tcp", ln.Addr().String(), client)
	if err == nil {
		conn.SetDeadline(time.Now().Add(10 * time.Second))
		_, err = io.ReadFull(conn, make([]byte, 1))
		conn.Close()
	}
	return <-done, err
}

func TestMutualTLS(t *testing.T) {
	ca := newTestCA(t)
	other := newTestCA(t)
	const agentID = "agent-0a1b2c3d4e5f"
	agent := agentCert(t, ca, agentID)
	controlPlane := mustCert(t)(ca.ClientCert(ControlPlaneName, time.Hour))
	impostor := mustCert(t)(other.ClientCert(ControlPlaneName, time.Hour))
	// The control plane's server certificate, even one that names the agent.
	serverCert := mustCert(t)(ca.ServerCert([]string{AgentServerName(agentID)}, time.Hour))
	name := AgentServerName(agentID)

	tests := []struct {
		name                 string
		serverCert           tls.Certificate
		client               []tls.Certificate
		serverName           string
		serverWant, dialWant string // "" = no error; else part of the error
	}{
		{"control plane dials its agent", agent, []tls.Certificate{controlPlane}, name, "", ""},
		{"server names ignore case", agent, []tls.Certificate{controlPlane}, strings.ToUpper(name), "", ""},
		{"a client without a certificate", agent, nil, name, "certificate", "certificate required"},
		{"a client certificate from another CA", agent, []tls.Certificate{impostor}, name, "unknown authority", "unknown certificate authority"},
		{"an agent poses as the control plane", agent, []tls.Certificate{agentCert(t, ca, "agent-2")}, name, "only the control plane", "bad certificate"},
		{"the control plane's server certificate as a client", agent, []tls.Certificate{serverCert}, name, "key usage", "bad certificate"},
		{"an agent certificate for another id", agentCert(t, ca, "agent-2"), []tls.Certificate{controlPlane}, name, "bad certificate", "valid for " + AgentServerName("agent-2") + ", not " + name},
		{"an agent certificate from another CA", agentCert(t, other, agentID), []tls.Certificate{controlPlane}, name, "bad certificate", "unknown authority"},
		{"the bare agent id as server name", agent, []tls.Certificate{controlPlane}, agentID, "bad certificate", "valid for " + name + ", not " + agentID},
		// VerifyAgent holds even when ServerName is not the agent's.
		{"another agent under its own server name", agentCert(t, ca, "agent-2"), []tls.Certificate{controlPlane}, AgentServerName("agent-2"), "bad certificate", `not agent "` + agentID + `"`},
		{"an agent with the id in another case", agentCert(t, ca, strings.ToUpper(agentID)), []tls.Certificate{controlPlane}, name, "bad certificate", `not agent "` + agentID + `"`},
		{"the control plane's server certificate as an agent", serverCert, []tls.Certificate{controlPlane}, name, "bad certificate", `is for "controlplane"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			serverErr, dialErr := handshake(t, agentServerConfig(ca, tt.serverCert), controlPlaneDialConfig(ca, tt.client, tt.serverName, agentID))
			checkErr(t, "server", serverErr, tt.serverWant)
			checkErr(t, "client", dialErr, tt.dialWant)
		})
	}
}

func checkErr(t *testing.T, side string, err error, want string) {
	t.Helper()
	switch {
	case want == "" && err != nil:
		t.Errorf("%s: %v", side, err)
	case want != "" && (err == nil || !strings.Contains(err.Error(), want)):
		t.Errorf("%s: %v; want an error with %q", side, err, want)
	}
}

func mustCert(t testing.TB) func(tls.Certificate, error) tls.Certificate {
	return func(c tls.Certificate, err error) tls.Certificate {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
}

// verified is the ConnectionState of a handshake that verified leaf.
func verified(ca *CA, leaf *x509.Certificate) tls.ConnectionState {
	return tls.ConnectionState{PeerCertificates: []*x509.Certificate{leaf}, VerifiedChains: [][]*x509.Certificate{{leaf, ca.cert}}}
}

func TestVerifyAgent(t *testing.T) {
	ca := newTestCA(t)
	agent := agentCert(t, ca, "agent-1").Leaf
	// The control plane's server certificate, even one that names an agent
	// "controlplane" (which SignAgent refuses).
	controlPlane := mustCert(t)(ca.ServerCert([]string{AgentServerName(ControlPlaneName)}, time.Hour)).Leaf
	// What SignAgent refuses to make: an agent certificate without the
	// client usage.
	serverOnly, err := ca.sign(&x509.Certificate{Subject: pkix.Name{CommonName: "agent-1"}, DNSNames: []string{AgentServerName("agent-1")},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}, agent.PublicKey, time.Hour, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	// CommonName without the SAN.
	noSAN, err := ca.sign(&x509.Certificate{Subject: pkix.Name{CommonName: "agent-1"}, DNSNames: []string{AgentServerName("agent-2")},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}}, agent.PublicKey, time.Hour, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	// An agent certificate as an older CA made them: the bare id as SAN.
	bareID, err := ca.sign(&x509.Certificate{Subject: pkix.Name{CommonName: "agent-1"}, DNSNames: []string{"agent-1"},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}}, agent.PublicKey, time.Hour, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name string
		cs   tls.ConnectionState
		id   string
		want string
	}{
		{"the agent", verified(ca, agent), "agent-1", ""},
		{"another id", verified(ca, agent), "agent-2", `is for "agent-1", not agent "agent-2"`},
		{"an id in another case", verified(ca, agent), "Agent-1", "not agent"},
		{"no id", verified(ca, agent), "", "not agent"},
		{"not verified", tls.ConnectionState{PeerCertificates: []*x509.Certificate{agent}}, "agent-1", "not verified"},
		{"no certificate", tls.ConnectionState{}, "agent-1", "not verified"},
		{"empty chain", tls.ConnectionState{VerifiedChains: [][]*x509.Certificate{{}}}, "agent-1", "not verified"},
		{"the control plane's server certificate", verified(ca, controlPlane), "controlplane", "not an agent certificate"},
		{"server usage only", verified(ca, serverOnly), "agent-1", "not an agent certificate"},
		{"no SAN for the id", verified(ca, noSAN), "agent-1", "not for agent"},
		{"the bare id as SAN", verified(ca, bareID), "agent-1", "not for agent"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			checkErr(t, "VerifyAgent", VerifyAgent(tt.cs, tt.id), tt.want)
		})
	}
}

func TestVerifyControlPlane(t *testing.T) {
	ca := newTestCA(t)
	client := mustCert(t)(ca.ClientCert(ControlPlaneName, time.Hour)).Leaf
	someone := mustCert(t)(ca.ClientCert("someone", time.Hour)).Leaf
	server := mustCert(t)(ca.ServerCert(nil, time.Hour)).Leaf
	// What SignAgent refuses to make: an agent certificate named like the
	// control plane, as a CA of an older version might have.
	agentNamedControlPlane, err := ca.sign(&x509.Certificate{Subject: pkix.Name{CommonName: ControlPlaneName}, DNSNames: []string{AgentServerName(ControlPlaneName)},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}}, client.PublicKey, time.Hour, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name string
		cs   tls.ConnectionState
		want string
	}{
		{"the control plane", verified(ca, client), ""},
		{"another name", verified(ca, someone), `is for "someone"`},
		{"an agent", verified(ca, agentCert(t, ca, "agent-1").Leaf), `is for "agent-1"`},
		{"an agent named controlplane", verified(ca, agentNamedControlPlane), "not the control plane's client certificate"},
		{"the control plane's server certificate", verified(ca, server), "not the control plane's client certificate"},
		{"not verified", tls.ConnectionState{PeerCertificates: []*x509.Certificate{client}}, "not verified"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			err := VerifyControlPlane(tt.cs)
			checkErr(t, "VerifyControlPlane", err, tt.want)
			if tt.want == "not verified" && !errors.Is(err, errNotVerified) {
				t.Errorf("%v is not errNotVerified", err)
			}
		})
	}
}
