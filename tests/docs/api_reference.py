#!/usr/bin/python3
"""The API reference page, made from the proto files' own comments (protoc's source info): every
service with its RPCs, every message with its fields and every enum with its values, in the order
and words of proto/posbias/v1/. Never edited by hand: --write makes the page, and the test
docs.api_reference fails when the committed page differs from what the protos say now.

Usage: api_reference.py REPO_ROOT [--write docs/reference/api.md]   (prints the page without --write)
"""

import os
import subprocess
import sys
import tempfile

from google.protobuf import descriptor_pb2

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from check_generated import emit  # noqa: E402

FILES = ["common.proto", "options.proto", "density_service.proto", "model_service.proto", "job_service.proto"]
HEADER = """# API reference

Generated from the comments of `proto/posbias/v1/` by `tests/docs/api_reference.py --write` (the
test `docs.api_reference` fails when this page differs from the protos). The protos are the
contract; this page is them, rendered. Package `posbias.v1`.
"""
# FieldDescriptorProto.Type numbers to names.
TYPES = {1: "double", 2: "float", 3: "int64", 4: "uint64", 5: "int32", 6: "fixed64", 7: "fixed32", 8: "bool",
         9: "string", 12: "bytes", 13: "uint32", 15: "sfixed32", 16: "sfixed64", 17: "sint32", 18: "sint64"}


def comments(source_info):
    found = {}
    for location in source_info.location:
        text = (location.leading_comments or location.trailing_comments).strip()
        if text:
            found[tuple(location.path)] = " ".join(line.strip() for line in text.splitlines())
    return found


def cell(text):
    return text.replace("|", "\\|")


def type_name(field):
    if field.type in (11, 14):  # Message, enum.
        name = field.type_name.split(".")[-1]
        text = "`%s`" % name
    else:
        text = TYPES.get(field.type, str(field.type))
    if field.label == 3:
        text = "repeated " + text
    elif field.proto3_optional:
        text = "optional " + text
    return text


def render_message(out, message, path, notes, prefix=""):
    name = prefix + message.name
    if message.options.map_entry:
        return
    out.append("\n### %s\n\n" % name)
    if notes.get(path):
        out.append(notes[path] + "\n\n")
    if message.field:
        out.append("| field | number | type | meaning |\n|---|---|---|---|\n")
        for i, field in enumerate(message.field):
            out.append("| `%s` | %d | %s | %s |\n" % (field.name, field.number, type_name(field),
                                                     cell(notes.get(path + (2, i), ""))))
    for i, nested in enumerate(message.nested_type):
        render_message(out, nested, path + (3, i), notes, name + ".")
    for i, enum in enumerate(message.enum_type):
        render_enum(out, enum, path + (4, i), notes, name + ".")


def render_enum(out, enum, path, notes, prefix=""):
    out.append("\n### %s%s (enum)\n\n" % (prefix, enum.name))
    if notes.get(path):
        out.append(notes[path] + "\n\n")
    out.append("| value | number | meaning |\n|---|---|---|\n")
    for i, value in enumerate(enum.value):
        out.append("| `%s` | %d | %s |\n" % (value.name, value.number, cell(notes.get(path + (2, i), ""))))


def page(root):
    with tempfile.TemporaryDirectory() as work:
        descriptors = os.path.join(work, "api.pb")
        subprocess.run(["protoc", "--include_source_info", "--descriptor_set_out=" + descriptors,
                        "-I", os.path.join(root, "proto")] +
                       [os.path.join(root, "proto", "posbias", "v1", name) for name in FILES], check=True)
        files = descriptor_pb2.FileDescriptorSet()
        with open(descriptors, "rb") as f:
            files.ParseFromString(f.read())
    out = [HEADER]
    for proto in files.file:
        notes = comments(proto.source_code_info)
        out.append("\n## %s\n" % proto.name)
        for s, service in enumerate(proto.service):
            out.append("\n### service %s\n\n" % service.name)
            if notes.get((6, s)):
                out.append(notes[(6, s)] + "\n\n")
            out.append("| RPC | request | response | meaning |\n|---|---|---|---|\n")
            for m, method in enumerate(service.method):
                request = ("stream " if method.client_streaming else "") + "`%s`" % method.input_type.split(".")[-1]
                response = ("stream " if method.server_streaming else "") + "`%s`" % method.output_type.split(".")[-1]
                out.append("| `%s` | %s | %s | %s |\n" % (method.name, request, response, cell(notes.get((6, s, 2, m), ""))))
        for i, message in enumerate(proto.message_type):
            render_message(out, message, (4, i), notes)
        for i, enum in enumerate(proto.enum_type):
            render_enum(out, enum, (5, i), notes)
    return "".join(out)


def main():
    emit(page(sys.argv[1]), sys.argv)


if __name__ == "__main__":
    main()
