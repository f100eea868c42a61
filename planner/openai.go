package planner

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"strings"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/shared"
)

// ProviderConfig configures a provider.
type ProviderConfig struct {
	Model   string
	BaseURL string // empty: the provider's own endpoint
	APIKey  string
	// HTTPClient, if set, carries the calls (tests, proxies).
	HTTPClient *http.Client
}

// ProviderError is a provider's failure: which provider, and the HTTP
// status when the API answered with one. Its message never holds the
// response body or the key.
type ProviderError struct {
	Provider string
	Status   int // 0: no HTTP answer (connection, timeout, stream)
	Err      error
}

func (e *ProviderError) Error() string {
	if e.Status != 0 {
		return fmt.Sprintf("%s: HTTP %d", e.Provider, e.Status)
	}
	return fmt.Sprintf("%s: %v", e.Provider, e.Err)
}

func (e *ProviderError) Unwrap() error { return e.Err }

// StatusCode is the HTTP status (0: none).
func (e *ProviderError) StatusCode() int { return e.Status }

// openAI is an OpenAI-compatible chat completions endpoint.
type openAI struct {
	client openai.Client
	model  string
}

// NewOpenAI is a provider on an OpenAI-compatible chat completions
// endpoint: OpenAI's, or a local server's (Ollama, llama.cpp, vLLM) by its
// base URL. Local servers take any key.
func NewOpenAI(cfg ProviderConfig) (Provider, error) {
	key := cfg.APIKey
	if key == "" {
		key = "unused" // local servers ignore it; the SDK wants one
	}
	opts := []option.RequestOption{option.WithAPIKey(key), option.WithMaxRetries(0)}
	if cfg.BaseURL != "" {
		opts = append(opts, option.WithBaseURL(cfg.BaseURL))
	}
	if cfg.HTTPClient != nil {
		opts = append(opts, option.WithHTTPClient(cfg.HTTPClient))
	}
	return &openAI{client: openai.NewClient(opts...), model: cfg.Model}, nil
}

func (p *openAI) Model() string { return p.model }

// OpenAI's function names are ^[a-zA-Z0-9_-]{1,64}$: registry names use
// dots and never hyphens, so '.' ↔ '-' maps them both ways.
func openAIName(name string) string   { return strings.ReplaceAll(name, ".", "-") }
func registryName(name string) string { return strings.ReplaceAll(name, "-", ".") }

func (p *openAI) Generate(ctx context.Context, req Request, onDelta func(string)) (Turn, error) {
	params := openai.ChatCompletionNewParams{Model: p.model, Temperature: openai.Float(0)}
	params.Messages = append(params.Messages, openai.SystemMessage(req.System))
	for _, m := range req.Messages {
		switch m.Role {
		case RoleUser:
			params.Messages = append(params.Messages, openai.UserMessage(m.Text))
		case RoleModel:
			a := openai.ChatCompletionAssistantMessageParam{}
			if m.Text != "" {
				a.Content.OfString = openai.String(m.Text)
			}
			for _, c := range m.Calls {
				a.ToolCalls = append(a.ToolCalls, openai.ChatCompletionMessageToolCallUnionParam{OfFunction: &openai.ChatCompletionMessageFunctionToolCallParam{
					ID: c.ID, Function: openai.ChatCompletionMessageFunctionToolCallFunctionParam{Name: openAIName(c.Name), Arguments: c.Args}}})
			}
			params.Messages = append(params.Messages, openai.ChatCompletionMessageParamUnion{OfAssistant: &a})
		case RoleTool:
			for _, r := range m.Results {
				params.Messages = append(params.Messages, openai.ToolMessage(string(r.Response), r.ID))
			}
		}
	}
	for _, f := range req.Functions {
		var schema shared.FunctionParameters
		if err := json.Unmarshal(f.Parameters, &schema); err != nil {
			return Turn{}, fmt.Errorf("function %s: parameters: %w", f.Name, err)
		}
		params.Tools = append(params.Tools, openai.ChatCompletionFunctionTool(shared.FunctionDefinitionParam{
			Name: openAIName(f.Name), Description: openai.String(f.Description), Parameters: schema}))
	}

	stream := p.client.Chat.Completions.NewStreaming(ctx, params)
	defer stream.Close()
	var text strings.Builder
	type partial struct {
		id, name string
		args     strings.Builder
	}
	calls := map[int64]*partial{}
	for stream.Next() {
		chunk := stream.Current()
		if len(chunk.Choices) == 0 {
			continue
		}
		d := chunk.Choices[0].Delta
		if d.Content != "" {
			text.WriteString(d.Content)
			if onDelta != nil {
				onDelta(d.Content)
			}
		}
		for _, tc := range d.ToolCalls {
			c := calls[tc.Index]
			if c == nil {
				c = &partial{}
				calls[tc.Index] = c
			}
			if tc.ID != "" {
				c.id = tc.ID
			}
			if tc.Function.Name != "" {
				c.name = tc.Function.Name
			}
			c.args.WriteString(tc.Function.Arguments)
		}
	}
	if err := stream.Err(); err != nil {
		pe := &ProviderError{Provider: "openai", Err: err}
		var apiErr *openai.Error
		if errors.As(err, &apiErr) {
			pe.Status = apiErr.StatusCode
		}
		return Turn{}, pe
	}
	turn := Turn{Text: text.String()}
	idx := make([]int64, 0, len(calls))
	for i := range calls {
		idx = append(idx, i)
	}
	sort.Slice(idx, func(a, b int) bool { return idx[a] < idx[b] })
	for _, i := range idx {
		c := calls[i]
		args := c.args.String()
		if strings.TrimSpace(args) == "" {
			args = "{}" // a call without arguments
		}
		turn.Calls = append(turn.Calls, Call{ID: c.id, Name: registryName(c.name), Args: args})
	}
	return turn, nil
}
