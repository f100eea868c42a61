// Package llmreplay serves scripted answers in the wire formats of the LLM
// APIs the planner calls (OpenAI's chat completions and Gemini's
// streamGenerateContent, both streamed as server-sent events), so that
// tests drive the real SDK clients over real HTTP with no internet. It
// records what the clients sent.
package llmreplay

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
)

// Reply is one scripted model turn: text, function calls, or (Status set)
// an HTTP error in the API's error format.
type Reply struct {
	Text   string
	Calls  []Call
	Status int
}

// Call is a function call by its registry name, with its arguments as JSON
// text (for OpenAI it may be invalid JSON on purpose; Gemini's wire carries
// only objects).
type Call struct {
	Name string
	Args string
}

// Server is a scripted API server.
type Server struct {
	srv    *httptest.Server
	gemini bool

	mu       sync.Mutex
	script   []Reply
	requests []map[string]any
	auth     []string
	calls    int
}

// NewOpenAI serves POST /v1/chat/completions.
func NewOpenAI() *Server {
	s := &Server{}
	s.srv = httptest.NewServer(http.HandlerFunc(s.serve))
	return s
}

// NewGemini serves POST /v1beta/models/{model}:streamGenerateContent.
func NewGemini() *Server {
	s := &Server{gemini: true}
	s.srv = httptest.NewServer(http.HandlerFunc(s.serve))
	return s
}

// URL is the base URL to give the SDK.
func (s *Server) URL() string {
	if s.gemini {
		return s.srv.URL + "/"
	}
	return s.srv.URL + "/v1/"
}

// Push appends replies to the script.
func (s *Server) Push(r ...Reply) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.script = append(s.script, r...)
}

// Pending is how many scripted replies are left.
func (s *Server) Pending() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.script)
}

// Requests are the request bodies received, oldest first.
func (s *Server) Requests() []map[string]any {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]map[string]any(nil), s.requests...)
}

// AuthHeaders are the credentials of each request: OpenAI's Authorization
// header, Gemini's x-goog-api-key.
func (s *Server) AuthHeaders() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.auth...)
}

// Close stops the server.
func (s *Server) Close() { s.srv.Close() }

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	want := "/v1/chat/completions"
	if s.gemini {
		want = ":streamGenerateContent"
	}
	if r.Method != http.MethodPost || !strings.HasSuffix(r.URL.Path, want) {
		s.fail(w, http.StatusNotFound, "no route "+r.Method+" "+r.URL.Path)
		return
	}
	body, _ := io.ReadAll(r.Body)
	var req map[string]any
	if err := json.Unmarshal(body, &req); err != nil {
		s.fail(w, http.StatusBadRequest, "body is not JSON: "+err.Error())
		return
	}
	s.mu.Lock()
	s.requests = append(s.requests, req)
	if s.gemini {
		s.auth = append(s.auth, r.Header.Get("x-goog-api-key"))
	} else {
		s.auth = append(s.auth, r.Header.Get("Authorization"))
	}
	var reply Reply
	ok := len(s.script) > 0
	if ok {
		reply, s.script = s.script[0], s.script[1:]
	}
	s.calls++
	n := s.calls
	s.mu.Unlock()
	switch {
	case !ok:
		s.fail(w, http.StatusInternalServerError, "llmreplay: the script is exhausted")
	case reply.Status != 0:
		s.fail(w, reply.Status, "scripted failure")
	case s.gemini:
		s.geminiStream(w, reply, n)
	default:
		s.openAIStream(w, reply, n, fmt.Sprint(req["model"]))
	}
}

// fail answers in the API's error format.
func (s *Server) fail(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	if s.gemini {
		json.NewEncoder(w).Encode(map[string]any{"error": map[string]any{"code": status, "message": msg, "status": "INTERNAL"}})
		return
	}
	json.NewEncoder(w).Encode(map[string]any{"error": map[string]any{"message": msg, "type": "server_error", "param": nil, "code": nil}})
}

// pieces splits text into a few deltas, as a streaming model sends it.
func pieces(text string) []string {
	if text == "" {
		return nil
	}
	words := strings.SplitAfter(text, " ")
	n := max(1, (len(words)+2)/3)
	var out []string
	for i := 0; i < len(words); i += n {
		out = append(out, strings.Join(words[i:min(i+n, len(words))], ""))
	}
	return out
}

func sse(w http.ResponseWriter, v any) {
	b, _ := json.Marshal(v)
	fmt.Fprintf(w, "data: %s\n\n", b)
	if f, ok := w.(http.Flusher); ok {
		f.Flush()
	}
}

// openAIStream answers as chat completions with stream: true: text deltas,
// tool calls as their first chunk (id, name) and argument fragments, a
// finish chunk, then [DONE]. Names go out as OpenAI allows them ('.' → '-').
func (s *Server) openAIStream(w http.ResponseWriter, reply Reply, n int, model string) {
	w.Header().Set("Content-Type", "text/event-stream")
	id := fmt.Sprintf("chatcmpl-replay-%d", n)
	chunk := func(delta map[string]any, finish any) map[string]any {
		return map[string]any{"id": id, "object": "chat.completion.chunk", "created": 1764000000, "model": model,
			"choices": []any{map[string]any{"index": 0, "delta": delta, "finish_reason": finish}}}
	}
	sse(w, chunk(map[string]any{"role": "assistant", "content": ""}, nil))
	for _, p := range pieces(reply.Text) {
		sse(w, chunk(map[string]any{"content": p}, nil))
	}
	for i, c := range reply.Calls {
		sse(w, chunk(map[string]any{"tool_calls": []any{map[string]any{"index": i, "id": fmt.Sprintf("call_%d_%d", n, i), "type": "function",
			"function": map[string]any{"name": strings.ReplaceAll(c.Name, ".", "-"), "arguments": ""}}}}, nil))
		args := c.Args
		for len(args) > 0 {
			k := min(len(args), 16)
			sse(w, chunk(map[string]any{"tool_calls": []any{map[string]any{"index": i, "function": map[string]any{"arguments": args[:k]}}}}, nil))
			args = args[k:]
		}
	}
	finish := "stop"
	if len(reply.Calls) > 0 {
		finish = "tool_calls"
	}
	sse(w, chunk(map[string]any{}, finish))
	fmt.Fprint(w, "data: [DONE]\n\n")
}

// geminiStream answers as streamGenerateContent?alt=sse: text in several
// chunks, then the function calls, the last chunk with finishReason.
func (s *Server) geminiStream(w http.ResponseWriter, reply Reply, n int) {
	w.Header().Set("Content-Type", "text/event-stream")
	resp := func(parts []any, finish string) map[string]any {
		cand := map[string]any{"content": map[string]any{"role": "model", "parts": parts}, "index": 0}
		if finish != "" {
			cand["finishReason"] = finish
		}
		return map[string]any{"candidates": []any{cand}, "modelVersion": "replay", "responseId": fmt.Sprintf("replay-%d", n)}
	}
	for _, p := range pieces(reply.Text) {
		sse(w, resp([]any{map[string]any{"text": p}}, ""))
	}
	var parts []any
	for i, c := range reply.Calls {
		var args map[string]any
		if err := json.Unmarshal([]byte(c.Args), &args); err != nil {
			args = map[string]any{} // Gemini's wire carries only objects
		}
		parts = append(parts, map[string]any{"functionCall": map[string]any{"id": fmt.Sprintf("fc-%d-%d", n, i), "name": c.Name, "args": args}})
	}
	if len(parts) == 0 {
		parts = []any{map[string]any{"text": ""}}
	}
	sse(w, resp(parts, "STOP"))
}
