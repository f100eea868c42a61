package plan

import (
	"fmt"
	"net/url"
	"slices"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// ToolDef is what an agent reports for one tool.
type ToolDef struct {
	// Name is the dotted tool name, such as "object.create".
	Name string
	// Safety is the least level an operation must declare to call the tool.
	Safety SafetyLevel
	// InputSchema is the JSON Schema (draft 2020-12 unless it says otherwise
	// in "$schema") of the tool's args, as decoded JSON. It is required: a
	// tool without arguments still says {"type": "object",
	// "additionalProperties": false}.
	InputSchema map[string]any
	// Mode is the tool's safety mode: headless_safe, ui_assisted or unsafe_ops.
	Mode string
	// Rollback is how a call is undone: compensation, not_needed or none.
	Rollback string
	// Determinism is deterministic, seeded or nondeterministic.
	Determinism string
}

// Registry is one agent's tool registry with every input schema compiled.
// Compiling costs far more than checking a plan, so build a Registry once per
// registry fingerprint and share it: it is immutable and safe for concurrent
// use. It keeps the ToolDefs it was given; callers must not modify them.
type Registry struct {
	tools map[string]tool
	names []string // sorted
}

type tool struct {
	def    ToolDef
	schema *jsonschema.Schema
	quick  *quickSchema // nil: the schema is jsonschema's alone
	// sandboxArgs are the args marked SandboxPathKeyword, sorted.
	sandboxArgs []string
}

// NewRegistry compiles the input schema of every tool. It refuses empty or
// repeated names, unspecified safety levels, missing schemas, and schemas
// that do not compile (a malformed "x-max-bytes" included). Schemas may
// refer only to themselves and to the JSON Schema metaschemas: nothing is
// loaded from files or the network, because the schemas come from agents.
func NewRegistry(defs []ToolDef) (*Registry, error) {
	r := &Registry{tools: make(map[string]tool, len(defs)), names: make([]string, 0, len(defs))}
	for i, d := range defs {
		if d.Name == "" {
			return nil, fmt.Errorf("plan: tool %d has no name", i)
		}
		if _, dup := r.tools[d.Name]; dup {
			return nil, fmt.Errorf("plan: tool %q is defined twice", d.Name)
		}
		if !d.Safety.Valid() {
			return nil, fmt.Errorf("plan: tool %q: safety level %s", d.Name, d.Safety)
		}
		if d.InputSchema == nil {
			return nil, fmt.Errorf("plan: tool %q has no input schema", d.Name)
		}
		sch, err := compileSchema(d.Name, d.InputSchema)
		if err != nil {
			return nil, fmt.Errorf("plan: tool %q: input schema: %w", d.Name, err)
		}
		r.tools[d.Name] = tool{def: d, schema: sch, quick: compileQuick(d.InputSchema), sandboxArgs: sandboxArgs(d.InputSchema)}
		r.names = append(r.names, d.Name)
	}
	slices.Sort(r.names)
	return r, nil
}

// compileSchema compiles one tool's schema with compilers of its own, so
// that one tool's "$id" cannot shadow another's. It compiles twice. The
// first compile is plain JSON Schema and only checks the document against
// its draft's whole metaschema: once a vocabulary is registered, jsonschema
// v6 checks documents against the assertion vocabularies' metaschemas only,
// and malformed annotations (a numeric "title" or "format") would pass. The
// second compile adds Blendplane's [vocabulary] and is the one Check uses.
// Registries are compiled once per fingerprint, so the cost is paid rarely.
func compileSchema(name string, doc map[string]any) (*jsonschema.Schema, error) {
	if _, err := compileWith(name, doc, nil); err != nil {
		return nil, err
	}
	return compileWith(name, doc, vocabulary())
}

func compileWith(name string, doc map[string]any, vocab *jsonschema.Vocabulary) (*jsonschema.Schema, error) {
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	// No scheme loaders: a "$ref" to anything outside the schema itself
	// fails to compile instead of reading a file on the control plane.
	c.UseLoader(jsonschema.SchemeURLLoader{})
	if vocab != nil {
		// Drafts 2019-09 and later assert a vocabulary only if the
		// metaschema lists it, or with AssertVocabs.
		c.AssertVocabs()
		c.RegisterVocabulary(vocab)
	}
	loc := "urn:blendplane:tool:" + url.PathEscape(name)
	if err := c.AddResource(loc, doc); err != nil {
		return nil, err
	}
	return c.Compile(loc)
}

// Lookup returns the definition of the named tool.
func (r *Registry) Lookup(name string) (ToolDef, bool) {
	if r == nil {
		return ToolDef{}, false
	}
	t, ok := r.tools[name]
	return t.def, ok
}

// Names returns the tool names in lexical order.
func (r *Registry) Names() []string {
	if r == nil {
		return nil
	}
	return slices.Clone(r.names)
}

func (r *Registry) lookup(name string) (tool, bool) {
	if r == nil {
		return tool{}, false
	}
	t, ok := r.tools[name]
	return t, ok
}
