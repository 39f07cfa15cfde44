"""Job: a handle on one measurement job, kept up to date by refresh(), watch() and wait()."""

from __future__ import annotations

import sys
import time
from typing import IO, Any, Dict, Iterator, Optional, Protocol

from posbias._convert import enum_name, optional, seconds, timestamp
from posbias._errors import UnavailableError
from posbias._progress import Progress, ProgressMode, resolve_mode
from posbias._results import JobResult
from posbias._types import Failure, JobProgress
from posbias.v1 import job_service_pb2

TERMINAL_STATES = ("succeeded", "failed", "cancelled")
PROGRESS_STEPS = 1000          # the job bar counts permille
WATCH_RETRIES = 5              # re-watches after UNAVAILABLE (a drain or restart) before giving up
WATCH_RETRY_PAUSE_S = 1.0


class JobBackend(Protocol):
    """What a Job needs of the client that made it: the five job calls, nothing else. Client
    implements it; Job never imports Client, so the two modules do not import each other."""

    def _get_job_message(self, job_id: str) -> job_service_pb2.Job: ...

    def _watch_messages(self, job_id: str, timeout: Optional[float] = None) -> Iterator[job_service_pb2.Job]: ...

    def _cancel_job_message(self, job_id: str, reason: str = "") -> job_service_pb2.Job: ...

    def delete_job(self, job_id: str, force: bool = False) -> None: ...

    def get_job_result(self, job_id: str, **options: Any) -> JobResult: ...


class Job:
    """A measurement job on the server, as last seen by this client.

    Attributes (refreshed by refresh(), watch() and wait()): `id`; `state` ("queued", "running",
    "cancelling", "succeeded", "failed", "cancelled"); `progress` (JobProgress); `attempt`;
    `model`, `sequence_length`, `samples`, `method` and `output` of the resolved spec (`spec` is
    the whole JobSpec message); `create_time`, `start_time`, `finish_time`, `update_time` (UTC
    datetimes or None); `queue_position` (queued only); `device`; `error` (a Failure, failed only);
    `labels`, `request_id`, `status_message`, `estimated_memory_bytes`; `proto` (the Job message).
    """

    def __init__(self, client: JobBackend, message: job_service_pb2.Job) -> None:
        self._client = client
        self._result: Optional[JobResult] = None
        self._update(message)

    def _update(self, message: job_service_pb2.Job) -> None:
        spec = message.spec.jacobian_norm
        self.proto = message
        self.id: str = message.id
        self.state: str = enum_name(job_service_pb2.JobState, message.state)
        self.progress = JobProgress.from_proto(message.progress)
        self.attempt: int = message.attempt
        self.spec = message.spec
        self.model: str = spec.model
        self.sequence_length: int = spec.sequence_length
        self.samples: int = spec.samples
        self.method: str = enum_name(job_service_pb2.JacobianMethod, spec.method)
        self.output: str = enum_name(job_service_pb2.JacobianOutput, spec.output)
        self.priority: int = message.spec.priority
        self.time_limit_seconds: Optional[float] = seconds(message.spec, "time_limit")
        self.create_time = timestamp(message, "create_time")
        self.start_time = timestamp(message, "start_time")
        self.finish_time = timestamp(message, "finish_time")
        self.update_time = timestamp(message, "update_time")
        self.queue_position: Optional[int] = optional(message, "queue_position")
        self.device: str = message.device
        self.error: Optional[Failure] = Failure.from_proto(message.error) if message.HasField("error") else None
        self.labels: Dict[str, str] = dict(message.labels)
        self.request_id: str = message.request_id
        self.status_message: str = message.status_message
        self.estimated_memory_bytes: int = message.estimated_memory_bytes

    def __repr__(self) -> str:
        return "Job(id=%r, state=%r, model=%r, length=%d, samples=%d, progress=%.3f)" % (
            self.id, self.state, self.model, self.sequence_length, self.samples, self.progress.fraction)

    @property
    def done(self) -> bool:
        """Whether the job is in a terminal state (succeeded, failed or cancelled)."""
        return self.state in TERMINAL_STATES

    def refresh(self) -> "Job":
        """Fetches the job's current state (GetJob); returns self."""
        self._update(self._client._get_job_message(self.id))
        return self

    def watch(self) -> Iterator["Job"]:
        """Follows the job (WatchJob) until it ends: yields self after every change of state or
        progress, the first time with the current state."""
        for message in self._client._watch_messages(self.id):
            self._update(message)
            yield self

    def wait(self, progress: ProgressMode = True, timeout: Optional[float] = None,
             file: Optional[IO[str]] = None) -> "Job":
        """Waits until the job ends and returns self (in its terminal state; a failed job is not
        an exception here: look at `state` and `error`).

        progress: True draws a progress bar with ETA (tqdm when installed, a plain one otherwise),
            "tqdm" or "plain" force one, False draws none. file: where the bar goes (stderr).
        timeout: seconds to wait at most (posbias.DeadlineExceededError, a TimeoutError, after).

        Ctrl-C (KeyboardInterrupt) stops waiting, not the job: the watch stream is closed, a line
        says the job goes on, and the KeyboardInterrupt propagates; the job keeps running on the
        server (cancel it with cancel())."""
        mode = resolve_mode(progress)
        out = file if file is not None else sys.stderr
        deadline = None if timeout is None else time.monotonic() + timeout
        bar = Progress(PROGRESS_STEPS, "job %s" % self.id, mode, out) if mode and not self.done else None
        retries = 0
        try:
            while not self.done:
                remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
                stream = self._client._watch_messages(self.id, timeout=remaining)
                try:
                    for message in stream:
                        self._update(message)
                        retries = 0
                        if bar is not None:
                            bar.update(self.progress.fraction * PROGRESS_STEPS, self._progress_text(),
                                       self.progress.eta_seconds)
                except UnavailableError:
                    retries += 1
                    if retries > WATCH_RETRIES:
                        raise
                    time.sleep(WATCH_RETRY_PAUSE_S)
                finally:
                    stream.close()
                if not self.done and retries == 0:
                    self.refresh()  # The stream ended without a terminal state: look once more.
        except KeyboardInterrupt:
            if bar is not None:
                bar.close()
                bar = None
            out.write("stopped waiting for job %s (%s); the job goes on on the server\n" % (self.id, self.state))
            out.flush()
            raise
        finally:
            if bar is not None:
                bar.close()
        return self

    def _progress_text(self) -> str:
        p = self.progress
        return "%s  samples %d/%d" % (self.state, p.samples_done, p.samples_total)

    def cancel(self, reason: str = "") -> "Job":
        """Requests cancellation (CancelJob): a queued job is cancelled at once, a running one stops
        at its next chunk. Returns self, updated."""
        self._update(self._client._cancel_job_message(self.id, reason))
        return self

    def delete(self, force: bool = False) -> None:
        """Deletes the job and its result (DeleteJob); force also deletes an active job."""
        self._client.delete_job(self.id, force=force)

    def result(self, **options: Any) -> JobResult:
        """The result of the SUCCEEDED job, all pages joined (posbias.JobResult). Options are those
        of Client.get_job_result; the default result is fetched once and kept. An unfinished job
        raises posbias.FailedPreconditionError (reason JOB_NOT_FINISHED)."""
        if options:
            return self._client.get_job_result(self.id, **options)
        if self._result is None:
            self._result = self._client.get_job_result(self.id)
        return self._result

    def plot(self, ax: Any = None) -> Any:
        """Draws the result's measured profile and fitted theory curves with matplotlib; returns
        the Axes (see JobResult.plot)."""
        return self.result().plot(ax=ax)
