package e2e

import (
	"fmt"
	"testing"
)

// errorRecorder is a testing.TB that keeps what Errorf reports.
type errorRecorder struct {
	testing.TB
	errs []string
}

func (r *errorRecorder) Errorf(format string, args ...any) {
	r.errs = append(r.errs, fmt.Sprintf(format, args...))
}

// TestCheckLog: checkLog, which every daemon's log goes through when its
// test ends, tells a repeated key, a call that finished Internal, a
// recovered panic and a race detector's report from lines that only look
// like them.
func TestCheckLog(t *testing.T) {
	for _, c := range []struct {
		line  string
		fails bool
	}{
		{`time=T level=INFO msg="plan running" daemon=controlplane component=executor request_id=r1`, false},
		{`time=T level=INFO msg="plan running" daemon=controlplane component=app component=executor`, true},
		{`time=T level=INFO msg="client log level set" daemon=controlplane component=mcp level=debug`, true},
		{`time=T level=INFO msg="client log level set" daemon=controlplane component=mcp sdk.level=debug`, false},
		{`time=T level=WARN msg="a value with level=x and \"msg=y\" in it" err="component=z"`, false},
		{`time=T level=WARN msg="finished call" daemon=controlplane grpc.code=Internal grpc.error="boom"`, true},
		{`time=T level=WARN msg="finished call" daemon=controlplane grpc.code=InvalidArgument`, false},
		{`time=T level=WARN msg="a call" note="finished call" grpc.code=Unknown`, false},
		{`time=T level=ERROR msg="recovered a panic" daemon=controlplane call="mcp tools/call" panic="boom"`, true},
		{`time=T level=INFO msg="plan running" note="recovered a panic"`, false},
		{`WARNING: DATA RACE`, true},
		{`Blender's own output, level=1 level=2`, false},
	} {
		r := &errorRecorder{TB: t}
		d := &daemon{name: "controlplane", log: &syncBuffer{}}
		d.log.Write([]byte(c.line + "\n"))
		checkLog(r, d)
		if got := len(r.errs) > 0; got != c.fails {
			t.Errorf("checkLog(%s): errors %q, want failing %v", c.line, r.errs, c.fails)
		}
	}
}
