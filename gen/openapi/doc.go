// Package openapi holds the OpenAPI 3.1 document of the public API's
// REST/JSON routes, generated from proto/ by protoc-gen-openapiv3 (make
// generate) and served at /openapi.json.
package openapi

import (
	_ "embed"
	"encoding/json"
)

//go:embed blendplane/controlplane/v1/controlplane.openapi.json
var generated []byte

// Document is blendplane/controlplane/v1/controlplane.openapi.json with the
// bearer token every route needs declared (components.securitySchemes and
// a top-level security requirement): protoc-gen-openapiv3 has no option
// for it, and a client generated from a document without it sent no token.
var Document = withBearer(generated)

func withBearer(doc []byte) []byte {
	var d map[string]any
	if err := json.Unmarshal(doc, &d); err != nil {
		panic("openapi: the generated document is not JSON: " + err.Error())
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
