#!/usr/bin/python3
"""A wire fuzzer: structured random and byte-mutated requests on every RPC of a real posbias-server.

Usage (Debian's Python with python3-grpcio and python3-protobuf; protoc and grpc_python_plugin from
/usr/bin):

    /usr/bin/python3 tests/fuzz/wire/wire_fuzz.py --server-binary build/release/server/posbias-server \
        --proto-dir proto [--seed N] [--requests 10000] [--max-seconds 100] [--concurrency 24]
        [--token T] [--expect-only CODE] [--case I] [--server-arg=--flag ...]

The script generates Python stubs at start, starts its own server on 127.0.0.1 (OS-chosen ports,
fresh --data-dir and --model-root under one temporary root, --cpu-threads 1, run from an empty
working directory), registers two tiny models and submits two tiny Jacobian jobs (the sentinels),
then sends --requests calls from --concurrency threads, bounded by --max-seconds:

- every unary RPC of DensityService, ModelService and JobService, each case one of: a valid
  template with 1-3 fields set to edge values (0, -1, 2^31-1, 2^63-1, 2^64-1, -2^63, the documented
  limits and one past them, 1e308, -0.0, 5e-324, NaN, +-Inf, unknown enum values, empty / 1 MiB /
  NUL / unicode / format-string / path-trick strings, many and overlong labels, repeated fields up
  to a million entries), a message generated from the descriptor alone, or the serialized bytes of
  either mutated (bit flips, truncation, insertion, duplication, random bytes, overlong varints and
  length prefixes, invalid UTF-8, a packed field past the 64 MiB message limit) and sent through a
  raw method with identity serializers;
- the streaming RPCs: WatchJob (cancelled after its first message or under a short deadline),
  UploadModel (valid, wrong digest, wrong sizes, no or repeated metadata, mutated file bytes or
  config.json, cancelled or stopped mid-stream, raw mutated messages), ExportModel (read, cancelled);
- grpc.health.v1 Check / Watch, reflection, and methods that do not exist.

Each case draws from random.Random("SEED:INDEX"), so --seed S --case I replays one case (it may
pick a job id the replay has not created; the printed request is what was sent).

What is checked (a violation fails the run with exit code 1, printing the RPC, the request as text
or hex, and the answer):
1. Every answer's code is allowed. UNAVAILABLE is never allowed (the server died or stopped
   answering). UNKNOWN and INTERNAL are allowed only as the gRPC library's own answer to bytes that
   do not parse as the request: a raw call, no posbias-error-reason trailer, the library's message
   (empty, "No payload" or "Couldn't initialize byte buffer reader"). DEADLINE_EXCEEDED only for
   calls given a short deadline on purpose (<= 2 s); CANCELLED only for calls this script
   cancelled; UNIMPLEMENTED only for methods that do not exist or with the reason NOT_IMPLEMENTED
   (a feature the server does not build, as a TorchScript upload); RESOURCE_EXHAUSTED without a reason
   only as gRPC's own message-size refusal. UNAUTHENTICATED / PERMISSION_DENIED / DATA_LOSS are
   unexpected in the default mode. With --expect-only CODE every answer of a posbias.v1 method must
   carry CODE instead (health, reflection and unknown methods keep the rules above).
2. Every other error of a posbias.v1 method carries posbias-error-reason and posbias-error-bin (a
   parseable ErrorDetail naming the same reason).
3. The two sentinel jobs submitted before the run are still there afterwards and reach SUCCEEDED
   (after the run cancels every job the fuzz submitted), with a result.
4. The server is alive at the end, health reports SERVING, and it exits 0 on SIGTERM.
5. RSS (VmRSS, sampled every 0.25 s) after the run is below the RSS after setup + --rss-growth-mib
   (default 512), and the peak below the RSS after setup + --rss-peak-mib (default 2048).
6. Nothing is left behind: the server's working directory stays empty, the model root and the rest
   of the temporary root are unchanged, no file with the run's marker appears in /tmp, the data
   directory's uploads/ holds no staging/export/hash scratch file and only files of registered
   models, and no RegisterModel through a symlink that escapes the model root succeeds.
7. With --private-token (another tenant's principal, with_auth.py --tenants): setup registers a
   model and runs a job as that tenant, and no answer to a fuzz call (message bytes, status
   message, trailers) holds that job's id, the model's uid or weights digest, or a sentinel job's
   id, unless the request itself carried it (an echo). With --fuzz-tenant too, the fuzz tenant's
   folder holds folders of symlinks into the private tenant's checkpoint (relative, absolute,
   dangling) and out of the root: no RegisterModel through one succeeds (check 6), and the
   private checkpoint's digest never shows.
Also, from the server's /metrics: no RPC was recorded with code UNKNOWN or INTERNAL.
"""

import argparse
import base64
import hashlib
import json
import math
import os
import random
import shutil
import struct
import sys
import tempfile
import threading
import time
import traceback
import urllib.request

import grpc
from google.protobuf import descriptor as pbd
from google.protobuf import text_format
from google.protobuf.message import DecodeError

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "e2e"))
from posbias_server import ServerProcess, generate_stubs, metric_samples, start_watchdog  # noqa: E402

ARGS = None
pb = None

RPC_DEADLINE_S = 30.0         # An ordinary call: DEADLINE_EXCEEDED here is a violation.
SHORT_DEADLINE_MAX_S = 2.0    # Calls given a deadline at most this long may end DEADLINE_EXCEEDED.
SETUP_TIMEOUT_S = 60
SENTINEL_TIMEOUT_S = 120
MESSAGE_LIMIT = 64 << 20      # The server's default --max-message-bytes.
MAX_RECEIVE = 256 << 20
U32, U64 = (1 << 32) - 1, (1 << 64) - 1
POSBIAS_PREFIX = "/posbias.v1."
LIBRARY_PARSE_MESSAGES = ("", "No payload", "Couldn't initialize byte buffer reader")
LIBRARY_SIZE_MESSAGES = ("Received message larger than max", "Sent message larger than max",
                         "message larger than max")
TINY_PRESETS = ["gpt2-tiny", "qwen2-tiny", "cesaro"]
FUZZ_MODEL_NAMES = ["fuzz-tiny"] + ["fuzz-m%d" % i for i in range(12)] + ["fuzz-up%d" % i for i in range(4)]
SENTINEL_MODEL = "sentinel-tiny"

# ---------------------------------------------------------------------------------------------
# Edge values


NAN, INF = float("nan"), float("inf")
EDGE_DOUBLES = [0.0, -0.0, 1.0, -1.0, 0.5, 2.0, 1e-300, 5e-324, 2.2250738585072014e-308, 1e308, -1e308,
                1.7976931348623157e308, NAN, -NAN, INF, -INF, 2.0 ** 53, 2.0 ** 63, 2.0 ** 64, 1e-12,
                0.999999999999, 1.000000000001, 4096.5, 1e7, 1e9, 4e9, 4.000001e9, 0.05, 0.95, 100.0,
                1000.0, 1000.0000001, 86400.0, 86401.0]
EDGE_UINTS = [0, 1, 2, 3, 4, 7, 8, 12, 16, 24, 32, 63, 64, 65, 100, 101, 128, 255, 256, 1000, 1001, 1024,
              1025, 4096, 4097, 16384, 16385, 65535, 65536, 65537, 100000, 100001, 131072, 131073, 262144,
              262145, 1 << 20, (1 << 20) + 1, 1 << 24, (1 << 24) + 1, 1 << 27, (1 << 27) + 1, 10 ** 6,
              10 ** 6 + 1, 10 ** 7, 10 ** 7 + 1, 2 ** 31 - 1, 2 ** 31, 2 ** 32 - 1, 2 ** 32, 4 * 10 ** 9,
              2 ** 53, 2 ** 53 + 1, 10 ** 12, 2 ** 63 - 1, 2 ** 63, 2 ** 64 - 1]
EDGE_NEGATIVE = [-1, -2, -100, -101, -2 ** 31, -2 ** 31 + 1, -2 ** 63, -2 ** 63 + 1]
INT_RANGES = {
    pbd.FieldDescriptor.TYPE_INT32: (-2 ** 31, 2 ** 31 - 1), pbd.FieldDescriptor.TYPE_SINT32: (-2 ** 31, 2 ** 31 - 1),
    pbd.FieldDescriptor.TYPE_SFIXED32: (-2 ** 31, 2 ** 31 - 1), pbd.FieldDescriptor.TYPE_INT64: (-2 ** 63, 2 ** 63 - 1),
    pbd.FieldDescriptor.TYPE_SINT64: (-2 ** 63, 2 ** 63 - 1), pbd.FieldDescriptor.TYPE_SFIXED64: (-2 ** 63, 2 ** 63 - 1),
    pbd.FieldDescriptor.TYPE_UINT32: (0, U32), pbd.FieldDescriptor.TYPE_FIXED32: (0, U32),
    pbd.FieldDescriptor.TYPE_UINT64: (0, U64), pbd.FieldDescriptor.TYPE_FIXED64: (0, U64),
}
EDGE_ENUMS = [0, 1, 2, 3, 4, 5, 7, 9, 11, 19, 21, 31, 41, 61, 99, 100, 1000, 2 ** 31 - 1, -1, -2 ** 31]
EDGE_LENGTHS = [0, 1, 2, 3, 5, 10, 64, 100, 1000, 4097, 65537]
HUGE_LENGTHS = [100000, 1000001]


class Context:
    """What the generators draw names, ids and paths from (filled during setup and the run)."""

    def __init__(self, root, marker):
        self.root, self.marker = root, marker
        self.presets = list(TINY_PRESETS)
        self.job_ids = []
        self.lock = threading.Lock()
        self.config_json = "{}"
        self.checkpoint = b""
        self.sentinel_ids = set()
        # Another tenant's ids and digests (--private-token): no answer to a fuzz call may hold one.
        self.secrets = []

    def add_job(self, job_id):
        with self.lock:
            if job_id and job_id not in self.sentinel_ids and job_id not in self.job_ids:
                self.job_ids.append(job_id)
                if len(self.job_ids) > 300:
                    del self.job_ids[0]

    def some_job(self, rng):
        with self.lock:
            return rng.choice(self.job_ids) if self.job_ids else "no-job-yet"


CTX = None
# With --fuzz-tenant and --private-token: folders of the fuzz tenant whose files are symlinks
# (planted at setup, plant_folders): into the private tenant's checkpoint (relative and
# absolute), out of the model root, dangling, and one whose links stay inside the folder (the
# only one that may register).
PLANTED_ESCAPES = []
PLANTED_FOLDERS = []


def weird_strings(ctx):
    m = ctx.marker
    return ["", "a", "0", "-", ".", "..", "/", "//", "~", "\x00", "a\x00b", "\x00" * 64, "é", "日本語", "\U0001F600",
            "\u202eabc", "\ufeff", "\r\n", "\t", " ", "\\", "%s%n%x%p%s%s%s%n", "%99999999d", "{}", "{{}}", "null",
            "${HOME}", "$(touch /tmp/%s-sh)" % m, "`id`", "'; DROP TABLE jobs;--", "\" OR 1=1 --",
            "../../etc/passwd", "/etc/shadow", "/etc/passwd", "/proc/self/environ", "/dev/zero", "/dev/urandom",
            "file:///etc/passwd", "C:\\Windows\\system32", "..\\..\\x", "../" * 40 + "tmp/" + m,
            "/tmp/%s-abs" % m, os.path.join(ctx.root, "outside-%s" % m), "../outside-%s" % m, "../../%s" % m,
            "a" * 63, "a" * 64, "a" * 128, "a" * 129, "a" * 256, "x" * 4096, "y" * 65536, "z" * (1 << 20),
            "a" * 63 + "é", "UPPER", "name with spaces", "under_score", "dot.", "-leading", "trailing-",
            "a=b", "a=b,c=d", ",", "=", "k=", "=v", "a==b", "a=b,", "a=b,,c=d", "a!=b", "a in (b)",
            "%00", "%2e%2e%2f", "\xff\xfe", "\ud7ff", "\U0010ffff", "true", "-1", "1e309", "NaN",
            "fuzz-tiny", "gpt2", "gpt2-xl", "qwen2-1.5b", "gpt2-tiny", "cesaro", "AAAA", "////", "a/b/../c",
            "tiny", "tiny/model.safetensors", "escape", "escape/model.safetensors", m]


