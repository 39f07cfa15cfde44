#!/usr/bin/python3
"""The committed gRPC stubs of the Python package match what protoc generates from proto/.

Usage: /usr/bin/python3 tests/python_package/check_stubs.py --proto-dir proto --package-dir client/python

Regenerates every stub with client/python/tools/generate_stubs.py (Debian's protoc and
grpc_python_plugin) into a temporary directory and compares file by file with
client/python/posbias/v1/: a stub that differs, is missing or is left over from a deleted proto
fails, with a unified diff and the command that fixes it. A --self-test first proves that the
check catches an edited stub.
"""

import argparse
import difflib
import importlib.util
import os
import sys
import tempfile


def load_generator(package_dir):
    path = os.path.join(package_dir, "tools", "generate_stubs.py")
    spec = importlib.util.spec_from_file_location("generate_stubs", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def committed_stubs(generator, stub_dir):
    files = {}
    for name in sorted(os.listdir(stub_dir)):
        if generator.is_generated(name):
            with open(os.path.join(stub_dir, name), "rb") as f:
                files[name] = f.read()
    return files


def differences(expected, actual):
    """Human-readable problems between generated (`expected`) and committed (`actual`) files."""
    problems = []
    for name in sorted(set(expected) - set(actual)):
        problems.append("missing: posbias/v1/%s (generated from proto/, not committed)" % name)
    for name in sorted(set(actual) - set(expected)):
        problems.append("left over: posbias/v1/%s (no proto generates it)" % name)
    for name in sorted(set(expected) & set(actual)):
        if expected[name] != actual[name]:
            diff = difflib.unified_diff(actual[name].decode("utf-8", "replace").splitlines(),
                                        expected[name].decode("utf-8", "replace").splitlines(),
                                        "committed/" + name, "generated/" + name, lineterm="", n=1)
            lines = [line if len(line) <= 160 else line[:160] + " ..." for line in list(diff)[:40]]
            problems.append("differs: posbias/v1/%s\n%s" % (name, "\n".join(lines)))
    return problems


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--proto-dir", required=True)
    parser.add_argument("--package-dir", required=True, help="client/python")
    args = parser.parse_args()
    generator = load_generator(args.package_dir)
    for tool in (generator.PROTOC, generator.GRPC_PYTHON_PLUGIN):
        if not os.access(tool, os.X_OK):
            sys.exit("%s is missing (apt-get install protobuf-compiler protobuf-compiler-grpc)" % tool)
    with tempfile.TemporaryDirectory(prefix="posbias-stub-check-") as scratch:
        expected = generator.generate(os.path.abspath(args.proto_dir), scratch)
    actual = committed_stubs(generator, os.path.join(args.package_dir, "posbias", "v1"))
    if len(expected) < 12:
        sys.exit("protoc generated only %d files: %s" % (len(expected), sorted(expected)))

    # Self-test: the comparison must notice an edited, a missing and a left-over file.
    tampered = dict(expected)
    first = sorted(tampered)[0]
    tampered[first] = tampered[first] + b"# edited\n"
    del tampered[sorted(tampered)[1]]
    tampered["gone_pb2.py"] = b""
    if len(differences(expected, tampered)) != 3:
        sys.exit("self-test failed: the comparison does not see edited, missing and left-over stubs")

    problems = differences(expected, actual)
    if problems:
        sys.stderr.write("\n\n".join(problems) + "\n\nThe committed stubs are out of date with proto/. Run\n"
                         "    /usr/bin/python3 client/python/tools/generate_stubs.py\nand commit the result.\n")
        sys.exit(1)
    print("%d committed stubs match proto/" % len(actual))


if __name__ == "__main__":
    main()
