"""A posbias-server process for the black-box tests, shared by the e2e scripts.

ServerProcess starts the real binary on 127.0.0.1 with OS-chosen gRPC and metrics ports, reads
the ports from its log, and stops it with SIGTERM (or SIGKILL). Unless the caller passes its own
--data-dir, each server keeps its job store and models in a fresh temporary directory.
"""

import re
import signal
import subprocess
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
