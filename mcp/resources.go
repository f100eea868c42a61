package mcp

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"path"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/structpb"

	cpv1 "github.com/blendplane/blendplane/gen/blendplane/controlplane/v1"
	"github.com/blendplane/blendplane/planjson"
)

// Resource URIs of a session.
const (
	uriSummary  = "blendplane://session/summary"
	uriSnapshot = "blendplane://session/snapshot"
	uriRegistry = "blendplane://session/registry"
	// A file by name (its newest version), or one version of it by its
	// SHA-256 (the link a call returns: what that call wrote).
	uriArtifacts = "blendplane://session/artifacts/"
	uriArtifact  = uriArtifacts + "{name}{?sha256}"
)

// maxInlineImage is the largest render returned inline as image content;
// larger ones are only linked.
const maxInlineImage = 4 << 20

func (s *Session) addResources() {
	s.server.AddResource(&sdk.Resource{URI: uriSummary, Name: "scene-summary", MIMEType: "application/json",
		Description: "The session's scene: objects with type, location and material, the camera, counts (scene.get_summary)."},
		s.readTool("scene.get_summary"))
	s.server.AddResource(&sdk.Resource{URI: uriSnapshot, Name: "scene-snapshot", MIMEType: "application/json",
		Description: "The session's canonical scene_state_v1 snapshot (every tracked datablock) and its scene hash (scene.snapshot)."},
		s.readTool("scene.snapshot"))
	s.server.AddResource(&sdk.Resource{URI: uriRegistry, Name: "tool-registry", MIMEType: "application/json",
		Description: "The session's tool registry: every tool with its schema, safety level, determinism and rollback."},
		s.readRegistry)
	s.server.AddResourceTemplate(&sdk.ResourceTemplate{URITemplate: uriArtifact, Name: "artifact",
		Description: "A file of the session: a render, an export or an upload, by name (its newest version), or one version by ?sha256=."}, s.readArtifact)
}

// readTool reads a resource by running a read-only tool as a plan, so the
// read is receipted and audited like any call.
func (s *Session) readTool(tool string) sdk.ResourceHandler {
	return func(ctx context.Context, req *sdk.ReadResourceRequest) (*sdk.ReadResourceResult, error) {
		res, err := s.run(ctx, nil, []*cpv1.Operation{{OperationId: "read", ToolName: tool, Args: &structpb.Struct{},
			SafetyLevel: cpv1.SafetyLevel_SAFETY_LEVEL_READ_ONLY}}, false)
		if err != nil {
			return nil, err
		}
		raw, _ := res.StructuredContent.(json.RawMessage)
		if res.IsError {
			return nil, &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: fmt.Sprintf("%s failed: %s", tool, raw)}
		}
		var out struct {
			Result json.RawMessage `json:"result"`
		}
		if err := json.Unmarshal(raw, &out); err != nil {
			return nil, err
		}
		b := out.Result
		return &sdk.ReadResourceResult{Contents: []*sdk.ResourceContents{{URI: req.Params.URI, MIMEType: "application/json", Text: string(b)}}}, nil
	}
}

func (s *Session) readRegistry(ctx context.Context, req *sdk.ReadResourceRequest) (*sdk.ReadResourceResult, error) {
	resp, err := s.cp.ListTools(ctx, &cpv1.ListToolsRequest{SessionId: s.sessionID})
	if err != nil {
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: planjson.Describe(err)}
	}
	b, err := protojson.MarshalOptions{UseProtoNames: true}.Marshal(resp)
	if err != nil {
		return nil, err
	}
	return &sdk.ReadResourceResult{Contents: []*sdk.ResourceContents{{URI: req.Params.URI, MIMEType: "application/json", Text: string(b)}}}, nil
}

// readArtifact reads an artifact, by its plain name (and SHA-256, for one
// version), of at most maxResourceBytes: a larger one is for blendctl
// download or REST, not for one JSON-RPC message in the server's memory.
func (s *Session) readArtifact(ctx context.Context, req *sdk.ReadResourceRequest) (*sdk.ReadResourceResult, error) {
	rest, ok := strings.CutPrefix(req.Params.URI, uriArtifacts)
	escaped, rawQuery, _ := strings.Cut(rest, "?")
	name, err := url.PathUnescape(escaped)
	query, qerr := url.ParseQuery(rawQuery)
	if !ok || err != nil || qerr != nil || name == "" || name == "." || name == ".." || strings.ContainsAny(name, "/\\") {
		return nil, sdk.ResourceNotFoundError(req.Params.URI)
	}
	data, err := s.downloadUpTo(ctx, name, query.Get("sha256"), maxResourceBytes)
	if c := status.Code(err); c == codes.NotFound || c == codes.InvalidArgument { // no such name, or no such version
		return nil, sdk.ResourceNotFoundError(req.Params.URI)
	}
	if err != nil {
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: planjson.Describe(err)}
	}
	return &sdk.ReadResourceResult{Contents: []*sdk.ResourceContents{{URI: req.Params.URI, MIMEType: mimeOf(name), Blob: data}}}, nil
}

// maxResourceBytes is the largest artifact read as a resource.
const maxResourceBytes = 16 << 20

