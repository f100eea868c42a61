//go:build !faults

package agentd

// testFaults is empty in production builds: fault injection is compiled
// only into test builds (faults.go).
func testFaults() []string { return nil }