def rand_text(rng, length):
    pick = rng.random()
    if pick < 0.4:
        alphabet = "abcdefghijklmnopqrstuvwxyz0123456789-._:/="
        return "".join(rng.choice(alphabet) for _ in range(length))
    if pick < 0.7:
        return "".join(chr(rng.randrange(32, 127)) for _ in range(length))
    out = []
    for _ in range(length):
        cp = rng.randrange(0, 0x110000)
        if 0xD800 <= cp <= 0xDFFF:
            cp = 0xFFFD
        out.append(chr(cp))
    return "".join(out)


def edge_string(rng, ctx, field_name=""):
    """A string for a field, by the field's name where that says what the server expects."""
    name = field_name
    r = rng.random()
    if r < 0.45:
        if name in ("name", "model"):
            return rng.choice(FUZZ_MODEL_NAMES + ctx.presets + ["gpt2", "qwen2-0.5b", "gpt2-xl"])
        if name == "id":
            return ctx.some_job(rng)
        if name == "path":
            return rng.choice(["tiny", "tiny/", "./tiny", "tiny/model.safetensors", "tiny/config.json", "missing",
                               "tiny/../tiny", "tiny/../../data/jobs.sqlite", "escape", "escape/model.safetensors",
                               "etc", "etc/passwd", "loop", "loop/x", "../outside-%s" % ctx.marker, "",
                               os.path.join(ctx.root, "models", "tiny"), "/etc", "tiny\x00/etc"])
        if name == "config_json":
            return rng.choice(json_strings(rng, ctx))
        if name == "sha256":
            return rng.choice([hashlib.sha256(b"x").hexdigest(), "0" * 64, "0" * 63, "g" * 64, "",
                               hashlib.sha256(ctx.checkpoint).hexdigest(), hashlib.sha256(ctx.checkpoint).hexdigest().upper()])
        if name == "label_selector":
            return rng.choice(["a=b", "fuzz=1", "a=b,c=d", "", "a", "=", "a=", "=b", ",", "a=b,", "k" * 64 + "=v",
                               "a=" + "v" * 64, ",".join("k%d=v" % i for i in range(100)), "A=B", "a=b=c", "a=\x00"])
        if name == "page_token":
            return rng.choice(["", "AAAA", "0", "-1", base64.b64encode(os.urandom(24)).decode(), "%%%", "x" * 10000,
                               base64.b64encode(b'{"offset":-1}').decode(), base64.b64encode(b"\xff" * 16).decode()])
        if name == "request_id":
            return rng.choice(["r-1", "fuzz-%d" % rng.randrange(50), "", "a" * 128, "a" * 129, "a b", "a/b", "é"])
        if name == "preset":
            return rng.choice(ctx.presets + ["gpt2", "qwen2-0.5b", "nope", ""])
        if name == "init_recipe":
            return rng.choice(["", "hf", "huggingface", "default", "nope"])
        if name == "service":
            return rng.choice(["", "posbias.v1.DensityService", "posbias.v1.ModelService", "posbias.v1.JobService",
                               "grpc.health.v1.Health", "nope"])
    if r < 0.85:
        return rng.choice(weird_strings(ctx))
    return rand_text(rng, rng.choice([1, 2, 5, 16, 63, 64, 65, 128, 200, 1000]))


