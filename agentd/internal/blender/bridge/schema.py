"""A tiny JSON Schema checker for the subset our tool schemas use. Go validates
args first; this keeps a bad request from reaching bpy.

Supported keywords: type (object, array, number, integer, string, boolean,
null, or a list of these: the value's own type's keywords then apply),
properties, required, additionalProperties (false only), minProperties,
items, minItems, maxItems, minimum, maximum, exclusiveMinimum, minLength,
maxLength, pattern, enum. Others (description, default) are ignored here,
and so are vendor keywords starting with ``x-`` (``x-sandbox-path``, read by
the control plane's path gate and by sandbox.py's users, not by this checker).
Failures raise ToolError("invalid_input", "<path>: ...").
"""

import math
import re

from common import MAX_NAME_BYTES, RESERVED_PREFIX, ToolError

# Reusable schema fragments for tool modules.
VEC3 = {"type": "array", "items": {"type": "number"}, "minItems": 3, "maxItems": 3}
NAME = {"type": "string", "minLength": 1, "maxLength": MAX_NAME_BYTES}
NO_ARGS = {"type": "object", "properties": {}, "additionalProperties": False}


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
        if "pattern" in schema and not re.search(schema["pattern"], value):
            raise ToolError("invalid_input", "%s: does not match %s" % (path, schema["pattern"]))
    elif t == "boolean":
        if not isinstance(value, bool):
            raise ToolError("invalid_input", "%s: must be a boolean" % path)
    if "enum" in schema and value not in schema["enum"]:
        raise ToolError("invalid_input", "%s: must be one of %s" % (path, ", ".join(map(str, schema["enum"]))))


def check_name(name):
    if len(name.encode("utf-8")) > MAX_NAME_BYTES:
        raise ToolError("invalid_input", "name is longer than %d bytes" % MAX_NAME_BYTES)
    if "\x00" in name:
        raise ToolError("invalid_input", "name contains a NUL character")
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
