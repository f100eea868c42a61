r"""A tiny JSON Schema checker for the subset our tool schemas use. Go validates
args first; this keeps a bad request from reaching bpy.

Supported keywords: type (object, array, number, integer, string, boolean,
null, or a list of these: the value's own type's keywords then apply),
properties, required, additionalProperties (false only), minProperties,
items, minItems, maxItems, minimum, maximum, exclusiveMinimum, minLength,
maxLength, pattern, enum, and the vendor keyword ``x-max-bytes`` (below).
Others (description, default) are ignored here, and so are the other vendor
keywords starting with ``x-`` (``x-sandbox-path``, read by the control
plane's path gate and by sandbox.py's users, not by this checker). Failures
raise ToolError("invalid_input", "<path>: ...").

``"x-max-bytes": n`` bounds the length of a string in UTF-8 bytes (a
non-negative integer; other types ignore it). maxLength counts characters,
but Blender names are at most 63 bytes (NAME): 63 "é" pass maxLength and
fail x-max-bytes; file names are at most sandbox.MAX_FILE_BYTES. The
control plane's checker enforces the same keyword.

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
NAME_PATTERN = r"^[^\x00-\x1f\x7f]+$"

# Reusable schema fragments for tool modules.
VEC3 = {"type": "array", "items": {"type": "number"}, "minItems": 3, "maxItems": 3}
NAME = {"type": "string", "minLength": 1, "maxLength": MAX_NAME_BYTES, "x-max-bytes": MAX_NAME_BYTES,
        "pattern": NAME_PATTERN}
NO_ARGS = {"type": "object", "properties": {}, "additionalProperties": False}


def is_control(ch):
    return ord(ch) < 32 or ord(ch) == 127


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
                check(props[k], value[k], path + "." + k)
    elif t == "array":
        if not isinstance(value, list):
            raise ToolError("invalid_input", "%s: must be an array" % path)
        if len(value) < schema.get("minItems", 0) or len(value) > schema.get("maxItems", len(value)):
            raise ToolError("invalid_input", "%s: wrong number of items" % path)
        for i, item in enumerate(value):
            check(schema.get("items", {}), item, "%s[%d]" % (path, i))
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


def check_name(name):
    if len(name.encode("utf-8")) > MAX_NAME_BYTES:
        raise ToolError("invalid_input", "name is longer than %d bytes" % MAX_NAME_BYTES)
    if any(is_control(ch) for ch in name):
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
