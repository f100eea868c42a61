package main

import (
	"fmt"
	"strings"
	"testing"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestDescribeError: a refusal says what the call was for, its status once
// (a wrapped status's own text repeated its code and message), its reason;
// a missing token says how blendctl sends one.
func TestDescribeError(t *testing.T) {
	st, err := status.New(codes.InvalidArgument, "TOOL_UNKNOWN: operation \"a\": no tool \"object.creat\"").
		WithDetails(&errdetails.ErrorInfo{Reason: "TOOL_UNKNOWN"})
	if err != nil {
		t.Fatal(err)
	}
	got := describeError(fmt.Errorf("submit typo.json: %w", st.Err()))
	want := "submit typo.json: InvalidArgument: TOOL_UNKNOWN: operation \"a\": no tool \"object.creat\"\n  reason: TOOL_UNKNOWN"
	if got != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
	if got := describeError(status.Error(codes.Unauthenticated, "no bearer token")); !strings.HasPrefix(got, "Unauthenticated: no bearer token\n  hint: blendctl sends the token of --token") {
		t.Errorf("no token: %s", got)
	}
	if got := describeError(fmt.Errorf("read x.json: %w", fmt.Errorf("boom"))); got != "read x.json: boom" {
		t.Errorf("not a status: %s", got)
	}
}
