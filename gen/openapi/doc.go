// Package openapi holds the OpenAPI (Swagger 2.0) document of the public
// API, blendplane.swagger.json, generated from proto/ by
// protoc-gen-openapiv2 (make generate) and served at /openapi.json.
package openapi

import _ "embed"

// Document is blendplane.swagger.json.
//
//go:embed blendplane.swagger.json
var Document []byte
