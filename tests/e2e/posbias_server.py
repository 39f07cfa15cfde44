"""What the black-box e2e scripts share: the posbias-server process, a watchdog, Prometheus
parsing and Python gRPC stub generation.

ServerProcess starts the real binary on 127.0.0.1 with OS-chosen gRPC and metrics ports, reads
the ports from its log, and stops it with SIGTERM (or SIGKILL). Unless the caller passes its own
--data-dir, each server keeps its job store and models in a fresh temporary directory.
"""

import os
import re
import signal
import subprocess
import sys
import tempfile
import threading

SERVER_START_TIMEOUT_S = 30
SERVER_STOP_TIMEOUT_S = 30


class ServerProcess:
    """A posbias-server on 127.0.0.1 with OS-chosen gRPC and metrics ports."""

    LISTENING = re.compile(r"listening for gRPC on port (\d+) .*metrics on http://\S+ \(port (\d+)\)")
    live = []  # Every started, not yet stopped server (for the watchdog and the final cleanup).

    def __init__(self, binary, extra_args=()):
        extra_args = list(extra_args)
        self.data_dir = None
        if "--data-dir" not in extra_args:
            self.data_dir = tempfile.TemporaryDirectory(prefix="posbias-e2e-data-")
            extra_args += ["--data-dir", self.data_dir.name]
        self.args = [binary, "--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0", *extra_args]
        self.lines = []
        self.process = None
        self.grpc_port = None
        self.metrics_port = None
        self.returncode = None
        self._reader = None
        self._ready = threading.Event()

    @property
    def address(self):
        return "127.0.0.1:%d" % self.grpc_port

    @property
    def log(self):
        return "\n".join(self.lines)

    def _read(self):
        for raw in self.process.stderr:
            line = raw.decode("utf-8", "replace").rstrip("\n")
            self.lines.append(line)
            match = self.LISTENING.search(line)
            if match and not self._ready.is_set():
                self.grpc_port, self.metrics_port = int(match.group(1)), int(match.group(2))
                self._ready.set()
        self._ready.set()  # EOF: the server died; start() notices the missing ports.

    def start(self):
        self.process = subprocess.Popen(self.args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                        stderr=subprocess.PIPE)
        ServerProcess.live.append(self)
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        if not self._ready.wait(SERVER_START_TIMEOUT_S) or self.grpc_port is None:
            self.kill()
            raise RuntimeError("%s did not report its ports within %d s (exit code %s); log:\n%s"
                               % (" ".join(self.args), SERVER_START_TIMEOUT_S, self.returncode, self.log))
        return self

    def stop(self, timeout=SERVER_STOP_TIMEOUT_S):
        """SIGTERM, wait; returns the exit code (kills and raises if it does not stop in time)."""
        if self.process is None or self.returncode is not None:
            return self.returncode
        try:
            self.process.send_signal(signal.SIGTERM)
            self.returncode = self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError("server did not exit within %s s of SIGTERM; log:\n%s" % (timeout, self.log))
        finally:
            if self in ServerProcess.live:
                ServerProcess.live.remove(self)
        self._close()
        return self.returncode

    def kill(self):
        """SIGKILL (kill -9) and reap; returns the exit code (-9 when it was still running)."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(10)
        self.returncode = self.process.returncode if self.process else None
        if self in ServerProcess.live:
            ServerProcess.live.remove(self)
        self._close()
        return self.returncode

    def _close(self):
        if self._reader is not None:
            self._reader.join(5)
        if self.process is not None and self.process.stderr and not self._reader.is_alive():
            self.process.stderr.close()


# ---------------------------------------------------------------------------------------------
# Helpers the e2e scripts share besides the server process.

PROTOC = "/usr/bin/protoc"
GRPC_PYTHON_PLUGIN = "/usr/bin/grpc_python_plugin"
REFLECTION_PROTO_ROOT = "/usr/share/grpc-proto"
STUB_TIMEOUT_S = 60


def start_watchdog(seconds, script):
    """Kills every live server and exits the process (code 3) if the run is still going after
    `seconds`: a hung test must not hang CI."""
    def expire():
        sys.stderr.write("%s: watchdog: still running after %d s; killing servers\n" % (script, seconds))
        for server in list(ServerProcess.live):
            server.kill()
        os._exit(3)

    timer = threading.Timer(seconds, expire)
    timer.daemon = True
    timer.start()


def metric_samples(text):
    """Prometheus text format -> list of (name, {label: value}, float value)."""
    samples = []
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        match = re.match(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)', line)
        if match:
            labels = dict(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', match.group(2) or ""))
            samples.append((match.group(1), labels, float(match.group(3))))
    return samples


def sample_value(samples, name, **labels):
    """Sum of the samples named `name` whose labels include `labels` (None when there is none)."""
    values = [v for n, l, v in samples if n == name and all(l.get(k) == w for k, w in labels.items())]
    return sum(values) if values else None


class Stubs:
    """The generated modules, by short name (common, density, model, job, health, reflection, and
    their *_grpc service stubs)."""


def generate_stubs(directory, proto_dir, reflection=False):
    """Generates Python stubs for the posbias protos (and grpc.reflection with `reflection`) into
    `directory` with Debian's protoc and grpc_python_plugin, imports them, and checks that each
    module really came from `directory`."""
    import grpc
    import importlib
    posbias_protos = ["posbias/v1/common.proto", "posbias/v1/options.proto", "posbias/v1/density_service.proto", "posbias/v1/model_service.proto",
                      "posbias/v1/job_service.proto", "grpc/health/v1/health.proto"]
    sources = [(proto_dir, posbias_protos)]
    if reflection:
        sources.append((REFLECTION_PROTO_ROOT, ["grpc/reflection/v1alpha/reflection.proto"]))
    for include, protos in sources:
        command = [PROTOC, "-I" + include, "--python_out=" + directory, "--grpc_out=" + directory,
                   "--plugin=protoc-gen-grpc=" + GRPC_PYTHON_PLUGIN, *protos]
        result = subprocess.run(command, capture_output=True, text=True, timeout=STUB_TIMEOUT_S)
        if result.returncode != 0:
            raise RuntimeError("%s failed (%d):\n%s" % (" ".join(command), result.returncode, result.stderr))
    sys.path.insert(0, directory)
    # The generated grpc/health and grpc/reflection packages live under the name `grpc`, which is the
    # installed grpcio package: extend its search path so `grpc.health.v1` resolves to the stubs.
    grpc.__path__.append(os.path.join(directory, "grpc"))
    modules = [("common", "posbias.v1.common_pb2"),
               ("options", "posbias.v1.options_pb2"),
               ("density", "posbias.v1.density_service_pb2"),
               ("density_grpc", "posbias.v1.density_service_pb2_grpc"),
               ("model", "posbias.v1.model_service_pb2"),
               ("model_grpc", "posbias.v1.model_service_pb2_grpc"),
               ("job", "posbias.v1.job_service_pb2"),
               ("job_grpc", "posbias.v1.job_service_pb2_grpc"),
               ("health", "grpc.health.v1.health_pb2"),
               ("health_grpc", "grpc.health.v1.health_pb2_grpc")]
    if reflection:
        modules += [("reflection", "grpc.reflection.v1alpha.reflection_pb2"),
                    ("reflection_grpc", "grpc.reflection.v1alpha.reflection_pb2_grpc")]
    stubs = Stubs()
    for alias, module in modules:
        module_object = importlib.import_module(module)
        if not os.path.realpath(module_object.__file__).startswith(os.path.realpath(directory)):
            raise RuntimeError("%s was imported from %s, not from the generated stubs" % (module, module_object.__file__))
        setattr(stubs, alias, module_object)
    return stubs


def read_safetensors_header(path):
    """(header dict, file size, header length) of a safetensors file, parsed in pure Python."""
    import json
    import struct
    with open(path, "rb") as f:
        data = f.read()
    (length,) = struct.unpack("<Q", data[:8])
    return json.loads(data[8:8 + length].decode("utf-8")), len(data), length


# The environment variables the CLI reads its server and security options from; Cli clears them so
# that a developer's own settings never leak into a test.
CLI_ENVIRONMENT = ("POSBIAS_SERVER", "POSBIAS_TOKEN", "POSBIAS_TLS", "POSBIAS_CA_FILE", "POSBIAS_CERT_FILE",
                   "POSBIAS_KEY_FILE", "POSBIAS_TLS_SERVER_NAME")


class Cli:
    """The `posbias` CLI pointed at one server: run() returns the CompletedProcess, json() the
    parsed --format json output (AssertionError unless it exits 0 with one JSON document).

    `extra_args` are global options passed on every run after --server, e.g.
    ["--ca-file", ca, "--token", token]; `env` adds environment variables (e.g. POSBIAS_TOKEN)."""

    def __init__(self, binary, server, timeout=120, extra_args=(), env=None):
        self.binary, self.server, self.timeout = binary, server, timeout
        self.extra_args = [str(a) for a in extra_args]
        self.env = dict(env or {})

    def run(self, *args, timeout=None):
        env = dict(os.environ)
        for name in CLI_ENVIRONMENT:
            env.pop(name, None)
        env.update(self.env)
        return subprocess.run([self.binary, "--server", self.server.address, *self.extra_args,
                               *[str(a) for a in args]],
                              stdin=subprocess.DEVNULL, capture_output=True, text=True,
                              timeout=timeout or self.timeout, env=env)

    def json(self, *args, timeout=None):
        import json
        result = self.run(*args, "--format", "json", timeout=timeout)
        if result.returncode != 0:
            raise AssertionError("exit code %d: %s\nstdout:\n%s\nstderr:\n%s"
                                 % (result.returncode, " ".join(result.args), result.stdout, result.stderr))
        return json.loads(result.stdout)


def secure_channel(address, ca_file=None, cert_file=None, key_file=None, server_name=None, options=()):
    """A grpc channel to `address` over TLS: verified against the PEM roots in `ca_file` (the system
    roots when None), presenting the client certificate `cert_file` with its key `key_file` for mTLS
    (both or neither), checking `server_name` in the server certificate instead of the address's
    host (grpc.ssl_target_name_override) when given. `options` are extra channel options."""
    import grpc
    if (cert_file is None) != (key_file is None):
        raise ValueError("cert_file and key_file go together: both or neither")

    def read(path):
        if path is None:
            return None
        with open(path, "rb") as f:
            return f.read()

    credentials = grpc.ssl_channel_credentials(root_certificates=read(ca_file), private_key=read(key_file),
                                               certificate_chain=read(cert_file))
    options = list(options)
    if server_name:
        options.append(("grpc.ssl_target_name_override", server_name))
    return grpc.secure_channel(address, credentials, options=options)


def token_metadata(token):
    """The call metadata that carries a bearer token, for a stub call's `metadata=` argument:
    (("authorization", "Bearer <token>"),)."""
    return (("authorization", "Bearer %s" % token),)
