from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Iterable as _Iterable, Mapping as _Mapping, Optional as _Optional, Union as _Union

ATTEMPTS_EXHAUSTED: ErrorReason
AUTHENTICATION_REQUIRED: ErrorReason
BFLOAT16: ComputeDtype
CHECKSUM_MISMATCH: ErrorReason
COHERENT: ProfileModel
COMPUTE_DTYPE_UNSPECIFIED: ComputeDtype
DESCRIPTOR: _descriptor.FileDescriptor
DEVICE_CPU: DevicePreference
DEVICE_CUDA: DevicePreference
DEVICE_PREFERENCE_UNSPECIFIED: DevicePreference
DEVICE_UNAVAILABLE: ErrorReason
EMPTY_REQUEST: ErrorReason
ERROR_REASON_UNSPECIFIED: ErrorReason
FIT_FAILED: ErrorReason
FLOAT16: ComputeDtype
FLOAT32: ComputeDtype
FLOAT64: ComputeDtype
INCOHERENT: ProfileModel
INSUFFICIENT_MEMORY: ErrorReason
INSUFFICIENT_STORAGE: ErrorReason
INTERNAL_ERROR: ErrorReason
INVALID_ALPHA: ErrorReason
INVALID_ARGUMENT: ErrorReason
INVALID_BANDS: ErrorReason
INVALID_DEPTH: ErrorReason
INVALID_ENUM_VALUE: ErrorReason
INVALID_LENGTH: ErrorReason
INVALID_MODEL_FILE: ErrorReason
INVALID_POINT: ErrorReason
INVALID_POSITION: ErrorReason
INVALID_PROFILE: ErrorReason
JOB_NOT_FINISHED: ErrorReason
JOB_NOT_FOUND: ErrorReason
JOB_TIME_LIMIT_EXCEEDED: ErrorReason
MEASUREMENT_NOT_FINITE: ErrorReason
MODEL_ALREADY_EXISTS: ErrorReason
MODEL_BUILTIN: ErrorReason
MODEL_CHANGED: ErrorReason
MODEL_IN_USE: ErrorReason
MODEL_NOT_FOUND: ErrorReason
MODEL_NOT_READY: ErrorReason
NORM: ProfileQuantity
NOT_IMPLEMENTED: ErrorReason
PATH_NOT_ALLOWED: ErrorReason
PATH_NOT_FOUND: ErrorReason
PROFILE_MODEL_UNSPECIFIED: ProfileModel
PROFILE_QUANTITY_UNSPECIFIED: ProfileQuantity
QUEUE_FULL: ErrorReason
QUOTA_EXCEEDED: ErrorReason
REQUEST_ID_REUSED: ErrorReason
REQUEST_TOO_LARGE: ErrorReason
ROLE_REQUIRED: ErrorReason
SERVER_BUSY: ErrorReason
SHUTTING_DOWN: ErrorReason
SQUARED_NORM: ProfileQuantity
TORCHSCRIPT_DISABLED: ErrorReason
WEIGHT: ProfileQuantity

class AlphaSchedule(_message.Message):
    __slots__ = ["alpha"]
    ALPHA_FIELD_NUMBER: _ClassVar[int]
    alpha: _containers.RepeatedScalarFieldContainer[float]
    def __init__(self, alpha: _Optional[_Iterable[float]] = ...) -> None: ...

class ErrorDetail(_message.Message):
    __slots__ = ["allowed", "field", "reason", "value"]
    ALLOWED_FIELD_NUMBER: _ClassVar[int]
    FIELD_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    allowed: str
    field: str
    reason: ErrorReason
    value: str
    def __init__(self, reason: _Optional[_Union[ErrorReason, str]] = ..., field: _Optional[str] = ..., value: _Optional[str] = ..., allowed: _Optional[str] = ...) -> None: ...

class FitMetrics(_message.Message):
    __slots__ = ["ks", "measured_floor", "measured_last_jump", "measured_last_weight", "model_floor", "model_last_jump", "model_last_weight", "pearson_log", "rmse_log", "spearman", "wasserstein1"]
    KS_FIELD_NUMBER: _ClassVar[int]
    MEASURED_FLOOR_FIELD_NUMBER: _ClassVar[int]
    MEASURED_LAST_JUMP_FIELD_NUMBER: _ClassVar[int]
    MEASURED_LAST_WEIGHT_FIELD_NUMBER: _ClassVar[int]
    MODEL_FLOOR_FIELD_NUMBER: _ClassVar[int]
    MODEL_LAST_JUMP_FIELD_NUMBER: _ClassVar[int]
    MODEL_LAST_WEIGHT_FIELD_NUMBER: _ClassVar[int]
    PEARSON_LOG_FIELD_NUMBER: _ClassVar[int]
    RMSE_LOG_FIELD_NUMBER: _ClassVar[int]
    SPEARMAN_FIELD_NUMBER: _ClassVar[int]
    WASSERSTEIN1_FIELD_NUMBER: _ClassVar[int]
    ks: float
    measured_floor: float
    measured_last_jump: float
    measured_last_weight: float
    model_floor: float
    model_last_jump: float
    model_last_weight: float
    pearson_log: float
    rmse_log: float
    spearman: float
    wasserstein1: float
    def __init__(self, spearman: _Optional[float] = ..., pearson_log: _Optional[float] = ..., rmse_log: _Optional[float] = ..., ks: _Optional[float] = ..., wasserstein1: _Optional[float] = ..., measured_last_weight: _Optional[float] = ..., model_last_weight: _Optional[float] = ..., measured_floor: _Optional[float] = ..., model_floor: _Optional[float] = ..., measured_last_jump: _Optional[float] = ..., model_last_jump: _Optional[float] = ...) -> None: ...

class RoutingModel(_message.Message):
    __slots__ = ["alpha", "alpha_schedule", "attention_window", "depth", "layer_windows"]
    ALPHA_FIELD_NUMBER: _ClassVar[int]
    ALPHA_SCHEDULE_FIELD_NUMBER: _ClassVar[int]
    ATTENTION_WINDOW_FIELD_NUMBER: _ClassVar[int]
    DEPTH_FIELD_NUMBER: _ClassVar[int]
    LAYER_WINDOWS_FIELD_NUMBER: _ClassVar[int]
    alpha: float
    alpha_schedule: AlphaSchedule
    attention_window: int
    depth: int
    layer_windows: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, depth: _Optional[int] = ..., alpha: _Optional[float] = ..., alpha_schedule: _Optional[_Union[AlphaSchedule, _Mapping]] = ..., attention_window: _Optional[int] = ..., layer_windows: _Optional[_Iterable[int]] = ...) -> None: ...

class ErrorReason(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []

class ProfileModel(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []

class ProfileQuantity(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []

class DevicePreference(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []

class ComputeDtype(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []
