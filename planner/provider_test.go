package planner

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"

	"google.golang.org/grpc/codes"

	"github.com/blendplane/blendplane/internal/llmreplay"
)

const testKey = "sk-unit-secret-42"

// conversation is a run's second turn: the prompt, the model's call, its
// result.
var conversation = Request{
	System: "be brief",
	Messages: []Message{
		{Role: RoleUser, Text: "add a cube"},
		{Role: RoleModel, Calls: []Call{{ID: "c1", Name: "object.create", Args: `{"type":"cube"}`}}},
		{Role: RoleTool, Results: []Result{{ID: "c1", Name: "object.create", Response: json.RawMessage(`{"status":"SUCCEEDED"}`)}}},
	},
	Functions: []Function{{Name: "object.create", Description: "make an object", Parameters: json.RawMessage(`{"type":"object"}`)}},
}

// TestProviders: each adapter, through its real SDK client against the
// scripted API: text streams as deltas, a dotted registry name survives
// the round trip, the conversation goes out in the API's shape, and an
// HTTP error becomes a ProviderError that names its status but never the
// key.
func TestProviders(t *testing.T) {
	for _, kind := range []string{"openai", "gemini"} {
		t.Run(kind, func(t *testing.T) {
			var srv *llmreplay.Server
			var p Provider
			var err error
			if kind == "openai" {
				srv = llmreplay.NewOpenAI()
				p, err = NewOpenAI(ProviderConfig{Model: "m", BaseURL: srv.URL(), APIKey: testKey})
			} else {
				srv = llmreplay.NewGemini()
				p, err = NewGemini(context.Background(), ProviderConfig{Model: "m", BaseURL: srv.URL(), APIKey: testKey})
			}
			if err != nil {
				t.Fatal(err)
			}
			defer srv.Close()
			srv.Push(llmreplay.Reply{Text: "one two three four five six"},
				llmreplay.Reply{Calls: []llmreplay.Call{{Name: "object.create", Args: `{"type": "cone", "name": "Spire"}`}}},
				llmreplay.Reply{Status: 429})

			var deltas []string
			turn, err := p.Generate(context.Background(), conversation, func(d string) { deltas = append(deltas, d) })
			if err != nil || turn.Text != "one two three four five six" || len(deltas) < 2 || strings.Join(deltas, "") != turn.Text {
				t.Fatalf("text: %+v %v (deltas %q)", turn, err, deltas)
			}
			sent, _ := json.Marshal(srv.Requests()[0])
			wantSent := map[string][]string{
				"openai": {`"object-create"`, `"tool_call_id":"c1"`, `"role":"tool"`, `"role":"system"`},
				"gemini": {`"functionResponse"`, `"functionCall"`, `"object.create"`, `"systemInstruction"`},
			}[kind]
			for _, w := range wantSent {
				if !strings.Contains(string(sent), w) {
					t.Errorf("the request lacks %s: %s", w, sent)
				}
			}

			turn, err = p.Generate(context.Background(), conversation, nil)
			if err != nil || len(turn.Calls) != 1 || turn.Calls[0].Name != "object.create" {
				t.Fatalf("call: %+v %v", turn, err)
			}
			var args map[string]any
			if err := json.Unmarshal([]byte(turn.Calls[0].Args), &args); err != nil || args["name"] != "Spire" {
				t.Fatalf("call args: %q", turn.Calls[0].Args)
			}

			_, err = p.Generate(context.Background(), conversation, nil)
			var pe *ProviderError
			if !errors.As(err, &pe) || pe.Status != 429 || pe.Provider != kind || strings.Contains(err.Error(), testKey) {
				t.Fatalf("error: %v", err)
			}
			want := "Bearer " + testKey
			if kind == "gemini" {
				want = testKey
			}
			if h := srv.AuthHeaders(); h[0] != want {
				t.Errorf("credentials sent: %q", h[0])
			}
		})
	}
}

// TestBoundedResult: a result over maxResultBytes reaches the model as its
// outcome, its start and that it was cut; a short one as it is.
func TestBoundedResult(t *testing.T) {
	small := json.RawMessage(`{"status":"SUCCEEDED"}`)
	if string(bounded(small)) != string(small) {
		t.Errorf("a short result changed: %s", bounded(small))
	}
	receipts := make([]any, 2000)
	for i := range receipts {
		receipts[i] = map[string]any{"operation_id": fmt.Sprintf("op%d", i), "result": map[string]any{"name": "é" + strings.Repeat("x", 40)}}
	}
	big := mustJSON(map[string]any{"status": "SUCCEEDED", "request_id": "r1", "receipts": receipts})
	got := bounded(big)
	var out map[string]any
	if err := json.Unmarshal(got, &out); err != nil || len(got) > maxResultBytes || out["truncated"] != true ||
		out["status"] != "SUCCEEDED" || out["request_id"] != "r1" || out["bytes"].(float64) != float64(len(big)) || !utf8.ValidString(out["start"].(string)) {
		t.Fatalf("a long result: %d bytes, %v, %.300s", len(got), err, got)
	}
}

type modelStub struct{}

func (modelStub) Model() string { return "stub" }
func (modelStub) Generate(context.Context, Request, func(string)) (Turn, error) {
	return Turn{}, errors.New("not called")
}

// TestRunsPerPrincipal: a principal with maxRunsPerPrincipal runs
// unfinished (running or waiting for approval) starts no other; another
// principal's runs do not count.
func TestRunsPerPrincipal(t *testing.T) {
	r := &Runtime{opts: Options{Provider: modelStub{}}, active: map[string]activeRun{}}
	for i := range maxRunsPerPrincipal {
		r.active[fmt.Sprintf("th-%d", i)] = activeRun{fmt.Sprintf("run-%d", i), "ana"}
	}
	r.active["th-bob"] = activeRun{"run-bob", "bob"}
	_, err := r.start("ana", "one more", "", nil)
	var e *Error
	if !errors.As(err, &e) || e.Code != codes.ResourceExhausted {
		t.Fatalf("a run past the limit: %v", err)
	}
	if r.activeOf("bob") != 1 || r.activeOf("ana") != maxRunsPerPrincipal {
		t.Fatalf("counts: bob %d, ana %d", r.activeOf("bob"), r.activeOf("ana"))
	}
}