def json_strings(rng, ctx):
    base = ctx.config_json
    try:
        parsed = json.loads(base)
    except ValueError:
        parsed = {}
    mutated = dict(parsed) if isinstance(parsed, dict) else {}
    if mutated:
        key = rng.choice(sorted(mutated))
        mutated[key] = rng.choice([None, -1, 0, 2 ** 64, 1e308, "x", [], {}, True, 2 ** 31, -2 ** 63, 1.5])
    return [base, "", "{}", "[]", "null", "0", "{", "}", "{\"a\":", json.dumps(mutated), "[" * 100000 + "]" * 100000,
            "{\"a\":" * 70 + "1" + "}" * 70, "[" * 65 + "]" * 65, json.dumps({"n_layer": 10 ** 30}),
            json.dumps({"model_type": "gpt2", "n_layer": 2, "n_embd": 2 ** 31}), "\"" + "x" * (1 << 20) + "\"",
            base[: len(base) // 2], base + "x", base.replace(":", "::", 1), "{\"a\":1e999}", "\x00", "\ufeff" + base,
            json.dumps({"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "n_layer": 1024, "n_embd": 16384,
                        "n_head": 256, "vocab_size": 262144, "n_positions": 131072})]


def edge_double(rng):
    r = rng.random()
    if r < 0.6:
        return rng.choice(EDGE_DOUBLES)
    if r < 0.85:
        return rng.random()
    if r < 0.95:
        return rng.uniform(-10, 10)
    return struct.unpack("<d", struct.pack("<Q", rng.getrandbits(64)))[0]


def edge_int(rng, field_type):
    lo, hi = INT_RANGES[field_type]
    r = rng.random()
    if r < 0.6:
        value = rng.choice(EDGE_UINTS + EDGE_NEGATIVE)
    elif r < 0.9:
        value = rng.randrange(0, 130)
    else:
        value = rng.getrandbits(64) - (1 << 63 if lo < 0 else 0)
    return max(lo, min(hi, value))


def edge_enum(rng, field):
    if rng.random() < 0.65:
        return rng.choice(field.enum_type.values).number
    return rng.choice(EDGE_ENUMS)


def scalar_value(rng, field, ctx):
    t = field.type
    if t in (pbd.FieldDescriptor.TYPE_DOUBLE, pbd.FieldDescriptor.TYPE_FLOAT):
        value = edge_double(rng)
        if t == pbd.FieldDescriptor.TYPE_FLOAT and math.isfinite(value) and abs(value) > 3.4e38:
            value = math.copysign(INF, value)
        return value
    if t in INT_RANGES:
        return edge_int(rng, t)
    if t == pbd.FieldDescriptor.TYPE_BOOL:
        return rng.random() < 0.5
    if t == pbd.FieldDescriptor.TYPE_ENUM:
        return edge_enum(rng, field)
    if t == pbd.FieldDescriptor.TYPE_STRING:
        return edge_string(rng, ctx, field.name)
    if t == pbd.FieldDescriptor.TYPE_BYTES:
        n = rng.choice([0, 1, 8, 100, 4096, 65536, 1 << 20])
        return rng.choice([b"\x00" * n, os.urandom(n) if n else b"", ctx.checkpoint[:n]])
    raise AssertionError("unhandled field type %d" % t)


def repeated_length(rng):
    r = rng.random()
    if r < 0.97:
        return rng.choice(EDGE_LENGTHS)
    return rng.choice(HUGE_LENGTHS)


def fill_repeated_scalar(rng, message, field, ctx):
    container = getattr(message, field.name)
    n = repeated_length(rng)
    if n > 1000:
        if field.type == pbd.FieldDescriptor.TYPE_STRING:
            n = 1000
        sample = [scalar_value(rng, field, ctx) for _ in range(16)]
        mode = rng.random()
        if field.type in (pbd.FieldDescriptor.TYPE_DOUBLE, pbd.FieldDescriptor.TYPE_FLOAT) and mode < 0.5:
            values = [(n - i) / n for i in range(n)]  # A plausible decreasing profile.
        else:
            values = [sample[i % 16] for i in range(n)]
        container.extend(values)
    else:
        container.extend(scalar_value(rng, field, ctx) for _ in range(n))


def fill_map(rng, message, field, ctx):
    target = getattr(message, field.name)
    n = rng.choice([0, 1, 2, 3, 31, 32, 33, 100, 1000])
    key_pool = ["a", "fuzz", "k", "app.kubernetes.io/name", "a" * 63, "a" * 64, "", "A", "-a", "a b", "é", "0", "a_b"]
    value_pool = ["", "v", "1", "v" * 63, "v" * 64, "a:b/c.d-e", "a b", "é", "\x00", "x" * 100000, "A.B"]
    for i in range(n):
        key = rng.choice(key_pool) if rng.random() < 0.5 else "k%d" % i
        if rng.random() < 0.1:
            key = edge_string(rng, CTX)
        value = rng.choice(value_pool) if rng.random() < 0.8 else edge_string(rng, CTX)
        target[key] = value


def random_message(rng, cls_or_desc, ctx, depth=0, p_set=0.6):
    """A message of this type generated from its descriptor alone."""
    desc = cls_or_desc if isinstance(cls_or_desc, pbd.Descriptor) else cls_or_desc.DESCRIPTOR
    message = message_class(desc)()
    fill_random(rng, message, ctx, depth, p_set)
    return message


def message_class(desc):
    from google.protobuf import message_factory
    try:
        return message_factory.GetMessageClass(desc)
    except AttributeError:
        return message_factory.MessageFactory(desc.file.pool).GetPrototype(desc)


def fill_random(rng, message, ctx, depth=0, p_set=0.6):
    desc = message.DESCRIPTOR
    chosen_oneofs = {o.name: rng.choice(list(o.fields) + [None]) for o in desc.oneofs}
    for field in desc.fields:
        if field.containing_oneof is not None and chosen_oneofs[field.containing_oneof.name] is not field:
            continue
        if rng.random() > p_set and field.containing_oneof is None:
            continue
        set_field(rng, message, field, ctx, depth)


def set_field(rng, message, field, ctx, depth):
    if field.message_type is not None and field.message_type.GetOptions().map_entry:
        message.ClearField(field.name)
        fill_map(rng, message, field, ctx)
        return
    if field.label == pbd.FieldDescriptor.LABEL_REPEATED:
        message.ClearField(field.name)
        if field.message_type is not None:
            n = rng.choice([0, 1, 2, 3, 10, 100, 1000]) if depth < 3 else rng.choice([0, 1])
            container = getattr(message, field.name)
            for _ in range(n):
                item = container.add()
                if depth < 5:
                    fill_random(rng, item, ctx, depth + 1, 0.5)
        else:
            fill_repeated_scalar(rng, message, field, ctx)
        return
    if field.message_type is not None:
        sub = getattr(message, field.name)
        sub.SetInParent()
        if depth < 6:
            sub.Clear()
            sub.SetInParent()
            fill_random(rng, sub, ctx, depth + 1, 0.6)
        return
    setattr(message, field.name, scalar_value(rng, field, ctx))


def mutate_fields(rng, message, ctx, count):
    """Sets `count` randomly chosen fields (at any depth, following set or unset submessages) to edge
    values, or clears them."""
    for _ in range(count):
        target = message
        for depth in range(8):
            fields = list(target.DESCRIPTOR.fields)
            if not fields:
                break
            field = rng.choice(fields)
            is_map = field.message_type is not None and field.message_type.GetOptions().map_entry
            if (field.message_type is not None and not is_map and field.label != pbd.FieldDescriptor.LABEL_REPEATED
                    and rng.random() < 0.65):
                target = getattr(target, field.name)
                target.SetInParent()
                continue
            if field.label == pbd.FieldDescriptor.LABEL_REPEATED and field.message_type is not None and not is_map \
                    and len(getattr(target, field.name)) and rng.random() < 0.6:
                target = rng.choice(list(getattr(target, field.name)))
                continue
            if rng.random() < 0.12:
                target.ClearField(field.name)
            else:
                set_field(rng, target, field, ctx, depth + 2)
            break


# ---------------------------------------------------------------------------------------------
# Byte-level mutation


def encode_varint(value):
    out = bytearray()
    value &= (1 << 64) - 1
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def mutate_bytes(rng, data):
    data = bytearray(data)
    for _ in range(rng.choice([1, 1, 1, 2, 3, 5, 8])):
        op = rng.randrange(11)
        if op == 0 and data:  # Bit flip.
            i = rng.randrange(len(data))
            data[i] ^= 1 << rng.randrange(8)
        elif op == 1 and data:  # Truncation.
            del data[rng.randrange(len(data)):]
        elif op == 2:  # Insertion of random bytes.
            i = rng.randrange(len(data) + 1)
            data[i:i] = os.urandom(rng.choice([1, 2, 4, 10, 100]))
        elif op == 3 and data:  # Overwrite with an interesting byte.
            data[rng.randrange(len(data))] = rng.choice([0x00, 0xFF, 0x80, 0x7F, 0x01, 0xC0, 0xFE])
        elif op == 4 and data:  # Duplicate a slice.
            i = rng.randrange(len(data))
            j = min(len(data), i + rng.randrange(1, 64))
            data[j:j] = data[i:j]
        elif op == 5:  # Append a random field with a random wire type.
            field = rng.choice([1, 2, 3, 4, 5, 7, 15, 16, 99, 536870911, 19000])
            wire = rng.randrange(8)
            data += encode_varint((field << 3) | wire)
            if wire == 0:
                data += encode_varint(rng.getrandbits(64))
            elif wire == 1:
                data += os.urandom(8)
            elif wire == 2:
                n = rng.choice([0, 1, 5, 100])
                data += encode_varint(rng.choice([n, n, 2 ** 31, 2 ** 64 - 1])) + os.urandom(n)
            elif wire == 5:
                data += os.urandom(4)
        elif op == 6:  # Overlong (11-byte) varint.
            i = rng.randrange(len(data) + 1)
            data[i:i] = b"\xff" * 10 + b"\x01"
        elif op == 7:  # Huge length prefix for field 1.
            data = bytearray(encode_varint((rng.choice([1, 2, 3, 4]) << 3) | 2) + encode_varint(
                rng.choice([2 ** 31 - 1, 2 ** 32, 2 ** 63, len(data) + 1])) + data)
        elif op == 8:  # Random bytes altogether.
            data = bytearray(os.urandom(rng.choice([0, 1, 3, 16, 200, 5000])))
        elif op == 9:  # Invalid UTF-8 in a string field.
            data += encode_varint((rng.choice([1, 2, 5, 6, 7]) << 3) | 2) + b"\x03\xff\xfe\xc3"
        elif op == 10:  # Deep nesting of field 1 as a submessage.
            inner = b""
            for _ in range(rng.choice([50, 99, 101, 200, 2000])):
                inner = encode_varint((1 << 3) | 2) + encode_varint(len(inner)) + inner
            data += inner
    return bytes(data)


def oversized_bytes(rng, data):
    """A valid message followed by a length-delimited field past the 64 MiB limit."""
    n = MESSAGE_LIMIT + rng.choice([1, 4096, 1 << 20])
    return bytes(data) + encode_varint((rng.choice([1, 4, 5, 7]) << 3) | 2) + encode_varint(n) + b"\x00" * n


# ---------------------------------------------------------------------------------------------
# The RPCs and their templates


def routing(rng):
    if rng.random() < 0.8:
        return pb.common.RoutingModel(depth=rng.choice([1, 2, 12, 24]), alpha=rng.choice([0.0, 0.25, 0.5, 1.0]))
    return pb.common.RoutingModel(depth=3, alpha_schedule=pb.common.AlphaSchedule(alpha=[0.2, 0.5, 0.7]))


def summary_options(rng):
    if rng.random() < 0.5:
        return pb.density.SummaryOptions(band_fractions=pb.density.BandFractions(leading=0.1, trailing=0.1),
                                         quantile_levels=[0.5, 0.9])
    return pb.density.SummaryOptions(band_positions=pb.density.BandPositions(leading_end=5, trailing_start=90))


def measured_values(rng, n=64):
    return [1.0 / (i + 1) + 0.5 * (i == n - 1) for i in range(n)]


def t_continuum(rng):
    d = pb.density
    request = d.EvaluateContinuumRequest(model=routing(rng), quantities=[d.DENSITY, d.CDF])
    if rng.random() < 0.5:
        request.point_list.x.extend([0.1, 0.5, 1.0])
    else:
        request.grid.CopyFrom(d.Grid(start=1e-6, stop=1.0, count=50, spacing=d.LOG))
    return request


def t_discrete(rng):
    d = pb.density
    request = d.EvaluateDiscreteRequest(model=routing(rng), length=1024, profiles=[pb.common.COHERENT, pb.common.INCOHERENT],
                                        summary_options=summary_options(rng))
    if rng.random() < 0.5:
        request.stride.CopyFrom(d.PositionStride(start=1, stop=1024, step=64))
    else:
        request.positions.position.extend([1, 2, 512, 1024])
    return request


def t_summarize(rng):
    d = pb.density
    if rng.random() < 0.5:
        return d.SummarizeProfileRequest(theory=d.TheoryProfile(model=routing(rng), length=100, profile=pb.common.COHERENT),
                                         options=summary_options(rng))
    return d.SummarizeProfileRequest(measured=d.MeasuredProfile(values=measured_values(rng, 100)), options=summary_options(rng))


def t_fit(rng):
    d = pb.density
    request = d.FitProfileRequest(measured=d.MeasuredProfile(values=measured_values(rng)), quantity=pb.common.SQUARED_NORM,
                                  models=[pb.common.COHERENT], include_profiles=rng.random() < 0.5)
    if rng.random() < 0.5:
        request.depth.fixed = 4
    else:
        request.depth.range.CopyFrom(d.DepthRange(min=2, max=6))
    return request


def tiny_overrides():
    return pb.model.ModelArchitectureOverrides(num_layers=2, hidden_size=32, num_heads=2, mlp_width=64, vocab_size=128,
                                               max_positions=64)


def t_register(rng):
    m = pb.model
    name = rng.choice(FUZZ_MODEL_NAMES[1:13]) if rng.random() < 0.6 else "fuzz-r%d" % rng.getrandbits(40)
    request = m.RegisterModelRequest(name=name, labels={"fuzz": "1"},
                                     request_id=rng.choice(["", "reg-%d" % rng.randrange(20)]), wait=rng.random() < 0.7)
    r = rng.random()
    if r < 0.7:
        request.preset.CopyFrom(m.PresetSource(preset=rng.choice(["gpt2", "qwen2-0.5b"] + TINY_PRESETS),
                                               overrides=tiny_overrides(), init_seed=rng.randrange(5)))
        if request.preset.preset == "qwen2-0.5b":
            request.preset.overrides.num_kv_heads = 1
        if request.preset.preset == "cesaro":
            request.preset.overrides.ClearField("num_heads")
            request.preset.overrides.ClearField("mlp_width")
    elif r < 0.9:
        request.checkpoint.CopyFrom(m.CheckpointSource(path=rng.choice(["tiny", "tiny/model.safetensors", "escape", "etc"]
                                                                       + PLANTED_FOLDERS)))
    else:
        request.torchscript.CopyFrom(m.TorchScriptSource(path="tiny/model.safetensors",
                                                         shape=m.TorchScriptShape(hidden_size=32, max_positions=64, num_layers=2)))
    return request


def t_get_model(rng):
    return pb.model.GetModelRequest(name=rng.choice(FUZZ_MODEL_NAMES + CTX.presets + [SENTINEL_MODEL]))


def t_list_models(rng):
    m = pb.model
    return m.ListModelsRequest(page_size=rng.choice([0, 1, 5, 1000]), family=m.MODEL_FAMILY_GPT2, state=m.MODEL_STATE_READY,
                               label_selector=rng.choice(["", "fuzz=1"]))


def t_delete_model(rng):
    return pb.model.DeleteModelRequest(name=rng.choice(FUZZ_MODEL_NAMES[1:] + CTX.presets), force=rng.random() < 0.5)


def t_list_presets(rng):
    return pb.model.ListPresetsRequest()


def t_submit(rng):
    j = pb.job
    spec = j.JacobianNormSpec(model=rng.choice(["fuzz-tiny", "fuzz-tiny", "fuzz-m1", "fuzz-up0"]), sequence_length=8,
                              samples=1, method=j.JACOBIAN_METHOD_EXACT,
                              input=j.JacobianInput(random_tokens=j.RandomTokensInput(seed=rng.randrange(100))))
    r = rng.random()
    if r < 0.2:
        spec.method = j.JACOBIAN_METHOD_HUTCHINSON
        spec.probes = 4
    elif r < 0.35:
        spec.input.given_tokens.sequences.add(token_ids=[rng.randrange(128) for _ in range(8)])
    elif r < 0.5:
        spec.input.gaussian_embeddings.CopyFrom(j.GaussianEmbeddingsInput(seed=1, stddev=1.0))
    elif r < 0.6:  # Recall probes: depths out of range or not numbers, counts at and past their bounds.
        recall = spec.input.recall
        recall.depths.extend(rng.choice([0.0, 0.5, 1.0, -0.1, 1.5, float("nan"), float("inf")])
                             for _ in range(rng.choice([0, 1, 5, 65])))
        recall.probes_per_depth = rng.choice([0, 1, 16, (1 << 32) - 1])
        recall.pairs = rng.choice([0, 1, 8, 256, 257])
        recall.key_letters = rng.choice([0, 1, 3, 16, 17])
        recall.values = rng.choice(["", "ab", "a=b", "aa", "x" * 65, "\u00e9", " "])
        recall.seed = rng.choice([0, 7, (1 << 64) - 1])
        spec.sequence_length = rng.choice([8, 128])
        spec.output = rng.choice([j.JACOBIAN_OUTPUT_FINAL_HIDDEN, j.JACOBIAN_OUTPUT_LOSS_GRADIENT])
    if rng.random() < 0.2:  # A comparison job: known, unknown, repeated and init models, and too many.
        pool = FUZZ_MODEL_NAMES + ["init", SENTINEL_MODEL, "", "../x", "fuzz-tiny"]
        spec.versus.extend(rng.choice(pool) for _ in range(rng.choice([1, 2, 3, 17])))
        spec.init_seed = rng.choice([0, 1, (1 << 64) - 1])
        spec.output = rng.choice([j.JACOBIAN_OUTPUT_FINAL_HIDDEN, j.JACOBIAN_OUTPUT_LOSS_GRADIENT])
    request = j.SubmitJobRequest(spec=j.JobSpec(jacobian_norm=spec, priority=rng.choice([0, 1, 100])), labels={"fuzz": "1"},
                                 request_id=rng.choice(["", "sub-%d" % rng.randrange(30)]))
    if rng.random() < 0.3:
        request.spec.time_limit.seconds = rng.choice([1, 60, 3600])
    return request


def t_get_job(rng):
    return pb.job.GetJobRequest(id=CTX.some_job(rng), view=rng.choice([0, 1, 2]))


def t_list_jobs(rng):
    j = pb.job
    return j.ListJobsRequest(page_size=rng.choice([0, 1, 10, 1000]), states=rng.choice([[], [j.JOB_STATE_QUEUED],
                                                                                     [j.JOB_STATE_SUCCEEDED, j.JOB_STATE_FAILED]]),
                             model=rng.choice(["", "fuzz-tiny"]), label_selector=rng.choice(["", "fuzz=1"]),
                             view=rng.choice([0, 1, 2]))


def t_cancel_job(rng):
    return pb.job.CancelJobRequest(id=CTX.some_job(rng), reason=rng.choice(["", "fuzz"]))


def t_delete_job(rng):
    return pb.job.DeleteJobRequest(id=CTX.some_job(rng), force=rng.random() < 0.5)


def t_job_result(rng):
    return pb.job.GetJobResultRequest(id=CTX.some_job(rng), first_position=1, last_position=8, stride=1,
                                      page_size=rng.choice([0, 1, 4]), include_raw_samples=rng.random() < 0.5,
                                      include_token_ids=rng.random() < 0.5)


def t_watch(rng):
    return pb.job.WatchJobRequest(id=CTX.some_job(rng), view=rng.choice([0, 1, 2]))


def t_tokenize(rng):
    m = pb.model
    request = m.TokenizeRequest(model=rng.choice(FUZZ_MODEL_NAMES + TINY_PRESETS), special_tokens_as_text=rng.random() < 0.5)
    if rng.random() < 0.5:
        request.text = rand_text(rng, rng.choice([0, 1, 16, 200]))
    else:
        request.token_ids.ids.extend(rng.randrange(70000) for _ in range(rng.choice([0, 1, 16])))
    return request


def t_export(rng):
    return pb.model.ExportModelRequest(name=rng.choice(FUZZ_MODEL_NAMES + TINY_PRESETS), dtype=rng.choice([0, 1]))


def t_health(rng):
    return pb.health.HealthCheckRequest(service=edge_string(rng, CTX, "service"))


class Rpc:
    def __init__(self, service, method, request_cls, response_cls, template, weight=1.0, kind="unary"):
        self.service, self.method = service, method
        self.path = "/%s/%s" % (service, method)
        self.request_cls, self.response_cls, self.template = request_cls, response_cls, template
        self.weight, self.kind = weight, kind


# Each posbias.v1 RPC's template of valid requests and its draw weight, by method name. The RPCs
# themselves come from the descriptors (build_rpcs): one without a template is fuzzed from its
# descriptor alone, so a new RPC is fuzzed from the day it is added.
TEMPLATES = {
    "EvaluateContinuum": (t_continuum, 1.0), "EvaluateDiscrete": (t_discrete, 1.0),
    "SummarizeProfile": (t_summarize, 1.0), "FitProfile": (t_fit, 1.0),
    "RegisterModel": (t_register, 1.0), "GetModel": (t_get_model, 0.6), "ListModels": (t_list_models, 0.6),
    "DeleteModel": (t_delete_model, 0.6), "ListPresets": (t_list_presets, 0.3), "Tokenize": (t_tokenize, 0.4),
    "UploadModel": (None, 1.2), "ExportModel": (t_export, 0.6),
    "SubmitJob": (t_submit, 1.3), "GetJob": (t_get_job, 0.6), "ListJobs": (t_list_jobs, 0.6),
    "CancelJob": (t_cancel_job, 0.6), "DeleteJob": (t_delete_job, 0.6), "GetJobResult": (t_job_result, 0.8),
    "WatchJob": (t_watch, 0.8),
}
# Client-streaming RPCs need a case of their own (the fuzzer's kind); the descriptors cannot drive them.
CLIENT_STREAMS = {"UploadModel": "upload"}


def build_rpcs():
    """Every posbias.v1 RPC of the descriptors, with its template where TEMPLATES has one, then
    gRPC's health and reflection services and a service that does not exist. Returns (rpcs, the
    posbias RPCs without a template, the client-streaming RPCs without a case)."""
    from google.protobuf import descriptor_pb2
    rpcs, untemplated, missing = [], [], []
    for module in (pb.density, pb.model, pb.job):
        for service in module.DESCRIPTOR.services_by_name.values():
            proto = descriptor_pb2.ServiceDescriptorProto()
            service.CopyToProto(proto)
            for method, described in zip(service.methods, proto.method):
                path = "/%s/%s" % (service.full_name, method.name)
                if described.client_streaming and method.name not in CLIENT_STREAMS:
                    missing.append(path)
                    continue
                kind = (CLIENT_STREAMS[method.name] if described.client_streaming
                        else "server_stream" if described.server_streaming else "unary")
                request_cls = getattr(module, method.input_type.name, None) or getattr(pb.common, method.input_type.name)
                response_cls = getattr(module, method.output_type.name, None) or getattr(pb.common, method.output_type.name)
                if method.name not in TEMPLATES:
                    untemplated.append(path)
                template, weight = TEMPLATES.get(method.name, (None, 0.6))
                rpcs.append(Rpc(service.full_name, method.name, request_cls, response_cls, template, weight, kind=kind))
    rpcs += [
        Rpc("grpc.health.v1.Health", "Check", pb.health.HealthCheckRequest, pb.health.HealthCheckResponse, t_health, 0.3),
        Rpc("grpc.health.v1.Health", "Watch", pb.health.HealthCheckRequest, pb.health.HealthCheckResponse, t_health, 0.2,
            kind="server_stream"),
        Rpc("grpc.reflection.v1alpha.ServerReflection", "ServerReflectionInfo", pb.reflection.ServerReflectionRequest,
            pb.reflection.ServerReflectionResponse, None, 0.3, kind="reflection"),
        Rpc("posbias.v1.NoSuchService", "Nothing", pb.common.ErrorDetail, pb.common.ErrorDetail, None, 0.1, kind="unknown"),
    ]
    return rpcs, untemplated, sorted(missing)


# ---------------------------------------------------------------------------------------------
# Taming: valid requests that would build or run something large are shrunk, invalid ones kept.


def shrink_if_valid(message, field, limit, small):
    if message.HasField(field) if message.DESCRIPTOR.fields_by_name[field].has_presence else True:
        value = getattr(message, field)
        if small < value <= limit:
            setattr(message, field, small)


def tame(rpc, request, rng):
    if rpc.method == "RegisterModel" and request.WhichOneof("source") == "preset":
        o = request.preset.overrides
        request.preset.SetInParent()
        for field, limit, small in (("num_layers", 1024, 2), ("hidden_size", 16384, 32), ("mlp_width", 65536, 64),
                                    ("vocab_size", 262144, 128), ("max_positions", 1 << 20, 64), ("num_heads", 256, 2)):
            if not o.HasField(field) and field != "num_heads":
                setattr(o, field, small)
            shrink_if_valid(o, field, limit, small)
    if rpc.method == "ExportModel" and request.name in set(CTX.presets) - set(TINY_PRESETS):
        request.name = "fuzz-tiny"  # Exporting a large preset builds it (gpt2-xl: 6 GiB, minutes): see the README.
    if rpc.method == "SubmitJob":
        spec = request.spec.jacobian_norm
        if spec.model not in FUZZ_MODEL_NAMES + TINY_PRESETS and (spec.model in CTX.presets or spec.model in
                                                                   ("gpt2", "qwen2-0.5b", "gpt2-xl", "qwen2-1.5b")):
            spec.model = "fuzz-tiny"
        for field, limit, small in (("sequence_length", 1 << 21, 8), ("samples", 1 << 20, 1), ("probes", 1 << 20, 4)):
            shrink_if_valid(spec, field, limit, small)
        if spec.HasField("target_position") and 8 < spec.target_position <= (1 << 21):
            spec.target_position = 8


# ---------------------------------------------------------------------------------------------
# Judging answers


class Outcome:
    def __init__(self, code, details="", trailers=(), raw=None, cancelled=False, short=False, messages=0):
        self.code, self.details, self.trailers = code, details or "", dict(trailers or ())
        self.raw, self.cancelled, self.short, self.messages = raw, cancelled, short, messages
        self.resend = None  # For a raw unary call: sends a parsed request structured, returns its Outcome.


class Recorder:
    def __init__(self):
        self.lock = threading.Lock()
        self.violations = []
        self.codes = {}
        self.per_rpc = {}
        self.kinds = {}
        self.notes = {}
        self.samples = {}
        self.done = 0
        self.printed = 0

    def count(self, rpc, kind, code):
        with self.lock:
            self.done += 1
            self.codes[code.name] = self.codes.get(code.name, 0) + 1
            key = rpc.path
            self.per_rpc.setdefault(key, {})
            self.per_rpc[key][code.name] = self.per_rpc[key].get(code.name, 0) + 1
            self.kinds[kind] = self.kinds.get(kind, 0) + 1

    def sample(self, kind, data):
        with self.lock:
            bucket = self.samples.setdefault(kind, [])
            if len(bucket) < 3:
                bucket.append(data[:400].hex())

    def note(self, text):
        with self.lock:
            self.notes[text] = self.notes.get(text, 0) + 1

    def violation(self, case, rpc, kind, why, request_text, outcome):
        if callable(request_text):
            request_text = request_text()
        entry = {"case": case, "rpc": rpc.path, "kind": kind, "why": why, "request": request_text,
                 "code": outcome.code.name if outcome else None, "details": outcome.details[:2000] if outcome else None,
                 "trailers": {k: (v if isinstance(v, str) else v.hex()) for k, v in outcome.trailers.items()} if outcome else None,
                 "messages": outcome.messages if outcome else None, "cancelled": outcome.cancelled if outcome else None}
        with self.lock:
            self.violations.append(entry)
            if self.printed < 25:
                self.printed += 1
                print_violation(entry)


def print_violation(entry):
    sys.stderr.write("\n=== VIOLATION (case %s, rerun with --seed %s --case %s) ===\nrpc: %s (%s)\nwhy: %s\nanswer: %s %r\n"
                     "trailers: %s\nmessages before it: %s (this script cancelled: %s)\nrequest:\n%s\n"
                     % (entry["case"], ARGS.seed, entry["case"], entry["rpc"], entry["kind"], entry["why"], entry["code"],
                        entry["details"], entry["trailers"], entry["messages"], entry["cancelled"], entry["request"]))
    sys.stderr.flush()


def describe_request(request, raw=None, limit=3000):
    if raw is not None:
        text = raw[:1500].hex()
        return "raw bytes, %d bytes: %s%s" % (len(raw), text, "..." if len(raw) > 1500 else "")
    if request is None:
        return "(none)"
    if isinstance(request, list):
        return "\n---\n".join(describe_request(r, limit=limit // max(1, len(request))) for r in request[:8]) + (
            "\n--- (%d messages in all)" % len(request) if len(request) > 8 else "")
    if isinstance(request, bytes):
        return describe_request(None, raw=request)
    text = text_format.MessageToString(request, as_utf8=False)
    if len(text) > limit:
        text = text[:limit] + "... (%d characters of text format)" % len(text)
    return text


def parses(cls, data):
    try:
        cls.FromString(data)
        return True
    except (DecodeError, RuntimeError, ValueError, Exception):
        return False


def judge(case, rpc, kind, request_text, outcome, request_cls=None, rec=None):
    code = outcome.code
    rec.count(rpc, kind, code)
    ours = rpc.path.startswith(POSBIAS_PREFIX)
    reason = outcome.trailers.get("posbias-error-reason")
    SC = grpc.StatusCode

    def bad(why):
        rec.violation(case, rpc, kind, why, request_text, outcome)

    if code == SC.UNAVAILABLE:
        return bad("UNAVAILABLE: the server stopped answering (died or closed the connection)")
    if code == SC.CANCELLED:
        if not outcome.cancelled:
            bad("CANCELLED although this script did not cancel the call")
        return
    if code == SC.DEADLINE_EXCEEDED:
        if not outcome.short:
            bad("DEADLINE_EXCEEDED under the ordinary %.0f s deadline: a hang or a very slow answer" % RPC_DEADLINE_S)
        return
    if code in (SC.INTERNAL, SC.UNKNOWN):
        library = (outcome.raw is not None and reason is None and outcome.details in LIBRARY_PARSE_MESSAGES)
        if library:
            if request_cls is not None and parses(request_cls, outcome.raw):
                rec.note("%s: the library refused bytes Python parses (details %r)" % (code.name, outcome.details))
            else:
                rec.note("%s %r: gRPC's own answer to unparseable bytes (allowed)" % (code.name, outcome.details))
            return
        if rpc.service == "grpc.health.v1.Health" and outcome.details == "could not parse request":
            # gRPC's default health service: bytes that do not parse or a service name over 200 bytes.
            rec.note("%s %r from gRPC's own health service (allowed)" % (code.name, outcome.details))
            return
        return bad("%s from the server's own code" % code.name)
    if code == SC.OK and not (ARGS.expect_only and ours):
        return
    if code == SC.UNIMPLEMENTED:
        if kind == "unknown" or rpc.kind == "unknown":
            return
        # gRPC's callback API answers a request it cannot deserialize with UNIMPLEMENTED and an
        # empty message (and so it answers a handler that threw): allowed only for raw bytes.
        if outcome.raw is not None and reason is None and outcome.details == "":
            if request_cls is not None and parses(request_cls, outcome.raw):
                if outcome.resend is not None:
                    again = outcome.resend(request_cls.FromString(outcome.raw))
                    if again is not None and again.code == SC.UNIMPLEMENTED:
                        return bad("UNIMPLEMENTED '' also for the same request sent structured: the handler threw?")
                rec.note("UNIMPLEMENTED '' for bytes Python parses as %s (the C++ parser is stricter; the same "
                         "message re-sent structured was answered normally)" % request_cls.__name__)
                rec.sample("parser", outcome.raw)
            else:
                rec.note("UNIMPLEMENTED '': gRPC's own answer to unparseable bytes (allowed)")
            return
        if reason != "NOT_IMPLEMENTED":  # The server's own word for a feature it does not build.
            return bad("UNIMPLEMENTED for an RPC the server serves (a structured request: the handler threw?)")
    if not ours:
        if code in (SC.UNAUTHENTICATED, SC.PERMISSION_DENIED, SC.DATA_LOSS):
            bad("unexpected %s from %s" % (code.name, rpc.service))
        return
    if code == SC.RESOURCE_EXHAUSTED and "metadata size exceeds limit" in outcome.details:
        return bad("the answer's metadata exceeded the client's limit (gRPC's default 8 KiB): an oversized "
                   "posbias-error-bin on this call or, on a shared connection, on another")
    if code == SC.RESOURCE_EXHAUSTED and reason is None and any(m in outcome.details for m in LIBRARY_SIZE_MESSAGES):
        rec.note("RESOURCE_EXHAUSTED %r: gRPC's own message-size refusal (allowed)" % outcome.details[:60])
        return
    # With --expect-only every answer of the server's own code has that code (the library's own
    # refusals above come before any handler: unparseable bytes, unknown methods, oversized messages).
    if ARGS.expect_only:
        if code.name != ARGS.expect_only:
            bad("--expect-only %s, got %s" % (ARGS.expect_only, code.name))
        return
    if code == SC.PERMISSION_DENIED and ARGS.allow_role_refusals and reason == "ROLE_REQUIRED":
        pass  # A tenant's operator touching a public model: the role admin is needed.
    elif code in (SC.UNAUTHENTICATED, SC.PERMISSION_DENIED, SC.DATA_LOSS):
        return bad("unexpected %s" % code.name)
    if code not in (SC.INVALID_ARGUMENT, SC.NOT_FOUND, SC.ALREADY_EXISTS, SC.RESOURCE_EXHAUSTED, SC.FAILED_PRECONDITION,
                    SC.OUT_OF_RANGE, SC.ABORTED, SC.UNIMPLEMENTED, SC.PERMISSION_DENIED):
        return bad("unexpected code %s" % code.name)
    if reason is None:
        return bad("error without the posbias-error-reason trailer")
    binary = outcome.trailers.get("posbias-error-bin")
    if binary is None:
        return bad("error without the posbias-error-bin trailer")
    try:
        detail = pb.common.ErrorDetail.FromString(binary)
    except DecodeError:
        return bad("posbias-error-bin does not parse as ErrorDetail")
    named = pb.common.ErrorReason.Name(detail.reason) if detail.reason in pb.common.ErrorReason.values() else None
    if named != reason:
        return bad("posbias-error-bin names reason %d, the trailer %s" % (detail.reason, reason))


def outcome_of_error(error, **kwargs):
    try:
        trailers = error.trailing_metadata() or ()
    except Exception:  # noqa: BLE001
        trailers = ()
    return Outcome(error.code(), error.details(), trailers, **kwargs)


# ---------------------------------------------------------------------------------------------
# One case


class Fuzzer:
    def __init__(self, channel, ctx, rec, rpcs):
        self.channel, self.ctx, self.rec, self.rpcs = channel, ctx, rec, rpcs
        self.weights = [r.weight for r in rpcs]
        self.metadata = [("authorization", "Bearer " + ARGS.token)] if ARGS.token else None
        self.escape_registered = []
        self.in_flight, self.in_flight_lock = {}, threading.Lock()

    def check_secrets(self, index, rpc, kind, request_text, outcome, answers=()):
        """No answer names another tenant's job, model uid or weights digest (unless the request
        itself carried it: an echo is not a leak)."""
        if not self.ctx.secrets or outcome is None:
            return
        blobs = [outcome.details.encode("utf-8", "replace")]
        blobs += [v if isinstance(v, bytes) else str(v).encode() for v in outcome.trailers.values()]
        blobs += list(answers)
        sent = None
        for secret in self.ctx.secrets:
            if any(secret.encode() in blob for blob in blobs):
                sent = request_text() if sent is None else sent
                if secret not in sent and secret.encode().hex() not in sent:
                    self.rec.violation(index, rpc, kind, "the answer holds another tenant's secret %s" % secret,
                                       sent, outcome)

    def deadline(self, rng):
        if rng.random() < 0.08:
            return rng.choice([0.001, 0.05, 0.2, 1.0]), True
        return RPC_DEADLINE_S, False

    def run_case(self, index):
        rng = random.Random("%d:%d" % (ARGS.seed, index))
        rpc = rng.choices(self.rpcs, weights=self.weights)[0]
        with self.in_flight_lock:
            self.in_flight[index] = rpc.method
        try:
            if rpc.kind == "unary":
                self.unary(index, rng, rpc)
            elif rpc.kind == "server_stream":
                self.server_stream(index, rng, rpc)
            elif rpc.kind == "upload":
                self.upload(index, rng, rpc)
            elif rpc.kind == "reflection":
                self.reflection(index, rng, rpc)
            else:
                self.unknown(index, rng, rpc)
        except Exception:  # noqa: BLE001  A bug of this script, not of the server: reported as such.
            self.rec.violation(index, rpc, "script", "the fuzzer itself raised:\n" + traceback.format_exc(), "", None)
        finally:
            with self.in_flight_lock:
                self.in_flight.pop(index, None)

    def in_flight_now(self):
        with self.in_flight_lock:
            return sorted(self.in_flight.items())

    def make_request(self, rng, rpc):
        r = rng.random()
        if r < 0.45 and rpc.template is not None:
            request = rpc.template(rng)
            mutate_fields(rng, request, self.ctx, rng.choice([1, 1, 2, 3]))
            kind = "template"
        elif r < 0.5 and rpc.template is not None:
            request, kind = rpc.template(rng), "valid"
        else:
            request, kind = random_message(rng, rpc.request_cls, self.ctx), "random"
        tame(rpc, request, rng)
        return request, kind

    def unary(self, index, rng, rpc):
        request, kind = self.make_request(rng, rpc)
        timeout, short = self.deadline(rng)
        raw = None
        if rng.random() < 0.3:
            data = request.SerializeToString()
            raw = oversized_bytes(rng, data) if rng.random() < 0.004 else mutate_bytes(rng, data)
            kind = "bytes"
        if raw is not None:
            call = self.channel.unary_unary(rpc.path)
            payload = raw
        else:
            call = self.channel.unary_unary(rpc.path, request_serializer=rpc.request_cls.SerializeToString,
                                            response_deserializer=rpc.response_cls.FromString)
            payload = request
        answers = []
        try:
            response = call(payload, timeout=timeout, metadata=self.metadata)
            outcome = Outcome(grpc.StatusCode.OK, raw=raw, short=short)
            answers.append(response if raw is not None else response.SerializeToString())
            if raw is not None:
                try:
                    response = rpc.response_cls.FromString(response)
                except DecodeError:
                    self.rec.violation(index, rpc, kind, "OK answer that does not parse as %s" % rpc.response_cls.__name__,
                                       describe_request(request, raw), outcome)
                    return
            self.learn(rpc, request, response, raw)
        except grpc.RpcError as error:
            outcome = outcome_of_error(error, raw=raw, short=short)
            if raw is not None:
                outcome.resend = lambda parsed: self.structured_outcome(rpc, parsed)
        judge(index, rpc, kind, lambda: describe_request(request, raw), outcome, rpc.request_cls, self.rec)
        self.check_secrets(index, rpc, kind, lambda: describe_request(request, raw), outcome, answers)
        if rpc.method == "RegisterModel" and raw is None and request.name.startswith("fuzz-r") and \
                outcome.code not in (grpc.StatusCode.OK, grpc.StatusCode.ALREADY_EXISTS, grpc.StatusCode.DEADLINE_EXCEEDED,
                                     grpc.StatusCode.CANCELLED) and outcome.trailers.get("posbias-error-reason") != "SERVER_BUSY":
            self.check_nothing_left(index, rpc, kind, request, outcome)

    def check_nothing_left(self, index, rpc, kind, request, outcome):
        """A refused registration leaves no model behind (README: Limits and guarantees)."""
        try:
            model = pb.model_grpc.ModelServiceStub(self.channel).GetModel(
                pb.model.GetModelRequest(name=request.name), timeout=RPC_DEADLINE_S, metadata=self.metadata)
            self.rec.violation(index, rpc, kind, "refused with %s but left model %s behind in state %s" % (
                outcome.code.name, model.name, pb.model.ModelState.Name(model.state)),
                lambda: describe_request(request), outcome)
        except grpc.RpcError as error:
            if error.code() != grpc.StatusCode.NOT_FOUND:
                self.rec.note("GetModel after a refused registration: %s" % error.code().name)

    def structured_outcome(self, rpc, parsed):
        call = self.channel.unary_unary(rpc.path, request_serializer=rpc.request_cls.SerializeToString,
                                        response_deserializer=rpc.response_cls.FromString)
        try:
            call(parsed, timeout=RPC_DEADLINE_S, metadata=self.metadata)
            return Outcome(grpc.StatusCode.OK)
        except grpc.RpcError as error:
            return outcome_of_error(error)
        except Exception:  # noqa: BLE001  Python cannot serialize what it parsed (e.g. invalid UTF-8).
            return None

    def learn(self, rpc, request, response, raw):
        if rpc.method in ("SubmitJob", "GetJob", "CancelJob") and response.id:
            self.ctx.add_job(response.id)
        if rpc.method == "ListJobs":
            for job in response.jobs[:5]:
                self.ctx.add_job(job.id)
        if rpc.method == "RegisterModel" and raw is None and request.WhichOneof("source") in ("checkpoint", "torchscript"):
            path = getattr(request, request.WhichOneof("source")).path
            if path.split("/")[0] in ("escape", "etc", "loop") or path.split("/")[0] in PLANTED_ESCAPES:
                self.escape_registered.append((path, response.name, pb.model.ModelState.Name(response.state)))

    def server_stream(self, index, rng, rpc):
        request, kind = self.make_request(rng, rpc)
        if rpc.method == "WatchJob" and rng.random() < 0.5:
            request.id = self.ctx.some_job(rng)
        timeout, short = self.deadline(rng)
        if rpc.method in ("WatchJob", "Watch"):  # Streams until the job ends or the status changes: short.
            timeout, short = rng.choice([0.1, 0.3, 1.0, 2.0]), True
        raw = None
        if rng.random() < 0.25:
            raw, kind = mutate_bytes(rng, request.SerializeToString()), "bytes"
            call = self.channel.unary_stream(rpc.path)
            stream = call(raw, timeout=timeout, metadata=self.metadata)
        else:
            call = self.channel.unary_stream(rpc.path, request_serializer=rpc.request_cls.SerializeToString,
                                             response_deserializer=rpc.response_cls.FromString)
            stream = call(request, timeout=timeout, metadata=self.metadata)
        stop_after = rng.choice([1, 1, 2, None, None])
        cancelled, count, answers = False, 0, []
        try:
            for message in stream:
                count += 1
                answers.append(message if raw is not None else message.SerializeToString())
                if raw is not None:
                    rpc.response_cls.FromString(message)
                if stop_after is not None and count >= stop_after:
                    cancelled = True
                    stream.cancel()
                    break
            # The server's own trailers even after this script cancelled: when its status came first
            # (a stream it ended as the cancel went out), the code is its answer and is judged with them.
            outcome = Outcome(stream.code() or grpc.StatusCode.OK, stream.details(), stream.trailing_metadata() or (),
                              raw=raw, cancelled=cancelled, short=short, messages=count)
        except grpc.RpcError as error:
            outcome = outcome_of_error(error, raw=raw, cancelled=cancelled, short=short, messages=count)
        judge(index, rpc, kind, lambda: describe_request(request, raw), outcome, rpc.request_cls, self.rec)
        self.check_secrets(index, rpc, kind, lambda: describe_request(request, raw), outcome, answers)

    # -- UploadModel -----------------------------------------------------------------------------

    def upload_messages(self, rng):
        m = pb.model
        data = self.ctx.checkpoint
        scenario = rng.choice(["valid", "valid", "bad_sha", "sizes", "no_metadata", "metadata_twice", "empty", "metadata_only",
                               "mutated_file", "mutated_config", "random", "random", "stop_early", "cancel", "huge_chunk"])
        meta = m.UploadModelMetadata(name=rng.choice(FUZZ_MODEL_NAMES[13:] + FUZZ_MODEL_NAMES[1:3]), config_json=self.ctx.config_json,
                                     total_bytes=len(data), sha256=hashlib.sha256(data).hexdigest(), labels={"fuzz": "1"},
                                     wait=True)
        if scenario == "bad_sha":
            meta.sha256 = rng.choice(["0" * 64, hashlib.sha256(data[:-1]).hexdigest(), "x", ""])
            data = data[:-1] + b"\x01"
        elif scenario == "sizes":
            meta.total_bytes = rng.choice([0, 1, len(data) - 1, len(data) + 1, 2 ** 63, U64, 17179869185])
        elif scenario == "mutated_file":
            data = mutate_bytes(rng, data) if rng.random() < 0.5 else self.mutate_header(rng, data)
            meta.total_bytes = len(data)
            meta.sha256 = hashlib.sha256(data).hexdigest() if rng.random() < 0.7 else ""
        elif scenario == "mutated_config":
            meta.config_json = rng.choice(json_strings(rng, self.ctx))
        elif scenario == "random":
            meta = random_message(rng, m.UploadModelMetadata, self.ctx)
            if rng.random() < 0.5:
                meta.total_bytes, meta.sha256 = len(data), hashlib.sha256(data).hexdigest()
            if len(meta.config_json) > 100000:
                meta.config_json = meta.config_json[:100000]
        else:
            if rng.random() < 0.3:
                mutate_fields(rng, meta, self.ctx, 1)
        chunk = rng.choice([1, 7, 1000, 4096, 65536, 1 << 20])
        # At most 300 chunks: this client, sharing Python's interpreter lock with the other fuzz
        # threads, sends only ~100 small messages a second under load, so 2000 one-byte chunks
        # took 20-29 s of the 30 s deadline on the client side alone (the server reads them in 0.4 s).
        chunks = [data[i:i + chunk] for i in range(0, len(data), chunk)][:300]
        if rng.random() < 0.1:
            chunks.insert(rng.randrange(len(chunks) + 1), b"")
        messages = [m.UploadModelRequest(metadata=meta)] + [m.UploadModelRequest(chunk=c) for c in chunks]
        if scenario == "no_metadata":
            messages = messages[1:]
        elif scenario == "metadata_twice":
            messages.insert(rng.randrange(1, len(messages) + 1), m.UploadModelRequest(metadata=meta))
        elif scenario == "empty":
            messages = []
        elif scenario == "metadata_only":
            messages = messages[:1]
        elif scenario == "stop_early":
            messages = messages[:max(1, rng.randrange(len(messages)))]
        elif scenario == "huge_chunk":
            messages = messages[:1] + [m.UploadModelRequest(chunk=b"\x00" * rng.choice([4 << 20, 32 << 20, MESSAGE_LIMIT + 16]))]
        return scenario, messages

    def mutate_header(self, rng, data):
        (length,) = struct.unpack("<Q", data[:8])
        header = data[8:8 + length]
        choice = rng.random()
        if choice < 0.3:
            return struct.pack("<Q", rng.choice([0, 1, length + 1, length - 1, 2 ** 63, U64, 100 << 20])) + data[8:]
        if choice < 0.7:
            try:
                parsed = json.loads(header)
                key = rng.choice([k for k in parsed if k != "__metadata__"] or ["x"])
                entry = parsed.get(key, {})
                if isinstance(entry, dict):
                    field = rng.choice(["dtype", "shape", "data_offsets"])
                    entry[field] = rng.choice([[], [0], [2 ** 63, 2 ** 63], [-1, 5], "F32", "I64", "X", [1, 2, 3, 4, 5, 6, 7, 8, 9],
                                               [2 ** 32, 2 ** 32], None, [0, 0], [1 << 40]])
                    parsed[key] = entry
                body = json.dumps(parsed).encode()
                return struct.pack("<Q", len(body)) + body + data[8 + length:]
            except ValueError:
                pass
        return mutate_bytes(rng, data[:8 + length]) + data[8 + length:]

    def upload(self, index, rng, rpc):
        scenario, messages = self.upload_messages(rng)
        raw_mode = rng.random() < 0.15
        timeout, short = self.deadline(rng)
        if raw_mode:
            payloads = [msg.SerializeToString() for msg in messages]
            for i in rng.sample(range(len(payloads)), min(len(payloads), rng.choice([1, 2]))) if payloads else []:
                payloads[i] = mutate_bytes(rng, payloads[i])
            call = self.channel.stream_unary(rpc.path)
            scenario = "bytes/" + scenario
        else:
            payloads = messages
            call = self.channel.stream_unary(rpc.path, request_serializer=rpc.request_cls.SerializeToString,
                                             response_deserializer=rpc.response_cls.FromString)
        cancel = scenario.endswith("cancel")
        release = threading.Event()

        def generate():
            for i, payload in enumerate(payloads):
                if cancel and i == max(1, len(payloads) // 2):
                    release.wait(5)
                    return
                yield payload

        future = call.future(generate(), timeout=timeout, metadata=self.metadata)
        if cancel:
            time.sleep(rng.choice([0.0, 0.01, 0.1]))
            future.cancel()
            release.set()
        answers = []
        try:
            response = future.result()
            if raw_mode:
                response = rpc.response_cls.FromString(response)
            answers.append(response.SerializeToString())
            outcome = Outcome(grpc.StatusCode.OK, short=short)
        except grpc.FutureCancelledError:
            outcome = Outcome(grpc.StatusCode.CANCELLED, cancelled=True)
        except grpc.RpcError as error:
            outcome = outcome_of_error(error, cancelled=cancel, short=short)
            if raw_mode:
                outcome.raw = b"".join(payloads[:1])
        judge(index, rpc, "upload/" + scenario, lambda: "scenario %s:\n%s" % (scenario, describe_request(payloads, limit=4000)),
              outcome, None, self.rec)
        self.check_secrets(index, rpc, "upload/" + scenario, lambda: describe_request(payloads, limit=100000), outcome,
                           answers)
        release.set()

    # -- Health, reflection, unknown methods ----------------------------------------------------

    def reflection(self, index, rng, rpc):
        r = pb.reflection
        requests = []
        for _ in range(rng.choice([1, 1, 2, 5])):
            which = rng.randrange(6)
            host = rng.choice(["", "x" * 1000])
            if which == 0:
                requests.append(r.ServerReflectionRequest(host=host, list_services=edge_string(rng, self.ctx)))
            elif which == 1:
                requests.append(r.ServerReflectionRequest(host=host, file_by_filename=rng.choice(
                    ["posbias/v1/job_service.proto", "../../etc/passwd", "/etc/passwd", edge_string(rng, self.ctx, "path")])))
            elif which == 2:
                requests.append(r.ServerReflectionRequest(host=host, file_containing_symbol=rng.choice(
                    ["posbias.v1.JobService", "posbias.v1.Job", "posbias.v1.Nope", edge_string(rng, self.ctx)])))
            elif which == 3:
                requests.append(r.ServerReflectionRequest(host=host, file_containing_extension=r.ExtensionRequest(
                    containing_type=edge_string(rng, self.ctx), extension_number=edge_int(rng, pbd.FieldDescriptor.TYPE_INT32))))
            elif which == 4:
                requests.append(r.ServerReflectionRequest(host=host, all_extension_numbers_of_type=edge_string(rng, self.ctx)))
            else:
                requests.append(random_message(rng, r.ServerReflectionRequest, self.ctx))
        raw = None
        if rng.random() < 0.3:
            raw = [mutate_bytes(rng, q.SerializeToString()) for q in requests]
            call = self.channel.stream_stream(rpc.path)
            stream = call(iter(raw), timeout=RPC_DEADLINE_S, metadata=self.metadata)
        else:
            call = self.channel.stream_stream(rpc.path, request_serializer=rpc.request_cls.SerializeToString,
                                              response_deserializer=rpc.response_cls.FromString)
            stream = call(iter(requests), timeout=RPC_DEADLINE_S, metadata=self.metadata)
        try:
            count = sum(1 for _ in stream)
            outcome = Outcome(stream.code(), stream.details(), stream.trailing_metadata(), messages=count)
        except grpc.RpcError as error:
            outcome = outcome_of_error(error, raw=b"".join(raw) if raw else None)
        judge(index, rpc, "bytes" if raw else "structured", lambda: describe_request(raw or requests), outcome,
              rpc.request_cls if raw and len(raw) == 1 else None, self.rec)

    def unknown(self, index, rng, rpc):
        path = rng.choice(["/posbias.v1.NoSuchService/Nothing", "/posbias.v1.DensityService/Nothing",
                           "/posbias.v1.JobService/submitjob", "/grpc.health.v1.Health/Nope", "/x", "/" + "a" * 1000 + "/b"])
        data = os.urandom(rng.choice([0, 10, 1000]))
        try:
            self.channel.unary_unary(path)(data, timeout=RPC_DEADLINE_S, metadata=self.metadata)
            outcome = Outcome(grpc.StatusCode.OK)
        except grpc.RpcError as error:
            outcome = outcome_of_error(error, raw=data)
        fake = Rpc(path.split("/")[1], path.split("/")[-1], None, None, None, kind="unknown")
        fake.path = path
        judge(index, fake, "unknown", describe_request(None, data), outcome, None, self.rec)


# ---------------------------------------------------------------------------------------------
# Setup, checks, main


def vm_rss_kib(pid):
    try:
        with open("/proc/%d/status" % pid) as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


class RssSampler(threading.Thread):
    """VmRSS every 0.25 s; a jump of more than 128 MiB is reported with the cases then in flight."""

    def __init__(self, pid):
        super().__init__(daemon=True)
        self.pid, self.peak, self.samples, self.stop_event = pid, 0, [], threading.Event()
        self.fuzzer, self.jumps = None, []

    def run(self):
        last = None
        while not self.stop_event.wait(0.25):
            value = vm_rss_kib(self.pid)
            if value is None:
                return
            self.peak = max(self.peak, value)
            self.samples.append((time.time(), value))
            if last is not None and value - last > 128 * 1024 and self.fuzzer is not None and len(self.jumps) < 20:
                self.jumps.append((last // 1024, value // 1024, self.fuzzer.in_flight_now()))
            last = value


def snapshot(root, skip):
    listing = {}
    for directory, dirs, files in os.walk(root, followlinks=False):
        dirs[:] = [d for d in dirs if os.path.join(directory, d) not in skip]
        for name in dirs + files:
            path = os.path.join(directory, name)
            try:
                st = os.lstat(path)
                listing[path] = (st.st_size, int(st.st_mtime))
            except OSError:
                pass
    return listing


def wait_job(jobs, job_id, md, timeout):
    deadline = time.time() + timeout
    job = None
    while time.time() < deadline:
        job = jobs.GetJob(pb.job.GetJobRequest(id=job_id), timeout=10, metadata=md)
        if job.state in (pb.job.JOB_STATE_SUCCEEDED, pb.job.JOB_STATE_FAILED, pb.job.JOB_STATE_CANCELLED):
            return job
        time.sleep(0.2)
    return job


def plant_folders(paths, private_weights):
    """The private tenant's checkpoint (its model's own weights, whose digest no answer may hold)
    and the fuzz tenant's folders of symlinks to it, out of the root, and to nothing."""
    victim = os.path.join(paths["models"], ARGS.private_tenant, "ckpt")
    os.makedirs(victim)
    with open(os.path.join(victim, "model.safetensors"), "wb") as f:
        f.write(private_weights)
    with open(os.path.join(victim, "config.json"), "w") as f:
        f.write(CTX.config_json)
    own = os.path.join(paths["models"], ARGS.fuzz_tenant)
    targets = {
        "planted-in": lambda name: os.path.join("..", "..", ARGS.private_tenant, "ckpt", name),
        "planted-abs": lambda name: os.path.join(victim, name),
        "planted-out": lambda name: os.path.join(paths["outside"], name),
        "planted-dangling": lambda name: os.path.join("..", "..", ARGS.private_tenant, "ckpt", "no-such-" + name),
        "planted-ok": lambda name: os.path.join("..", "tiny", name),
    }
    for folder, target in targets.items():
        os.makedirs(os.path.join(own, folder))
        for name in ("config.json", "model.safetensors"):
            os.symlink(target(name), os.path.join(own, folder, name))
        PLANTED_FOLDERS.append(folder)
        if folder != "planted-ok":
            PLANTED_ESCAPES.append(folder)


def main():
    global ARGS, pb, CTX
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--server-binary", required=True)
    parser.add_argument("--proto-dir", required=True)
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--requests", type=int, default=10000)
    parser.add_argument("--min-requests", type=int, default=None,
                        help="fail when fewer calls than this were made within --max-seconds (default: --requests)")
    parser.add_argument("--max-seconds", type=float, default=100)
    parser.add_argument("--concurrency", type=int, default=24)
    parser.add_argument("--token", default=None, help="send authorization: Bearer TOKEN on every fuzz call")
    parser.add_argument("--setup-token", default=None, help="token for setup and checks (default: --token)")
    parser.add_argument("--private-token", default=None,
                        help="a principal of another tenant than --token's: setup registers a model and runs a "
                             "job with it, and no fuzz answer may hold that job's id, the model's uid or digest, "
                             "or the sentinel jobs' ids")
    parser.add_argument("--fuzz-tenant", default=None,
                        help="--token's tenant: its checkpoint folder <model-root>/TENANT/ gets the tiny checkpoint")
    parser.add_argument("--private-tenant", default="lab-a",
                        help="--private-token's tenant: its folder holds the checkpoint the planted symlinks aim at")
    parser.add_argument("--allow-role-refusals", action="store_true",
                        help="PERMISSION_DENIED with reason ROLE_REQUIRED is allowed (a non-admin --token)")
    parser.add_argument("--expect-only", default=None, metavar="CODE",
                        help="every answer of a posbias.v1 method must have this code (e.g. UNAUTHENTICATED)")
    parser.add_argument("--case", type=int, default=None, help="run only this case index (a reproducer)")
    parser.add_argument("--rss-growth-mib", type=float, default=512)
    parser.add_argument("--rss-peak-mib", type=float, default=2048)
    parser.add_argument("--server-arg", action="append", default=[], help="extra server flag (repeatable)")
    parser.add_argument("--watchdog-seconds", type=float, default=None)
    parser.add_argument("--keep", action="store_true", help="keep the temporary root")
    ARGS = parser.parse_args()
    if ARGS.seed is None:
        ARGS.seed = int.from_bytes(os.urandom(4), "little")
    if ARGS.expect_only and ARGS.expect_only not in grpc.StatusCode.__members__:
        parser.error("--expect-only: unknown status code %s" % ARGS.expect_only)
    if ARGS.min_requests is None:
        ARGS.min_requests = ARGS.requests if ARGS.case is None else 1
    setup_token = ARGS.setup_token if ARGS.setup_token is not None else ARGS.token
    print("wire_fuzz: seed %d (rerun with --seed %d)" % (ARGS.seed, ARGS.seed), flush=True)
    start_watchdog(ARGS.watchdog_seconds or ARGS.max_seconds + 200, "wire_fuzz.py")

    root = os.path.realpath(tempfile.mkdtemp(prefix="posbias-wire-fuzz-"))
    marker = "wfz%d" % ARGS.seed
    CTX = Context(root, marker)
    paths = {k: os.path.join(root, k) for k in ("data", "models", "cwd", "stubs", "outside")}
    for key in ("models", "cwd", "stubs", "outside"):
        os.makedirs(paths[key])
    pb = generate_stubs(paths["stubs"], ARGS.proto_dir, reflection=True)
    tmp_before = set(os.listdir(tempfile.gettempdir()))

    server = ServerProcess(ARGS.server_binary, ["--data-dir", paths["data"], "--model-root", paths["models"],
                                                "--cpu-threads", "1", *ARGS.server_arg])
    previous = os.getcwd()
    os.chdir(paths["cwd"])
    try:
        server.start()
    finally:
        os.chdir(previous)
    failures = []
    rec = Recorder()
    channel = grpc.insecure_channel(server.address, options=[("grpc.max_receive_message_length", MAX_RECEIVE),
                                                              ("grpc.max_send_message_length", -1)])
    md = [("authorization", "Bearer " + setup_token)] if setup_token else None
    models = pb.model_grpc.ModelServiceStub(channel)
    jobs = pb.job_grpc.JobServiceStub(channel)
    health = pb.health_grpc.HealthStub(channel)
    sentinels = []
    can_setup = not ARGS.expect_only or setup_token is not None
    try:
        if can_setup:
            CTX.presets = sorted({p.name for p in models.ListPresets(pb.model.ListPresetsRequest(), timeout=SETUP_TIMEOUT_S,
                                                                       metadata=md).presets} | set(TINY_PRESETS))
            for name, seed in (("fuzz-tiny", 1), (SENTINEL_MODEL, 2)):
                models.RegisterModel(pb.model.RegisterModelRequest(name=name, wait=True, preset=pb.model.PresetSource(
                    preset="gpt2", overrides=tiny_overrides(), init_seed=seed)), timeout=SETUP_TIMEOUT_S, metadata=md)
            parts = list(models.ExportModel(pb.model.ExportModelRequest(name="fuzz-tiny"), timeout=SETUP_TIMEOUT_S, metadata=md))
            CTX.config_json = parts[0].header.config_json
            CTX.checkpoint = b"".join(p.chunk for p in parts[1:])
            os.makedirs(os.path.join(paths["models"], "tiny"))
            checkpoint_dirs = [os.path.join(paths["models"], "tiny"), paths["outside"]]
            if ARGS.fuzz_tenant:  # A tenant's checkpoint paths resolve under its own folder.
                checkpoint_dirs.append(os.path.join(paths["models"], ARGS.fuzz_tenant, "tiny"))
                os.makedirs(checkpoint_dirs[-1])
            for directory in checkpoint_dirs:
                with open(os.path.join(directory, "model.safetensors"), "wb") as f:
                    f.write(CTX.checkpoint)
                with open(os.path.join(directory, "config.json"), "w") as f:
                    f.write(CTX.config_json)
            os.symlink(paths["outside"], os.path.join(paths["models"], "escape"))
            os.symlink("/etc", os.path.join(paths["models"], "etc"))
            os.symlink("loop", os.path.join(paths["models"], "loop"))
            j = pb.job
            for priority, seed in ((0, 5), (-100, 6)):
                spec = j.JobSpec(priority=priority, jacobian_norm=j.JacobianNormSpec(
                    model=SENTINEL_MODEL, sequence_length=16, samples=2, method=j.JACOBIAN_METHOD_EXACT,
                    input=j.JacobianInput(random_tokens=j.RandomTokensInput(seed=seed))))
                job = jobs.SubmitJob(j.SubmitJobRequest(spec=spec, labels={"sentinel": "1"}), timeout=SETUP_TIMEOUT_S, metadata=md)
                sentinels.append(job.id)
            CTX.sentinel_ids = set(sentinels)
            if ARGS.private_token:
                private = [("authorization", "Bearer " + ARGS.private_token)]
                # Named like a fuzz model: the fuzz tenant's own model of the name is another model.
                model = models.RegisterModel(pb.model.RegisterModelRequest(name=FUZZ_MODEL_NAMES[1], wait=True,
                    preset=pb.model.PresetSource(preset="gpt2", overrides=tiny_overrides(), init_seed=99)),
                    timeout=SETUP_TIMEOUT_S, metadata=private)
                if ARGS.fuzz_tenant:
                    weights = b"".join(p.chunk for p in models.ExportModel(pb.model.ExportModelRequest(name=model.name),
                                                                           timeout=SETUP_TIMEOUT_S, metadata=private)
                                       if p.WhichOneof("part") == "chunk")
                    plant_folders(paths, weights)
                spec = j.JobSpec(jacobian_norm=j.JacobianNormSpec(model=model.name, sequence_length=8, samples=1))
                job = jobs.SubmitJob(j.SubmitJobRequest(spec=spec), timeout=SETUP_TIMEOUT_S, metadata=private)
                CTX.secrets = [job.id, model.uid, model.weights_sha256] + sentinels
                print("wire_fuzz: tenant %s's model %s (uid %s) and job %s must stay unseen" %
                      (model.tenant, model.name, model.uid, job.id), flush=True)
            print("wire_fuzz: sentinel jobs %s on %s; checkpoint %d bytes" % (sentinels, SENTINEL_MODEL, len(CTX.checkpoint)),
                  flush=True)
        else:
            CTX.checkpoint = b"\x08\x00\x00\x00\x00\x00\x00\x00{}      "
            print("wire_fuzz: --expect-only without a setup token: no sentinel jobs, no models", flush=True)
        outside_skip = {paths["data"], paths["stubs"]}
        before = snapshot(root, outside_skip)
        time.sleep(0.5)
        rss_start = vm_rss_kib(server.process.pid)
        sampler = RssSampler(server.process.pid)
        sampler.start()

        rpcs, untemplated, missing = build_rpcs()
        if missing:
            raise SystemExit("wire_fuzz: client-streaming RPCs of the proto with no case here: %s" % ", ".join(missing))
        for path in untemplated:
            print("wire_fuzz: %s has no template here: fuzzed from its descriptor alone" % path, flush=True)
        fuzzer = Fuzzer(channel, CTX, rec, rpcs)
        sampler.fuzzer = fuzzer
        started = time.time()
        if ARGS.case is not None:
            fuzzer.run_case(ARGS.case)
        else:
            counter = iter(range(ARGS.requests))
            counter_lock = threading.Lock()

            def worker():
                while time.time() - started < ARGS.max_seconds:
                    with counter_lock:
                        index = next(counter, None)
                    if index is None:
                        return
                    fuzzer.run_case(index)

            threads = [threading.Thread(target=worker, daemon=True) for _ in range(ARGS.concurrency)]
            for t in threads:
                t.start()
            last = time.time()
            while any(t.is_alive() for t in threads):
                time.sleep(0.5)
                if time.time() - last > 10:
                    last = time.time()
                    print("wire_fuzz: %d calls after %.0f s, %d violations, RSS %s KiB" %
                          (rec.done, last - started, len(rec.violations), vm_rss_kib(server.process.pid)), flush=True)
            for t in threads:
                t.join(RPC_DEADLINE_S + 10)
        elapsed = time.time() - started
        print("wire_fuzz: %d calls in %.1f s (%.0f/s) from %d threads" % (rec.done, elapsed, rec.done / max(elapsed, 1e-9),
                                                                         ARGS.concurrency), flush=True)
        if rec.done < ARGS.min_requests:
            failures.append("only %d calls within %.0f s (at least %d wanted)" % (rec.done, ARGS.max_seconds, ARGS.min_requests))

        # (4) alive and serving.
        if server.process.poll() is not None:
            failures.append("the server exited during the run with %s; log tail:\n%s" % (server.process.returncode,
                                                                                       "\n".join(server.lines[-40:])))
            raise SystemExit
        status = health.Check(pb.health.HealthCheckRequest(service=""), timeout=10).status
        if status != pb.health.HealthCheckResponse.SERVING:
            failures.append("health after the run: %s" % pb.health.HealthCheckResponse.ServingStatus.Name(status))

        # Metrics: the server's own count of UNKNOWN / INTERNAL answers.
        try:
            text = urllib.request.urlopen("http://127.0.0.1:%d/metrics" % server.metrics_port, timeout=10).read().decode()
            for name, labels, value in metric_samples(text):
                if name == "posbias_rpc_requests_total" and labels.get("code") in ("UNKNOWN", "INTERNAL") and value > 0:
                    failures.append("server metrics: %s answered %s %d times" % (labels.get("method"), labels.get("code"), value))
        except OSError as error:
            failures.append("cannot read /metrics: %s" % error)

        # (3) cancel what the fuzz queued; the sentinels finish.
        if can_setup:
            token = ""
            fuzz_jobs = []
            while True:
                page = jobs.ListJobs(pb.job.ListJobsRequest(page_size=1000, page_token=token, states=[
                    pb.job.JOB_STATE_QUEUED, pb.job.JOB_STATE_RUNNING]), timeout=30, metadata=md)
                fuzz_jobs += [x.id for x in page.jobs if x.id not in sentinels]
                token = page.next_page_token
                if not token:
                    break
            for job_id in fuzz_jobs:
                try:
                    jobs.CancelJob(pb.job.CancelJobRequest(id=job_id), timeout=30, metadata=md)
                except grpc.RpcError as error:
                    if error.code() not in (grpc.StatusCode.FAILED_PRECONDITION, grpc.StatusCode.NOT_FOUND):
                        failures.append("CancelJob %s after the run: %s %s" % (job_id, error.code().name, error.details()))
            print("wire_fuzz: cancelled %d queued or running fuzz jobs" % len(fuzz_jobs), flush=True)
            for job_id in sentinels:
                try:
                    job = wait_job(jobs, job_id, md, SENTINEL_TIMEOUT_S)
                    if job.state != pb.job.JOB_STATE_SUCCEEDED:
                        failures.append("sentinel job %s ended %s: %s" % (job_id, pb.job.JobState.Name(job.state), job.error))
                    else:
                        result = jobs.GetJobResult(pb.job.GetJobResultRequest(id=job_id), timeout=30, metadata=md)
                        if len(result.jacobian_norm.profile.stats.sq_norm_mean) != 16:
                            failures.append("sentinel job %s: result with %d positions" %
                                            (job_id, len(result.jacobian_norm.profile.stats.sq_norm_mean)))
                except grpc.RpcError as error:
                    failures.append("sentinel job %s: %s %s" % (job_id, error.code().name, error.details()))
        for path, name, state in fuzzer.escape_registered:
            failures.append("RegisterModel through %r (a symlink out of the model root) succeeded: %s %s" % (path, name, state))

        # (5) RSS.
        time.sleep(2)
        sampler.stop_event.set()
        rss_end = vm_rss_kib(server.process.pid)
        print("wire_fuzz: RSS after setup %.0f MiB, peak %.0f MiB, after the run %.0f MiB" %
              (rss_start / 1024, sampler.peak / 1024, rss_end / 1024), flush=True)
        for low, high, cases in sampler.jumps:
            print("wire_fuzz: RSS jumped %d -> %d MiB with cases in flight: %s" % (low, high, cases[:40]), flush=True)
        if rss_end > rss_start + ARGS.rss_growth_mib * 1024:
            failures.append("RSS grew from %.0f to %.0f MiB (bound +%.0f MiB)" % (rss_start / 1024, rss_end / 1024, ARGS.rss_growth_mib))
        if sampler.peak > rss_start + ARGS.rss_peak_mib * 1024:
            failures.append("RSS peaked at %.0f MiB (bound %.0f + %.0f MiB)" % (sampler.peak / 1024, rss_start / 1024, ARGS.rss_peak_mib))

        # (6) nothing left behind.
        time.sleep(1)
        cwd_left = os.listdir(paths["cwd"])
        if cwd_left:
            failures.append("files in the server's working directory: %s" % cwd_left[:20])
        after = snapshot(root, outside_skip)
        changed = sorted(p for p in set(before) | set(after) if before.get(p) != after.get(p))
        if changed:
            failures.append("outside the data directory, changed or new: %s" % changed[:20])
        new_tmp = [n for n in set(os.listdir(tempfile.gettempdir())) - tmp_before if marker in n]
        if new_tmp:
            failures.append("new files in %s with the run's marker: %s" % (tempfile.gettempdir(), new_tmp))
        uploads = os.path.join(paths["data"], "uploads")
        left = sorted(os.listdir(uploads)) if os.path.isdir(uploads) else []
        scratch = [n for n in left if n.startswith(".")]
        if scratch:
            failures.append("scratch files left in %s: %s" % (uploads, scratch[:20]))
        if can_setup:
            names, token = set(), ""
            while True:
                page = models.ListModels(pb.model.ListModelsRequest(page_size=1000, page_token=token), timeout=30, metadata=md)
                names |= {x.name for x in page.models}
                names |= {x.uid for x in page.models}  # Uploads are stored under the model's uid.
                token = page.next_page_token
                if not token:
                    break
            orphans = [n for n in left if not n.startswith(".") and
                       n.split(".safetensors")[0] not in names]  # Names: uploads stored before uids.
            if orphans:
                failures.append("files in %s of no registered model: %s" % (uploads, orphans[:20]))
        for name in os.listdir(paths["data"]):
            if name not in ("jobs.sqlite", "jobs.sqlite-wal", "jobs.sqlite-shm", "jobs.sqlite-journal", "models.json",
                            "models.json.lock", "uploads"):
                rec.note("data directory entry %s" % name)
    except SystemExit:
        pass
    except Exception:  # noqa: BLE001
        failures.append("the run raised:\n" + traceback.format_exc())
    finally:
        channel.close()
        if server.process is not None and server.process.poll() is None:
            try:
                code = server.stop()
                if code != 0 or "stopped cleanly" not in server.log:
                    failures.append("server exit code %s after SIGTERM (stopped cleanly: %s); log tail:\n%s" %
                                    (code, "stopped cleanly" in server.log, "\n".join(server.lines[-30:])))
            except AssertionError as error:
                failures.append(str(error)[:3000])
        elif server.process is not None:
            failures.append("the server was not running at the end (exit code %s)" % server.process.returncode)
        if not ARGS.keep:
            shutil.rmtree(root, ignore_errors=True)
        else:
            print("wire_fuzz: kept %s" % root)

    print("\nwire_fuzz: answers by code: %s" % json.dumps(dict(sorted(rec.codes.items()))))
    print("wire_fuzz: cases by kind: %s" % json.dumps(dict(sorted(rec.kinds.items()))))
    for path in sorted(rec.per_rpc):
        print("  %-58s %s" % (path, " ".join("%s=%d" % kv for kv in sorted(rec.per_rpc[path].items()))))
    for text, n in sorted(rec.notes.items()):
        print("wire_fuzz: note (%dx): %s" % (n, text))
    for kind, hexes in sorted(rec.samples.items()):
        for h in hexes:
            print("wire_fuzz: sample (%s): %s" % (kind, h))
    by_why = {}
    for v in rec.violations:
        by_why.setdefault((v["rpc"], v["why"].split("\n")[0]), []).append(v["case"])
    for (path, why), cases in sorted(by_why.items()):
        print("wire_fuzz: VIOLATION %dx %s: %s (cases %s)" % (len(cases), path, why, cases[:10]))
    for failure in failures:
        print("wire_fuzz: FAILED: %s" % failure)
    ok = not rec.violations and not failures
    print("wire_fuzz: %s (seed %d, %d calls, %d violations, %d failed checks)" %
          ("PASS" if ok else "FAIL", ARGS.seed, rec.done, len(rec.violations), len(failures)))
    sys.stdout.flush()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
