"""Typed errors: one `posbias.Error` per failed call, a subclass per gRPC status code.

The server attaches a stable reason to every error (common.proto): trailing metadata
`posbias-error-reason` (the ErrorReason name) and `posbias-error-bin` (a serialized ErrorDetail
with the field, the offending value and the allowed range). `error_from_rpc` turns a
grpc.RpcError into the matching subclass with those parts as attributes.
"""

from __future__ import annotations

from typing import Dict, Optional, Type

import grpc

from posbias.v1 import common_pb2

REASON_KEY = "posbias-error-reason"
DETAIL_KEY = "posbias-error-bin"


class Error(Exception):
    """A call to the posbias server failed.

    Attributes:
        code: the gRPC status code (a grpc.StatusCode, e.g. grpc.StatusCode.INVALID_ARGUMENT).
        reason: the server's stable ErrorReason name, e.g. "INVALID_DEPTH", "MODEL_NOT_FOUND";
            "" when the server sent none (e.g. the server could not be reached).
        field: the request field at fault as a dotted path ("alpha", "point_list.x[3]"), or "".
        value: the offending value as the server printed it, or "".
        allowed: the allowed range or set of values in words ("1..100000"), or "".
        message: the server's human-readable message.
        rpc_error: the grpc.RpcError it came from (None for errors raised by the client itself).
    """

    code: grpc.StatusCode = grpc.StatusCode.UNKNOWN

    def __init__(self, message: str, *, code: Optional[grpc.StatusCode] = None, reason: str = "",
                 field: str = "", value: str = "", allowed: str = "") -> None:
        super().__init__(message)
        if code is not None:
            self.code = code
        self.message = message
        self.reason = reason
        self.field = field
        self.value = value
        self.allowed = allowed
        self.rpc_error: Optional[grpc.RpcError] = None

    def __str__(self) -> str:
        reason = " [%s]" % self.reason if self.reason else ""
        return "%s%s %s" % (self.code.name, reason, self.message)

    def __repr__(self) -> str:
        return "%s(code=%s, reason=%r, field=%r, value=%r, allowed=%r, message=%r)" % (
            type(self).__name__, self.code.name, self.reason, self.field, self.value, self.allowed,
            self.message)


# One subclass per gRPC status code. Where a built-in exception means the same, the subclass is
# also one of those, so `except ValueError` or `except TimeoutError` catch what they should.
class CancelledError(Error):
    """CANCELLED: the call was cancelled (by the client, or the server drained it)."""
    code = grpc.StatusCode.CANCELLED


class UnknownError(Error):
    """UNKNOWN: the server or the transport failed without a status."""
    code = grpc.StatusCode.UNKNOWN


class InvalidArgumentError(Error, ValueError):
    """INVALID_ARGUMENT: the request is malformed; `field`, `value` and `allowed` say how."""
    code = grpc.StatusCode.INVALID_ARGUMENT


class DeadlineExceededError(Error, TimeoutError):
    """DEADLINE_EXCEEDED: the call's deadline (Client(timeout=...)) ran out."""
    code = grpc.StatusCode.DEADLINE_EXCEEDED


class NotFoundError(Error, LookupError):
    """NOT_FOUND: no such model, job or path (MODEL_NOT_FOUND, JOB_NOT_FOUND, PATH_NOT_FOUND)."""
    code = grpc.StatusCode.NOT_FOUND


class AlreadyExistsError(Error):
    """ALREADY_EXISTS: the name is taken (MODEL_ALREADY_EXISTS) or a request_id was reused."""
    code = grpc.StatusCode.ALREADY_EXISTS


class PermissionDeniedError(Error, PermissionError):
    """PERMISSION_DENIED: the token is valid but not allowed to do this."""
    code = grpc.StatusCode.PERMISSION_DENIED


class ResourceExhaustedError(Error):
    """RESOURCE_EXHAUSTED: a server limit (REQUEST_TOO_LARGE, QUEUE_FULL, SERVER_BUSY, ...)."""
    code = grpc.StatusCode.RESOURCE_EXHAUSTED


class FailedPreconditionError(Error):
    """FAILED_PRECONDITION: the resource is in the wrong state (JOB_NOT_FINISHED, MODEL_IN_USE, ...)."""
    code = grpc.StatusCode.FAILED_PRECONDITION


class AbortedError(Error):
    """ABORTED: the operation was aborted (e.g. ATTEMPTS_EXHAUSTED)."""
    code = grpc.StatusCode.ABORTED


class OutOfRangeError(Error):
    """OUT_OF_RANGE."""
    code = grpc.StatusCode.OUT_OF_RANGE


class UnimplementedError(Error, NotImplementedError):
    """UNIMPLEMENTED: not implemented by this server version (NOT_IMPLEMENTED)."""
    code = grpc.StatusCode.UNIMPLEMENTED


class InternalError(Error):
    """INTERNAL: a server bug; the message says what happened."""
    code = grpc.StatusCode.INTERNAL


class UnavailableError(Error, ConnectionError):
    """UNAVAILABLE: the server cannot be reached or is shutting down (SHUTTING_DOWN); retry later."""
    code = grpc.StatusCode.UNAVAILABLE


class DataLossError(Error):
    """DATA_LOSS: bytes were lost or corrupted (e.g. an export whose SHA-256 does not match)."""
    code = grpc.StatusCode.DATA_LOSS


class UnauthenticatedError(Error):
    """UNAUTHENTICATED: no token, or a token the server does not accept."""
    code = grpc.StatusCode.UNAUTHENTICATED


ERROR_CLASSES: Dict[grpc.StatusCode, Type[Error]] = {
    cls.code: cls for cls in [CancelledError, UnknownError, InvalidArgumentError, DeadlineExceededError,
                              NotFoundError, AlreadyExistsError, PermissionDeniedError,
                              ResourceExhaustedError, FailedPreconditionError, AbortedError,
                              OutOfRangeError, UnimplementedError, InternalError, UnavailableError,
                              DataLossError, UnauthenticatedError]}


def error_class(code: grpc.StatusCode) -> Type[Error]:
    """The Error subclass of a gRPC status code (Error itself for codes without one)."""
    return ERROR_CLASSES.get(code, Error)


def error_from_rpc(error: grpc.RpcError) -> Error:
    """The typed error of a failed call, with reason and detail from the trailing metadata."""
    code = error.code() if hasattr(error, "code") else grpc.StatusCode.UNKNOWN
    message = (error.details() if hasattr(error, "details") else None) or str(error)
    metadata = {}
    if hasattr(error, "trailing_metadata"):
        metadata = {key: value for key, value in (error.trailing_metadata() or ())}
    detail = common_pb2.ErrorDetail()
    raw = metadata.get(DETAIL_KEY)
    if isinstance(raw, bytes):
        try:
            detail.ParseFromString(raw)
        except Exception:  # A malformed detail must not hide the error itself.
            detail = common_pb2.ErrorDetail()
    reason = metadata.get(REASON_KEY, "")
    if isinstance(reason, bytes):
        reason = reason.decode("utf-8", "replace")
    if not reason and detail.reason:
        try:
            reason = common_pb2.ErrorReason.Name(detail.reason)
        except ValueError:  # A reason newer than this client.
            reason = str(detail.reason)
    result = error_class(code)(message, code=code, reason=reason, field=detail.field, value=detail.value,
                               allowed=detail.allowed)
    result.rpc_error = error
    return result
