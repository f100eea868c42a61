package planner

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"google.golang.org/genai"
)

// gemini is Google's Gemini API through the genai SDK.
type gemini struct {
	client *genai.Client
	model  string
}

// NewGemini is a provider on the Gemini API (BaseURL overrides Google's
// endpoint). Gemini's function names allow dots: registry names go as
// they are.
func NewGemini(ctx context.Context, cfg ProviderConfig) (Provider, error) {
	cc := &genai.ClientConfig{APIKey: cfg.APIKey, Backend: genai.BackendGeminiAPI, HTTPClient: cfg.HTTPClient}
	if cfg.BaseURL != "" {
		cc.HTTPOptions.BaseURL = cfg.BaseURL
	}
	client, err := genai.NewClient(ctx, cc)
	if err != nil {
		return nil, fmt.Errorf("gemini client: %w", err)
	}
	return &gemini{client: client, model: cfg.Model}, nil
}

func (p *gemini) Model() string { return p.model }

func (p *gemini) Generate(ctx context.Context, req Request, onDelta func(string)) (Turn, error) {
	var contents []*genai.Content
	for _, m := range req.Messages {
		switch m.Role {
		case RoleUser:
			contents = append(contents, genai.NewContentFromText(m.Text, genai.RoleUser))
		case RoleModel:
			c := &genai.Content{Role: genai.RoleModel}
			if m.Text != "" {
				c.Parts = append(c.Parts, &genai.Part{Text: m.Text})
			}
			for _, call := range m.Calls {
				var args map[string]any
				json.Unmarshal([]byte(call.Args), &args) // what the model sent was an object (Gemini's wire has no other)
				c.Parts = append(c.Parts, &genai.Part{FunctionCall: &genai.FunctionCall{ID: call.ID, Name: call.Name, Args: args}})
			}
			contents = append(contents, c)
		case RoleTool:
			c := &genai.Content{Role: genai.RoleUser}
			for _, r := range m.Results {
				var resp map[string]any
				if err := json.Unmarshal(r.Response, &resp); err != nil {
					resp = map[string]any{"output": string(r.Response)}
				}
				c.Parts = append(c.Parts, &genai.Part{FunctionResponse: &genai.FunctionResponse{ID: r.ID, Name: r.Name, Response: resp}})
			}
			contents = append(contents, c)
		}
	}
	var decls []*genai.FunctionDeclaration
	for _, f := range req.Functions {
		var schema map[string]any
		if err := json.Unmarshal(f.Parameters, &schema); err != nil {
			return Turn{}, fmt.Errorf("function %s: parameters: %w", f.Name, err)
		}
		decls = append(decls, &genai.FunctionDeclaration{Name: f.Name, Description: f.Description, ParametersJsonSchema: schema})
	}
	config := &genai.GenerateContentConfig{
		SystemInstruction: genai.NewContentFromText(req.System, genai.RoleUser),
		Temperature:       genai.Ptr[float32](0),
		Tools:             []*genai.Tool{{FunctionDeclarations: decls}},
	}
	var turn Turn
	for resp, err := range p.client.Models.GenerateContentStream(ctx, p.model, contents, config) {
		if err != nil {
			pe := &ProviderError{Provider: "gemini", Err: err}
			var apiErr genai.APIError
			if errors.As(err, &apiErr) {
				pe.Status = apiErr.Code
			}
			return Turn{}, pe
		}
		if len(resp.Candidates) == 0 || resp.Candidates[0].Content == nil {
			continue
		}
		for _, part := range resp.Candidates[0].Content.Parts {
			switch {
			case part.FunctionCall != nil:
				args, err := json.Marshal(part.FunctionCall.Args)
				if err != nil || part.FunctionCall.Args == nil {
					args = []byte("{}")
				}
				turn.Calls = append(turn.Calls, Call{ID: part.FunctionCall.ID, Name: part.FunctionCall.Name, Args: string(args)})
			case part.Text != "" && !part.Thought:
				turn.Text += part.Text
				if onDelta != nil {
					onDelta(part.Text)
				}
			}
		}
	}
	return turn, nil
}
