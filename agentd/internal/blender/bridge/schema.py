r"""A tiny JSON Schema checker for the subset our tool schemas use. Go validates
args first; this keeps a bad request from reaching bpy.

Supported keywords: type (object, array, number, integer, string, boolean,
null, or a list of these: the value's own type's keywords then apply),
properties, required, additionalProperties (false only), minProperties,
items, minItems, maxItems, minimum, maximum, exclusiveMinimum, minLength,
maxLength, pattern, enum, and the vendor keywords ``x-max-bytes`` and
``x-span`` (below).
Others (description, default) are ignored here, and so are the other vendor
keywords starting with ``x-`` (``x-sandbox-path``, read by the control
plane's path gate and by sandbox.py's users, not by this checker). Failures
raise ToolError("invalid_input", "<path>: ...").

``"x-max-bytes": n`` bounds the length of a string in UTF-8 bytes (a
non-negative integer; other types ignore it). maxLength counts characters,
but Blender names are at most 63 bytes (NAME): 63 "é" pass maxLength and
fail x-max-bytes; file names are at most sandbox.MAX_FILE_BYTES. The
control plane's checker enforces the same keyword.

``"x-span": {"start": a, "end": b, "max": n, "unit": "frames"}`` on an
object: when it has both number properties a and b, b is not below a and
(with "max") b - a + 1 is at most n ("unit" names what that counts in the
message; "values" if not given). A tool that reads either from
the scene when it is left out checks the range again when it runs. The
control plane's checker enforces it too (plan.SpanKeyword).

``pattern`` is an ECMA-262 regex, as JSON Schema says, and the control plane
checks it with Go's RE2: the patterns here use only syntax that means the
same in Python's re, RE2 and ECMA-262, except ``$``, which in Python also
matches before a final newline ("Cube\n" would pass ``^[^\n]+$``). The
checker therefore reads ``$`` outside a character class as ``\Z`` (end of
the string only), as RE2 and ECMA-262 do.
"""

import math
import re

from common import MAX_NAME_BYTES, RESERVED_PREFIX, ToolError

# A datablock name: no control characters (U+0000-U+001F, U+007F), which
# exporters would write into line-based files (an OBJ "o" line with a
# newline in it becomes two statements). The same pattern in every schema
# that takes a datablock name.
CONTROL_CHARS = r"\x00-\x1f\x7f"  # a regex class's body: the control characters
NAME_PATTERN = "^[^%s]+$" % CONTROL_CHARS

# Reusable schema fragments for tool modules.
VEC3 = {"type": "array", "items": {"type": "number"}, "minItems": 3, "maxItems": 3}
NAME = {"type": "string", "minLength": 1, "maxLength": MAX_NAME_BYTES, "x-max-bytes": MAX_NAME_BYTES,
        "pattern": NAME_PATTERN}
NO_ARGS = {"type": "object", "properties": {}, "additionalProperties": False}


CONTROL = re.compile("[%s]" % CONTROL_CHARS)


_PATTERNS = {}  # schema pattern -> compiled regex (see the module docstring)


def compiled_pattern(pattern):
    r"""pattern compiled with $ outside character classes read as \Z."""
    rx = _PATTERNS.get(pattern)
    if rx is None:
        out, i, in_class = [], 0, False
        while i < len(pattern):
            ch = pattern[i]
            if ch == "\\":
                out.append(pattern[i:i + 2])
                i += 2
                continue
            if in_class:
                in_class = ch != "]"
            elif ch == "[":
                in_class = True
            elif ch == "$":
                ch = r"\Z"
            out.append(ch)
            i += 1
        rx = _PATTERNS[pattern] = re.compile("".join(out))
    return rx


