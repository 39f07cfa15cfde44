"""Generated protobuf and gRPC modules of the posbias v1 API (proto/posbias/v1/).

Every `*_pb2*.py(i)` file here is written by client/python/tools/generate_stubs.py; do not edit
them by hand (CTest's python_package.stubs_match_proto fails when they differ from what protoc
generates from proto/). Most users never import this package: `posbias.Client` converts to and
from these messages. It is public for the fields the client does not surface (every result keeps
its message as `.proto`).
"""