// artifactContent is what a call returns for a file it made (by is its
// receipt, which names the plan and operation): a link to the version it
// wrote (a later call may write the name again) and, for a PNG, the image
// itself, so a model can look at it. The artifact is listed among the
// session's resources from then on, by name.
func (s *Session) artifactContent(ctx context.Context, a *cpv1.Artifact, by *cpv1.Receipt) []sdk.Content {
	size := a.GetSizeBytes()
	uri := uriArtifacts + escapeName(a.GetName())
	// Listed by name, without a size: it reads the newest version, which a
	// later call or an upload may replace.
	s.server.AddResource(&sdk.Resource{URI: uri, Name: a.GetName(), MIMEType: mimeOf(a.GetName()),
		Description: "A file the session made (last by plan " + by.GetRequestId() + ", operation " + by.GetOperationId() + "), at its newest version."}, s.readArtifact)
	out := []sdk.Content{&sdk.ResourceLink{URI: uri + "?sha256=" + a.GetSha256(), Name: a.GetName(), MIMEType: mimeOf(a.GetName()), Size: &size}}
	if mimeOf(a.GetName()) != "image/png" || size > maxInlineImage {
		return out
	}
	data, err := s.downloadUpTo(ctx, a.GetName(), a.GetSha256(), maxInlineImage) // this call's version: a later one may have the name
	if err != nil {
		s.b.log.Warn("fetching a render for the call's result", "name", a.GetName(), "err", planjson.Describe(err))
		return out
	}
	return append([]sdk.Content{&sdk.ImageContent{Data: data, MIMEType: "image/png"}}, out...)
}

// downloadUpTo is an artifact's content (the newest version of name, or
// the one with sha256), refused (ResourceExhausted) when it is over limit
// bytes, before it is read.
func (s *Session) downloadUpTo(ctx context.Context, name, sha256 string, limit int64) ([]byte, error) {
	ctx, cancel := context.WithCancel(ctx) // an early return ends the stream
	defer cancel()
	stream, err := s.cp.DownloadArtifact(ctx, &cpv1.DownloadArtifactRequest{SessionId: s.sessionID, Name: name, Sha256: sha256})
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	for {
		resp, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return buf.Bytes(), nil
		}
		if err != nil {
			return nil, err
		}
		if size := max(resp.GetArtifact().GetSizeBytes(), int64(buf.Len()+len(resp.GetChunk()))); size > limit {
			return nil, status.Errorf(codes.ResourceExhausted, "%s is %d bytes or more, over the %d a resource read carries: "+
				"download it with blendctl download or GET /v1/sessions/{session_id}/artifacts/{name}", name, size, limit)
		}
		buf.Write(resp.GetChunk())
	}
}

func mimeOf(name string) string {
	switch strings.ToLower(path.Ext(name)) {
	case ".png":
		return "image/png"
	case ".glb":
		return "model/gltf-binary"
	case ".gltf":
		return "model/gltf+json"
	case ".obj":
		return "model/obj"
	}
	return "application/octet-stream"
}

// addPrompts adds prompts that show a model how to plan well.
func addPrompts(server *sdk.Server) {
	server.AddPrompt(&sdk.Prompt{Name: "plan-a-scene", Description: "Plan a scene from a description as one checked plan.",
		Arguments: []*sdk.PromptArgument{{Name: "description", Description: "what the scene should show", Required: true}}},
		func(ctx context.Context, req *sdk.GetPromptRequest) (*sdk.GetPromptResult, error) {
			if err := required(req, "description"); err != nil {
				return nil, err
			}
			return promptResult("Build this scene in Blendplane: " + req.Params.Arguments["description"] + `

1. Read blendplane://session/summary (or call scene.get_summary) to see what is there.
2. Write ONE plan.submit call: every object, material, light and camera as an operation with a short
   operation_id, depends_on where one step needs another (assign a material after creating both),
   safety_level as the tool says. The whole plan is checked before anything runs.
3. End with render.still (output "preview.png", a small resolution, a seed) to look at the result.
4. If the call fails, read its error_code, retry_hint and minimal_repair_plan, fix only those
   operations and submit again under the same plan shape.`), nil
		})
	server.AddPrompt(&sdk.Prompt{Name: "repair-a-failure", Description: "Repair a failed call from its failure contract.",
		Arguments: []*sdk.PromptArgument{{Name: "failure", Description: "the failed call's structured content (JSON)", Required: true}}},
		func(ctx context.Context, req *sdk.GetPromptRequest) (*sdk.GetPromptResult, error) {
			if err := required(req, "failure"); err != nil {
				return nil, err
			}
			return promptResult(`A Blendplane call failed with this failure contract:

` + req.Params.Arguments["failure"] + `

Nothing of a failed operation stays in the scene. Apply minimal_repair_plan: "replace_args" — change
only that operation's args as retry_hint says; "insert_precondition" — add the missing step (create
what was not found) before it; "drop" — leave the operation out; "retry" — call it again as it was.
If recoverable is false, tell the user instead of retrying.`), nil
		})
}

// required refuses a prompt without its required argument (Invalid
// params): the SDK does not check them, and the prompt made without it
// says nothing.
func required(req *sdk.GetPromptRequest, name string) error {
	if strings.TrimSpace(req.Params.Arguments[name]) == "" {
		return &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: fmt.Sprintf("prompt %s: argument %q is required", req.Params.Name, name)}
	}
	return nil
}

func promptResult(text string) *sdk.GetPromptResult {
	return &sdk.GetPromptResult{Messages: []*sdk.PromptMessage{{Role: "user", Content: &sdk.TextContent{Text: text}}}}
}

// escapeName percent-encodes every byte of a file name but the URI
// template's unreserved characters (RFC 6570 simple expansion): the SDK
// matches a read against uriArtifact's template, whose {name} takes no
// '+', '&', '=', ':', '@' or '$' as they are (url.PathEscape leaves them).
func escapeName(name string) string {
	var b strings.Builder
	for i := 0; i < len(name); i++ {
		c := name[i]
		if 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '.' || c == '_' || c == '~' {
			b.WriteByte(c)
		} else {
			fmt.Fprintf(&b, "%%%02X", c)
		}
	}
	return b.String()
}
