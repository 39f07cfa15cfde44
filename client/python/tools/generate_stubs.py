#!/usr/bin/python3
"""Regenerates the committed gRPC stubs of the posbias Python package from proto/.

Usage (from the repository root; Debian's protoc and grpc_python_plugin):

    /usr/bin/python3 client/python/tools/generate_stubs.py                 # rewrite posbias/v1/
    /usr/bin/python3 client/python/tools/generate_stubs.py --out /tmp/x    # write elsewhere

The stubs are committed (so `pip install ./client/python` needs neither protoc nor grpcio-tools and
works offline); CTest's python_package.stubs_match_proto regenerates them into a temporary
directory with this script and fails on any difference. After editing a .proto file, run this
script and commit the result with the proto change.

Generated per proto: `<name>_pb2.py` (messages), `<name>_pb2.pyi` (type stubs for editors and
type checkers) and `<name>_pb2_grpc.py` (service stubs). They import each other as
`from posbias.v1 import common_pb2`, which resolves inside the installed package.
"""

import argparse
import os
import subprocess
import sys
import tempfile

PROTOC = "/usr/bin/protoc"
GRPC_PYTHON_PLUGIN = "/usr/bin/grpc_python_plugin"
PROTOS = ["posbias/v1/common.proto", "posbias/v1/options.proto", "posbias/v1/density_service.proto",
          "posbias/v1/model_service.proto", "posbias/v1/job_service.proto"]
GENERATED_SUFFIXES = ("_pb2.py", "_pb2.pyi", "_pb2_grpc.py")
TIMEOUT_S = 60

HERE = os.path.dirname(os.path.abspath(__file__))
PACKAGE_ROOT = os.path.dirname(HERE)                       # client/python
DEFAULT_PROTO_DIR = os.path.join(PACKAGE_ROOT, "..", "..", "proto")


def is_generated(file_name):
    """Whether a file name in posbias/v1/ is one protoc writes (the rest, __init__.py, is ours)."""
    return file_name.endswith(GENERATED_SUFFIXES)


def generate(proto_dir, out_root, protoc=PROTOC, plugin=GRPC_PYTHON_PLUGIN):
    """Runs protoc for every posbias proto into `out_root` (which receives posbias/v1/...).

    Returns the generated files as {file name: bytes}. Raises RuntimeError when protoc fails."""
    command = [protoc, "-I" + proto_dir, "--python_out=" + out_root, "--pyi_out=" + out_root,
               "--grpc_out=" + out_root, "--plugin=protoc-gen-grpc=" + plugin, *PROTOS]
    result = subprocess.run(command, capture_output=True, text=True, timeout=TIMEOUT_S)
    if result.returncode != 0:
        raise RuntimeError("%s failed (%d):\n%s" % (" ".join(command), result.returncode, result.stderr))
    directory = os.path.join(out_root, "posbias", "v1")
    files = {}
    for name in sorted(os.listdir(directory)):
        if is_generated(name):
            with open(os.path.join(directory, name), "rb") as f:
                files[name] = f.read()
    return files


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--proto-dir", default=DEFAULT_PROTO_DIR, help="the repository's proto/ directory")
    parser.add_argument("--out", default=None,
                        help="directory that receives posbias/v1/ (default: the package's own posbias/v1/)")
    args = parser.parse_args()
    proto_dir = os.path.abspath(args.proto_dir)
    with tempfile.TemporaryDirectory(prefix="posbias-stubs-") as scratch:
        files = generate(proto_dir, scratch)
    target = os.path.join(os.path.abspath(args.out), "posbias", "v1") if args.out else \
        os.path.join(PACKAGE_ROOT, "posbias", "v1")
    os.makedirs(target, exist_ok=True)
    for name in os.listdir(target):  # A proto that went away must not leave its stubs behind.
        if is_generated(name) and name not in files:
            os.remove(os.path.join(target, name))
    for name, data in files.items():
        with open(os.path.join(target, name), "wb") as f:
            f.write(data)
    sys.stdout.write("wrote %d files to %s\n" % (len(files), target))


if __name__ == "__main__":
    main()
