// Package openapi holds the OpenAPI 3.1 document of the public API's
// REST/JSON routes, generated from proto/ by protoc-gen-openapiv3 (make
// generate) and served at /openapi.json.
package openapi

import (
	_ "embed"
	"encoding/json"
	"strings"
	"sync"
)

//go:embed blendplane/controlplane/v1/controlplane.openapi.json
var generated []byte

// Document is blendplane/controlplane/v1/controlplane.openapi.json as
// served, with what protoc-gen-openapiv3 has no option for: the bearer
// token every route needs (components.securitySchemes and a top-level
// security requirement; a client generated without it sent no token), and
// the streams' answers as what they are, newline-delimited JSON
// (application/x-ndjson; as application/json, one object, a generated
// client failed to read a stream of more than one message).
// Built on first use, not at every control plane start.
var Document = sync.OnceValue(func() []byte { return served(generated) })

func served(doc []byte) []byte {
	var d map[string]any
	if err := json.Unmarshal(doc, &d); err != nil {
		panic("openapi: the generated document is not JSON: " + err.Error())
	}
	paths, _ := d["paths"].(map[string]any)
	for _, item := range paths {
		ops, _ := item.(map[string]any)
		for _, op := range ops { // an operation, or a path item's other fields (parameters)
			opMap, _ := op.(map[string]any)
			responses, _ := opMap["responses"].(map[string]any)
			ok, _ := responses["200"].(map[string]any)
			content, _ := ok["content"].(map[string]any)
			if desc, _ := ok["description"].(string); content != nil && strings.Contains(desc, "(streaming responses)") {
				content["application/x-ndjson"] = content["application/json"]
				delete(content, "application/json")
				ok["description"] = desc + " One JSON object per line (NDJSON): a message as {\"result\": …}, a failure after the first as a last {\"error\": …}."
			}
		}
	}
	components, _ := d["components"].(map[string]any)
	if components == nil {
		components = map[string]any{}
		d["components"] = components
	}
	components["securitySchemes"] = map[string]any{
		"bearer": map[string]any{"type": "http", "scheme": "bearer",
			"description": "A Blendplane token (blendctl token create), as Authorization: Bearer <token>."},
	}
	d["security"] = []any{map[string]any{"bearer": []any{}}}
	out, err := json.Marshal(d)
	if err != nil {
		panic(err)
	}
	return out
}
