// Package openapi holds the OpenAPI 3.1 document of the public API's
// REST/JSON routes, generated from proto/ by protoc-gen-openapiv3 (make
// generate) and served at /openapi.json.
package openapi

import _ "embed"

// Document is blendplane/controlplane/v1/controlplane.openapi.json.
//
//go:embed blendplane/controlplane/v1/controlplane.openapi.json
var Document []byte
