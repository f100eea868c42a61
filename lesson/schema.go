package lesson

import (
	"bytes"
	_ "embed"
	"fmt"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// PackSchema is the lesson pack's JSON Schema (docs/lesson-pack.schema.json
// is the same file), which ParsePack validates every pack against.
//
//go:embed schema/lesson-pack.schema.json
var PackSchema []byte

// packSchemaURL is PackSchema's $id.
const packSchemaURL = "https://blendplane.dev/schemas/lesson-pack.schema.json"

var packSchema = func() *jsonschema.Schema {
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(PackSchema))
	if err != nil {
		panic(err)
	}
	// Added under its absolute $id: a relative name would resolve against
	// the working directory, which errors would then show to every client.
	c := jsonschema.NewCompiler()
	if err := c.AddResource(packSchemaURL, doc); err != nil {
		panic(err)
	}
	s, err := c.Compile(packSchemaURL)
	if err != nil {
		panic(err)
	}
	return s
}()

// validateSchema checks a decoded pack against PackSchema.
func validateSchema(body []byte) error {
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(body))
	if err != nil {
		return err
	}
	if err := packSchema.Validate(v); err != nil {
		return fmt.Errorf("%v", err)
	}
	return nil
}
