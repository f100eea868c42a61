package blender

import "testing"

// TestQuickSchema: the bridge's quick predicate of each tool's schema
// (schema.quick) passes exactly the values that schema.explain, the walk
// that names a failure, passes: over values made from each schema, mostly
// valid with a part broken, and over schemas using the keywords no tool
// uses yet (type lists, bounds, enums of numbers and booleans).
func TestQuickSchema(t *testing.T) {
	forEachRuntime(t, func(t *testing.T, rt Runtime) {
		runBridgeScript(t, rt, quickSchemaScript, "QUICK-SCHEMA-OK")
	})
}

const quickSchemaScript = `
import random, sys
sys.path.insert(0, sys.argv[sys.argv.index("--") + 1] if "--" in sys.argv else sys.argv[1])
import main, registry, schema
from common import ToolError

STRINGS = ["", "a", "Cube", "P00042", "Cube.001", "render.png", "out/frame.png", "../up", "/abs", "n" * 63,
           "n" * 64, "\u00e9" * 31, "\u00e9" * 32, "\u00e9" * 63, "\u00e9" * 64, "a\nb", "tab\t", "del\x7f", "x\n",
           "\ud800", "MESH", "cube", "plane", "POINT", "SUN", "CYCLES", "OBJECT", "glb", "fbx", "out.glb",
           "scene.fbx", "x.usda", "a.obj", "shot.PNG", "subdivision", "bevel", "location", "BLENDER_EEVEE"]
NUMBERS = [0, -0.0, 1, -1, 2, 3, 1.5, 0.5, -2.5, 7, 6.999, 63, 64, 100, 1000, 1e9, 1e300, -1e300, 0.001, 4096,
           10000, 65536, 24, 250, 0.25, 180, 2 ** 31, float("nan"), float("inf"), True, False]

def any_value(rng):
    k = rng.randrange(6)
    if k == 0:
        return None
    if k == 1:
        return rng.random() < 0.5
    if k == 2:
        return rng.choice(NUMBERS)
    if k == 3:
        return rng.choice(STRINGS)
    if k == 4:
        return [rng.choice(NUMBERS), rng.choice(STRINGS)]
    return {"k": rng.choice(STRINGS)}

def gen(rng, s, depth=0):
    if rng.randrange(25) == 0 or depth > 4:
        return any_value(rng)
    if "enum" in s:
        return any_value(rng) if rng.randrange(6) == 0 else rng.choice(s["enum"])
    t = s.get("type")
    types = t if isinstance(t, list) else [t] if t else ["string", "number", "integer", "array", "null", "boolean", "object"]
    t = rng.choice(types)
    if t == "object":
        props = s.get("properties", {})
        out = {k: gen(rng, props[k], depth + 1) for k in sorted(props) if rng.randrange(3) == 0}
        for r in s.get("required", []):
            if rng.randrange(20):
                out[r] = gen(rng, props[r], depth + 1) if r in props else any_value(rng)
        if rng.randrange(20) == 0:
            out["unknown_key"] = 1
        return out
    if t == "array":
        n = rng.randrange(6)
        if "minItems" in s and rng.randrange(4):
            n = s["minItems"] + rng.randrange(2)
        return [gen(rng, s.get("items", {}), depth + 1) for _ in range(n)]
    if t == "string":
        return rng.choice(STRINGS)
    if t in ("number", "integer"):
        return rng.choice(NUMBERS)
    if t == "boolean":
        return rng.random() < 0.5
    return None

def passes(s, v):
    try:
        schema.explain(s, v, "args")
        return True
    except ToolError:
        return False

extra = {
    "types": {"type": "object", "properties": {
        "n": {"type": ["integer", "null"], "minimum": -2, "maximum": 6},
        "f": {"type": ["number", "string"], "exclusiveMinimum": 0.5, "maxLength": 2},
        "e": {"enum": ["a", 1, 2.5, None, True]},
        "b": {"type": "boolean", "enum": [True]},
        "o": {"type": "object", "minProperties": 1, "properties": {"deep": {"type": "array", "maxItems": 2, "items": {"type": "integer"}}}},
        "z": {"type": "null"},
        "x": {"description": "no type: anything"}}},
    # x-span wherever the value is an object, whatever the schema's type.
    "span": {"type": "object", "required": ["v"], "properties": {"v": {
        "type": ["object", "string"], "required": ["a", "b"], "x-span": {"start": "a", "end": "b", "max": 4},
        "properties": {"a": {"type": "integer", "minimum": 0, "maximum": 9}, "b": {"type": "integer", "minimum": 0, "maximum": 9}}}}},
}
schemas = {name: t["input_schema"] for name, t in registry.TOOLS.items()}
schemas.update(extra)
rng = random.Random(7)
for name, s in sorted(schemas.items()):
    valid = 0
    for _ in range(2000):
        v = gen(rng, s)
        want = passes(s, v)
        got = schema.quick(s)(v)
        if got != want:
            raise SystemExit("%s: quick says %s, explain %s, for %r" % (name, got, want, v))
        valid += want
    if not 20 <= valid <= 1980:
        raise SystemExit("%s: %d of 2000 values valid: not exercising both sides" % (name, valid))
    # check raises exactly when explain does, with explain's message
    v = gen(rng, s)
    try:
        schema.check(s, v)
        ok = True
    except ToolError:
        ok = False
    if ok != passes(s, v):
        raise SystemExit("%s: check and explain disagree on %r" % (name, v))
# A malformed part raises in explain only where reached, as before quick.
bad = {"type": "object", "properties": {"a": {"type": "string", "pattern": "("}}}
schema.check(bad, {})
try:
    schema.check(bad, {"a": "x"})
    raise SystemExit("a bad pattern passed")
except Exception as e:
    if isinstance(e, SystemExit):
        raise
# check_name refuses exactly the control characters (C0 and DEL), as the
# schemas' NAME pattern does.
name_rx = schema.compiled_pattern(schema.NAME_PATTERN)
for c in list(range(0x300)) + [0x2028, 0xfeff, 0x1f9ca]:
    n = "a" + chr(c) + "b"
    try:
        schema.check_name(n)
        refused = False
    except ToolError:
        refused = True
    if refused != (c < 32 or c == 127) or refused != (name_rx.search(n) is None):
        raise SystemExit("check_name on U+%04X: refused %s" % (c, refused))
print("QUICK-SCHEMA-OK", len(schemas))
`