def is_number(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def is_integer(v):
    return is_number(v) and float(v).is_integer()


def json_type(value):
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "integer" if is_integer(value) else "number"
    return {dict: "object", list: "array", str: "string"}.get(type(value))


def check(schema, value, path="args"):
    """Raise ToolError("invalid_input", "<path>: ...") unless value matches
    schema. A quick predicate compiled once per schema (quick) answers for
    the values that match; the rest are walked by explain, which names the
    first failure. quick passes only what explain passes: for the tools'
    schemas exactly that (the bridge's TestQuickSchema holds the two to each
    other); a schema it cannot compile is left to explain whole."""
    if not quick(schema)(value):
        explain(schema, value, path)


def explain(schema, value, path):
    if "x-span" in schema and isinstance(value, dict):  # whatever the schema's type, as the control plane's
        bad = span_violation(schema["x-span"], value)
        if bad is not None:
            raise ToolError("invalid_input", "%s.%s: %s" % (path, schema["x-span"]["end"], bad))
    t = schema.get("type")
    if isinstance(t, list):
        vt = json_type(value)
        if vt == "integer" and "integer" not in t and "number" in t:
            vt = "number"
        if vt not in t:
            raise ToolError("invalid_input", "%s: must be of type %s" % (path, " or ".join(t)))
        t = vt
    if t == "null":
        if value is not None:
            raise ToolError("invalid_input", "%s: must be null" % path)
    elif t == "object":
        if not isinstance(value, dict):
            raise ToolError("invalid_input", "%s: must be an object" % path)
        props = schema.get("properties", {})
        for req in schema.get("required", []):
            if req not in value:
                raise ToolError("invalid_input", "%s: missing required property %r" % (path, req))
        if schema.get("additionalProperties") is False:
            for k in sorted(value):
                if k not in props:
                    raise ToolError("invalid_input", "%s: unknown property %r" % (path, k))
        if len(value) < schema.get("minProperties", 0):
            raise ToolError("invalid_input", "%s: needs at least %d properties" % (path, schema["minProperties"]))
        for k in sorted(value):
            if k in props:
                explain(props[k], value[k], path + "." + k)
    elif t == "array":
        if not isinstance(value, list):
            raise ToolError("invalid_input", "%s: must be an array" % path)
        if len(value) < schema.get("minItems", 0) or len(value) > schema.get("maxItems", len(value)):
            raise ToolError("invalid_input", "%s: wrong number of items" % path)
        for i, item in enumerate(value):
            explain(schema.get("items", {}), item, "%s[%d]" % (path, i))
    elif t in ("number", "integer"):
        ok = is_integer(value) if t == "integer" else is_number(value)
        if not ok:
            raise ToolError("invalid_input", "%s: must be a finite %s" % (path, t))
        if "minimum" in schema and value < schema["minimum"]:
            raise ToolError("invalid_input", "%s: must be >= %s" % (path, schema["minimum"]))
        if "maximum" in schema and value > schema["maximum"]:
            raise ToolError("invalid_input", "%s: must be <= %s" % (path, schema["maximum"]))
        if "exclusiveMinimum" in schema and value <= schema["exclusiveMinimum"]:
            raise ToolError("invalid_input", "%s: must be > %s" % (path, schema["exclusiveMinimum"]))
    elif t == "string":
        if not isinstance(value, str):
            raise ToolError("invalid_input", "%s: must be a string" % path)
        if len(value) < schema.get("minLength", 0) or len(value) > schema.get("maxLength", len(value)):
            raise ToolError("invalid_input", "%s: wrong length" % path)
        if "x-max-bytes" in schema and len(value.encode("utf-8", "surrogatepass")) > schema["x-max-bytes"]:
            raise ToolError("invalid_input", "%s: longer than %d bytes in UTF-8" % (path, schema["x-max-bytes"]))
        if "pattern" in schema and not compiled_pattern(schema["pattern"]).search(value):
            raise ToolError("invalid_input", "%s: does not match %s" % (path, schema["pattern"]))
    elif t == "boolean":
        if not isinstance(value, bool):
            raise ToolError("invalid_input", "%s: must be a boolean" % path)
    if "enum" in schema and value not in schema["enum"]:
        raise ToolError("invalid_input", "%s: must be one of %s" % (path, ", ".join(map(str, schema["enum"]))))


_QUICK = {}  # id(schema) -> (schema, its predicate): schemas live as long as their tools


def quick(schema):
    """schema's predicate: whether a value passes explain, keyword for
    keyword, without its walk of dict lookups and paths (a tenth of a
    set_transform's time in the bridge, measured)."""
    entry = _QUICK.get(id(schema))
    if entry is None or entry[0] is not schema:
        try:
            fn = compile_quick(schema)
        except Exception:  # a malformed part (a bad pattern) raises in explain, and only when reached
            fn = _never
        entry = _QUICK[id(schema)] = (schema, fn)
    return entry[1]


def _always(value):
    return True


def _never(value):
    return False


_BOUNDS = ("minProperties", "minItems", "maxItems", "minimum", "maximum", "exclusiveMinimum", "minLength",
           "maxLength", "x-max-bytes")


def compile_quick(schema):
    """explain's verdict on schema as a function of the value. A schema
    with a bound that is not a number is left to explain."""
    if any(k in schema and not is_number(schema[k]) for k in _BOUNDS):
        return _never
    t = schema.get("type")
    enum = schema.get("enum")
    if isinstance(t, list):
        allowed = list(t)
        by_type = {name: _quick_type(schema, name) for name in allowed}
        loose = "integer" not in allowed and "number" in allowed

        def typed(value):
            vt = json_type(value)
            if vt == "integer" and loose:
                vt = "number"
            return vt in by_type and by_type[vt](value)
    elif t is None:
        typed = None
    else:
        typed = _quick_type(schema, t)
    if "enum" not in schema:
        f = typed or _always
    elif typed is None:
        def f(value):
            return value in enum
    else:
        def f(value):
            return typed(value) and value in enum
    span = schema.get("x-span")
    if span is None:
        return f
    return lambda value: f(value) and not (isinstance(value, dict) and span_violation(span, value) is not None)


def _quick_type(schema, t):
    """explain's checks of a value that schema says is of type t."""
    if t == "null":
        return lambda value: value is None
    if t == "object":
        props = {k: compile_quick(s) for k, s in schema.get("properties", {}).items()}
        required = list(schema.get("required", []))
        closed = schema.get("additionalProperties") is False
        fewest = schema.get("minProperties", 0)

        def obj(value):
            if not isinstance(value, dict) or len(value) < fewest:
                return False
            for r in required:
                if r not in value:
                    return False
            for k, v in value.items():
                f = props.get(k)
                if f is None:
                    if closed:
                        return False
                elif not f(v):
                    return False
            return True
        return obj
    if t == "array":
        items = compile_quick(schema.get("items", {}))
        fewest, most = schema.get("minItems", 0), schema.get("maxItems")

        def arr(value):
            if not isinstance(value, list) or len(value) < fewest or (most is not None and len(value) > most):
                return False
            for item in value:
                if not items(item):
                    return False
            return True
        return arr
    if t in ("number", "integer"):
        ok = is_integer if t == "integer" else is_number
        lo, hi, above = (schema.get(k) for k in ("minimum", "maximum", "exclusiveMinimum"))

        def num(value):
            return ok(value) and not ((lo is not None and value < lo) or (hi is not None and value > hi) or
                                      (above is not None and value <= above))
        return num
    if t == "string":
        fewest, most = schema.get("minLength", 0), schema.get("maxLength")
        max_bytes = schema.get("x-max-bytes")
        rx = compiled_pattern(schema["pattern"]) if "pattern" in schema else None

        def string(value):
            if not isinstance(value, str):
                return False
            n = len(value)
            if n < fewest or (most is not None and n > most):
                return False
            # At most 4 UTF-8 bytes a code point: short strings need no encoding.
            if max_bytes is not None and 4 * n > max_bytes and len(value.encode("utf-8", "surrogatepass")) > max_bytes:
                return False
            return rx is None or rx.search(value) is not None
        return string
    if t == "boolean":
        return lambda value: isinstance(value, bool)
    return _always


def span_violation(span, value):
    """How the object value breaks its x-span, or None."""
    a, b = value.get(span["start"]), value.get(span["end"])
    if not (is_number(a) and is_number(b)):
        return None
    if b < a:
        return "%s %s is before %s %s" % (span["end"], b, span["start"], a)
    most = span.get("max")
    if most is not None and b - a + 1 > most:
        return "%s %s to %s %s is %s %s, at most %d" % (span["start"], a, span["end"], b, b - a + 1, span.get("unit", "values"), most)
    return None


def check_name(name):
    if len(name.encode("utf-8")) > MAX_NAME_BYTES:
        raise ToolError("invalid_input", "name is longer than %d bytes" % MAX_NAME_BYTES)
    if CONTROL.search(name):
        raise ToolError("invalid_input", "name contains a control character")
    if name.startswith(RESERVED_PREFIX):
        raise ToolError("invalid_input", "names starting with %r are reserved" % RESERVED_PREFIX)


def check_name_free(name, taken, what):
    """conflict when name is already in taken (a bpy.data collection); what
    names a member with its article: "an object", "a material"."""
    if name in taken:
        raise ToolError("conflict", "%s named %r already exists" % (what, name))


def check_new_name(name, taken, what):
    """check_name, then check_name_free: the prologue of the create tools."""
    check_name(name)
    check_name_free(name, taken, what)
