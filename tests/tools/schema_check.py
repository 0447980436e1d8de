"""schema_check.py SCHEMA FILE... — validates JSON documents against a JSON
Schema, in the standard library (the test machines have no network and no
jsonschema package). The subset docs/schemas/ uses: type (one or a list),
enum, required, properties, additionalProperties (false or a schema),
items, minimum, and $ref to "#/$defs/NAME". A keyword outside the subset is
an error, so a schema cannot silently outgrow its checker. Exit 1 with the
first violation."""
import json
import sys

KNOWN = {"$schema", "$id", "$defs", "$ref", "title", "description", "type", "enum",
         "required", "properties", "additionalProperties", "items", "minimum"}
TYPES = {"object": dict, "array": list, "string": str, "boolean": bool, "null": type(None)}


def is_type(v, t):
    if t == "integer":
        return isinstance(v, int) and not isinstance(v, bool)
    if t == "number":
        return isinstance(v, (int, float)) and not isinstance(v, bool)
    return isinstance(v, TYPES[t])


def validate(v, s, root, path):
    unknown = set(s) - KNOWN
    if unknown:
        raise ValueError(f"schema at {path}: keywords outside the checker's subset: {unknown}")
    if "$ref" in s:
        name = s["$ref"].removeprefix("#/$defs/")
        return validate(v, root["$defs"][name], root, path)
    if "type" in s:
        types = s["type"] if isinstance(s["type"], list) else [s["type"]]
        if not any(is_type(v, t) for t in types):
            raise ValueError(f"{path}: {json.dumps(v)[:60]} is not {' or '.join(types)}")
    if "enum" in s and v not in s["enum"]:
        raise ValueError(f"{path}: {v!r} is not one of {s['enum']}")
    if "minimum" in s and is_type(v, "number") and v < s["minimum"]:
        raise ValueError(f"{path}: {v} < {s['minimum']}")
    if isinstance(v, dict):
        for r in s.get("required", []):
            if r not in v:
                raise ValueError(f"{path}: '{r}' is required")
        props = s.get("properties", {})
        extra = s.get("additionalProperties", True)
        for k, x in v.items():
            if k in props:
                validate(x, props[k], root, f"{path}.{k}")
            elif extra is False:
                raise ValueError(f"{path}: '{k}' is not allowed")
            elif isinstance(extra, dict):
                validate(x, extra, root, f"{path}.{k}")
    if isinstance(v, list) and "items" in s:
        for i, x in enumerate(v):
            validate(x, s["items"], root, f"{path}[{i}]")


def main():
    schema = json.load(open(sys.argv[1]))
    for f in sys.argv[2:]:
        try:
            validate(json.load(open(f)), schema, schema, "$")
        except ValueError as e:
            print(f"{f}: {e}")
            sys.exit(1)


main()
