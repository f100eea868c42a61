package e2e

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"testing"
	"time"
)

// TestMCPStdioMalformedLines: `blendctl mcp` answers a line that is not
// JSON (-32700) or not a JSON-RPC message (-32600: no "jsonrpc", a batch)
// with an error of id null, before and after initialize, and goes on
// serving: tools/list after them is answered, and the process runs until
// the host hangs up.
func TestMCPStdioMalformedLines(t *testing.T) {
	c := startCluster(t)
	cmd := c.blendctl("mcp")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr := &syncBuffer{}
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	lines := make(chan map[string]any)
	go func() {
		sc := bufio.NewScanner(stdout)
		sc.Buffer(nil, 16<<20)
		for sc.Scan() {
			var m map[string]any
			if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
				m = map[string]any{"not_json": sc.Text()}
			}
			lines <- m
		}
		close(lines)
		exited <- cmd.Wait()
	}()
	t.Cleanup(func() {
		cmd.Process.Kill()
		if t.Failed() {
			t.Logf("blendctl mcp's stderr:\n%s", stderr.String())
		}
	})
	send := func(line string) {
		t.Helper()
		if _, err := io.WriteString(stdin, line+"\n"); err != nil {
			t.Fatalf("writing %q: %v (has blendctl mcp exited?)", line, err)
		}
	}
	// next reads messages until the response with id (a number), and
	// returns it with the error responses read on the way.
	next := func(id float64) (map[string]any, []map[string]any) {
		t.Helper()
		var errs []map[string]any
		for {
			select {
			case m, ok := <-lines:
				if !ok {
					t.Fatalf("stdout closed before the response %v; errors so far %v", id, errs)
				}
				if m["id"] == id {
					return m, errs
				}
				if _, ok := m["error"]; ok && m["id"] == nil {
					errs = append(errs, m)
				}
			case <-time.After(30 * time.Second):
				t.Fatalf("no response %v within 30s; errors so far %v", id, errs)
			}
		}
	}
	code := func(m map[string]any) string { e, _ := m["error"].(map[string]any); return fmt.Sprint(e["code"]) }

	send(`garbage`)
	send(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"robust","version":"1"}}}`)
	init, errs := next(1)
	if init["result"] == nil || len(errs) != 1 || code(errs[0]) != "-32700" {
		t.Fatalf("garbage, then initialize: %v, errors %v", init, errs)
	}
	send(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	send(`{not json at all`)
	send(`{"id":7,"method":"tools/list"}`)
	send(`[{"jsonrpc":"2.0","id":8,"method":"ping"}]`)
	send(`{"jsonrpc":"2.0","id":2,"method":"tools/list"}`)
	list, errs := next(2)
	tools, _ := list["result"].(map[string]any)["tools"].([]any)
	if len(tools) == 0 {
		t.Fatalf("tools/list after the malformed lines: %v", list)
	}
	if len(errs) != 3 || code(errs[0]) != "-32700" || code(errs[1]) != "-32600" || code(errs[2]) != "-32600" {
		t.Fatalf("the malformed lines' answers: %v", errs)
	}
	select {
	case err := <-exited:
		t.Fatalf("blendctl mcp exited: %v", err)
	default:
	}
	// Still serving; and it ends cleanly when the host hangs up.
	send(`{"jsonrpc":"2.0","id":3,"method":"ping"}`)
	if pong, _ := next(3); pong["result"] == nil {
		t.Fatalf("ping: %v", pong)
	}
	stdin.Close()
	for range lines {
	}
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("blendctl mcp after the host hung up: %v", err)
		}
	case <-time.After(40 * time.Second):
		t.Fatal("blendctl mcp did not exit after stdin closed")
	}
}
