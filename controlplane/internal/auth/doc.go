// Package auth owns the control plane's identities: principals and their
// scopes, bearer tokens, and the certificate authority that ties the
// control plane and its agents together over mutual TLS.
//
// A principal ([Principal]) is a token's name and scopes. A token's secret
// ([NewSecret]) is "bpt_" and 256 random bits in base64url; the control
// plane keeps only its [HashSecret]. [ParseBearer] reads the secret from an
// "authorization" header and refuses anything that is not exactly one such
// token, so junk never reaches a store lookup.
//
// The CA ([LoadOrCreateCA]) lives in the data dir:
//
//	<data-dir>/
//	├── ca.pem      the CA certificate (mode 0644): clients and agents trust it
//	└── ca-key.pem  its ECDSA P-256 key, PKCS#8 (mode 0600): refused if others may read it
//
// It issues three kinds of leaf, all ECDSA P-256:
//
//	leaf                 CommonName      SANs                                  ExtKeyUsage
//	CA.ServerCert        controlplane    hosts + localhost, 127.0.0.1, ::1     server
//	CA.ClientCert        name            none                                  client
//	CA.SignAgent         agent id        AgentServerName(agent id) only        server, client
//
// An agent certificate's one SAN, "<agent id in lower case>" +
// ".agent.blendplane.invalid", is under the ".invalid" top-level domain,
// reserved by RFC 2606 never to name a host: clients trust the same CA for
// the control plane's listener, and no name or address an agent claims can
// make its certificate pass for the control plane's. The control plane
// dials an agent with ServerName = [AgentServerName](agent id) and checks
// [VerifyAgent]; an agent serves AgentService only to a client for which
// [VerifyControlPlane] holds. agentd does not import this package (the
// daemons share only gen/): it builds its own CSR with crypto/x509 and
// repeats the control plane check itself.
//
// Nothing here keeps state but the CA's two files.
package auth
