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

var packSchema = func() *jsonschema.Schema {
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(PackSchema))
	if err != nil {
		panic(err)
	}
	c := jsonschema.NewCompiler()
	if err := c.AddResource("lesson-pack.schema.json", doc); err != nil {
		panic(err)
	}
	s, err := c.Compile("lesson-pack.schema.json")
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
