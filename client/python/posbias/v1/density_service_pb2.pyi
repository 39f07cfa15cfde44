from posbias.v1 import common_pb2 as _common_pb2
from posbias.v1 import options_pb2 as _options_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Iterable as _Iterable, Mapping as _Mapping, Optional as _Optional, Union as _Union

CCDF: ContinuumQuantity
CDF: ContinuumQuantity
CONTINUUM_QUANTITY_UNSPECIFIED: ContinuumQuantity
DENSITY: ContinuumQuantity
DESCRIPTOR: _descriptor.FileDescriptor
GRID_SPACING_UNSPECIFIED: GridSpacing
LINEAR: GridSpacing
LOG: GridSpacing
LOG_DENSITY: ContinuumQuantity

class BandFractions(_message.Message):
    __slots__ = ["leading", "trailing"]
    LEADING_FIELD_NUMBER: _ClassVar[int]
    TRAILING_FIELD_NUMBER: _ClassVar[int]
    leading: float
    trailing: float
    def __init__(self, leading: _Optional[float] = ..., trailing: _Optional[float] = ...) -> None: ...

class BandPositions(_message.Message):
    __slots__ = ["leading_end", "trailing_start"]
    LEADING_END_FIELD_NUMBER: _ClassVar[int]
    TRAILING_START_FIELD_NUMBER: _ClassVar[int]
    leading_end: int
    trailing_start: int
    def __init__(self, leading_end: _Optional[int] = ..., trailing_start: _Optional[int] = ...) -> None: ...

class DepthChoice(_message.Message):
    __slots__ = ["fixed", "range"]
    FIXED_FIELD_NUMBER: _ClassVar[int]
    RANGE_FIELD_NUMBER: _ClassVar[int]
    fixed: int
    range: DepthRange
    def __init__(self, fixed: _Optional[int] = ..., range: _Optional[_Union[DepthRange, _Mapping]] = ...) -> None: ...

class DepthRange(_message.Message):
    __slots__ = ["max", "min"]
    MAX_FIELD_NUMBER: _ClassVar[int]
    MIN_FIELD_NUMBER: _ClassVar[int]
    max: int
    min: int
    def __init__(self, min: _Optional[int] = ..., max: _Optional[int] = ...) -> None: ...

class EvaluateContinuumRequest(_message.Message):
    __slots__ = ["grid", "model", "point_list", "quantities"]
    GRID_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    POINT_LIST_FIELD_NUMBER: _ClassVar[int]
    QUANTITIES_FIELD_NUMBER: _ClassVar[int]
    grid: Grid
    model: _common_pb2.RoutingModel
    point_list: PointList
    quantities: _containers.RepeatedScalarFieldContainer[ContinuumQuantity]
    def __init__(self, model: _Optional[_Union[_common_pb2.RoutingModel, _Mapping]] = ..., point_list: _Optional[_Union[PointList, _Mapping]] = ..., grid: _Optional[_Union[Grid, _Mapping]] = ..., quantities: _Optional[_Iterable[_Union[ContinuumQuantity, str]]] = ...) -> None: ...

class EvaluateContinuumResponse(_message.Message):
    __slots__ = ["atom", "ccdf", "cdf", "density", "depth", "floor", "log_density", "x"]
    ATOM_FIELD_NUMBER: _ClassVar[int]
    CCDF_FIELD_NUMBER: _ClassVar[int]
    CDF_FIELD_NUMBER: _ClassVar[int]
    DENSITY_FIELD_NUMBER: _ClassVar[int]
    DEPTH_FIELD_NUMBER: _ClassVar[int]
    FLOOR_FIELD_NUMBER: _ClassVar[int]
    LOG_DENSITY_FIELD_NUMBER: _ClassVar[int]
    X_FIELD_NUMBER: _ClassVar[int]
    atom: float
    ccdf: _containers.RepeatedScalarFieldContainer[float]
    cdf: _containers.RepeatedScalarFieldContainer[float]
    density: _containers.RepeatedScalarFieldContainer[float]
    depth: int
    floor: float
    log_density: _containers.RepeatedScalarFieldContainer[float]
    x: _containers.RepeatedScalarFieldContainer[float]
    def __init__(self, x: _Optional[_Iterable[float]] = ..., density: _Optional[_Iterable[float]] = ..., log_density: _Optional[_Iterable[float]] = ..., cdf: _Optional[_Iterable[float]] = ..., ccdf: _Optional[_Iterable[float]] = ..., atom: _Optional[float] = ..., floor: _Optional[float] = ..., depth: _Optional[int] = ...) -> None: ...

class EvaluateDiscreteRequest(_message.Message):
    __slots__ = ["length", "model", "positions", "profiles", "stride", "summaries_only", "summary_options"]
    LENGTH_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    POSITIONS_FIELD_NUMBER: _ClassVar[int]
    PROFILES_FIELD_NUMBER: _ClassVar[int]
    STRIDE_FIELD_NUMBER: _ClassVar[int]
    SUMMARIES_ONLY_FIELD_NUMBER: _ClassVar[int]
    SUMMARY_OPTIONS_FIELD_NUMBER: _ClassVar[int]
    length: int
    model: _common_pb2.RoutingModel
    positions: PositionList
    profiles: _containers.RepeatedScalarFieldContainer[_common_pb2.ProfileModel]
    stride: PositionStride
    summaries_only: bool
    summary_options: SummaryOptions
    def __init__(self, model: _Optional[_Union[_common_pb2.RoutingModel, _Mapping]] = ..., length: _Optional[int] = ..., stride: _Optional[_Union[PositionStride, _Mapping]] = ..., positions: _Optional[_Union[PositionList, _Mapping]] = ..., profiles: _Optional[_Iterable[_Union[_common_pb2.ProfileModel, str]]] = ..., summaries_only: bool = ..., summary_options: _Optional[_Union[SummaryOptions, _Mapping]] = ...) -> None: ...

class EvaluateDiscreteResponse(_message.Message):
    __slots__ = ["coherent", "coherent_summary", "depth", "incoherent", "incoherent_summary", "length", "position"]
    COHERENT_FIELD_NUMBER: _ClassVar[int]
    COHERENT_SUMMARY_FIELD_NUMBER: _ClassVar[int]
    DEPTH_FIELD_NUMBER: _ClassVar[int]
    INCOHERENT_FIELD_NUMBER: _ClassVar[int]
    INCOHERENT_SUMMARY_FIELD_NUMBER: _ClassVar[int]
    LENGTH_FIELD_NUMBER: _ClassVar[int]
    POSITION_FIELD_NUMBER: _ClassVar[int]
    coherent: _containers.RepeatedScalarFieldContainer[float]
    coherent_summary: ProfileSummary
    depth: int
    incoherent: _containers.RepeatedScalarFieldContainer[float]
    incoherent_summary: ProfileSummary
    length: int
    position: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, position: _Optional[_Iterable[int]] = ..., coherent: _Optional[_Iterable[float]] = ..., incoherent: _Optional[_Iterable[float]] = ..., coherent_summary: _Optional[_Union[ProfileSummary, _Mapping]] = ..., incoherent_summary: _Optional[_Union[ProfileSummary, _Mapping]] = ..., depth: _Optional[int] = ..., length: _Optional[int] = ...) -> None: ...

class FitProfileRequest(_message.Message):
    __slots__ = ["attention_window", "depth", "include_profiles", "layer_windows", "measured", "models", "quantity"]
    ATTENTION_WINDOW_FIELD_NUMBER: _ClassVar[int]
    DEPTH_FIELD_NUMBER: _ClassVar[int]
    INCLUDE_PROFILES_FIELD_NUMBER: _ClassVar[int]
    LAYER_WINDOWS_FIELD_NUMBER: _ClassVar[int]
    MEASURED_FIELD_NUMBER: _ClassVar[int]
    MODELS_FIELD_NUMBER: _ClassVar[int]
    QUANTITY_FIELD_NUMBER: _ClassVar[int]
    attention_window: int
    depth: DepthChoice
    include_profiles: bool
    layer_windows: _containers.RepeatedScalarFieldContainer[int]
    measured: MeasuredProfile
    models: _containers.RepeatedScalarFieldContainer[_common_pb2.ProfileModel]
    quantity: _common_pb2.ProfileQuantity
    def __init__(self, measured: _Optional[_Union[MeasuredProfile, _Mapping]] = ..., quantity: _Optional[_Union[_common_pb2.ProfileQuantity, str]] = ..., models: _Optional[_Iterable[_Union[_common_pb2.ProfileModel, str]]] = ..., depth: _Optional[_Union[DepthChoice, _Mapping]] = ..., include_profiles: bool = ..., attention_window: _Optional[int] = ..., layer_windows: _Optional[_Iterable[int]] = ...) -> None: ...

class FitProfileResponse(_message.Message):
    __slots__ = ["fits", "measured_summary"]
    FITS_FIELD_NUMBER: _ClassVar[int]
    MEASURED_SUMMARY_FIELD_NUMBER: _ClassVar[int]
    fits: _containers.RepeatedCompositeFieldContainer[ModelFit]
    measured_summary: ProfileSummary
    def __init__(self, fits: _Optional[_Iterable[_Union[ModelFit, _Mapping]]] = ..., measured_summary: _Optional[_Union[ProfileSummary, _Mapping]] = ...) -> None: ...

class Grid(_message.Message):
    __slots__ = ["count", "spacing", "start", "stop"]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    SPACING_FIELD_NUMBER: _ClassVar[int]
    START_FIELD_NUMBER: _ClassVar[int]
    STOP_FIELD_NUMBER: _ClassVar[int]
    count: int
    spacing: GridSpacing
    start: float
    stop: float
    def __init__(self, start: _Optional[float] = ..., stop: _Optional[float] = ..., count: _Optional[int] = ..., spacing: _Optional[_Union[GridSpacing, str]] = ...) -> None: ...

class MeasuredProfile(_message.Message):
    __slots__ = ["values"]
    VALUES_FIELD_NUMBER: _ClassVar[int]
    values: _containers.RepeatedScalarFieldContainer[float]
    def __init__(self, values: _Optional[_Iterable[float]] = ...) -> None: ...

class ModelFit(_message.Message):
    __slots__ = ["alpha", "depth", "lambda_high", "lambda_low", "metrics", "model", "profile", "ridge"]
    ALPHA_FIELD_NUMBER: _ClassVar[int]
    DEPTH_FIELD_NUMBER: _ClassVar[int]
    LAMBDA_FIELD_NUMBER: _ClassVar[int]
    LAMBDA_HIGH_FIELD_NUMBER: _ClassVar[int]
    LAMBDA_LOW_FIELD_NUMBER: _ClassVar[int]
    METRICS_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    PROFILE_FIELD_NUMBER: _ClassVar[int]
    RIDGE_FIELD_NUMBER: _ClassVar[int]
    alpha: float
    depth: int
    lambda_high: float
    lambda_low: float
    metrics: _common_pb2.FitMetrics
    model: _common_pb2.ProfileModel
    profile: _containers.RepeatedScalarFieldContainer[float]
    ridge: _containers.RepeatedCompositeFieldContainer[RidgePoint]
    def __init__(self, model: _Optional[_Union[_common_pb2.ProfileModel, str]] = ..., depth: _Optional[int] = ..., alpha: _Optional[float] = ..., lambda_low: _Optional[float] = ..., lambda_high: _Optional[float] = ..., metrics: _Optional[_Union[_common_pb2.FitMetrics, _Mapping]] = ..., ridge: _Optional[_Iterable[_Union[RidgePoint, _Mapping]]] = ..., profile: _Optional[_Iterable[float]] = ..., **kwargs) -> None: ...

class PointList(_message.Message):
    __slots__ = ["x"]
    X_FIELD_NUMBER: _ClassVar[int]
    x: _containers.RepeatedScalarFieldContainer[float]
    def __init__(self, x: _Optional[_Iterable[float]] = ...) -> None: ...

class PositionList(_message.Message):
    __slots__ = ["position"]
    POSITION_FIELD_NUMBER: _ClassVar[int]
    position: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, position: _Optional[_Iterable[int]] = ...) -> None: ...

class PositionStride(_message.Message):
    __slots__ = ["start", "step", "stop"]
    START_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    STOP_FIELD_NUMBER: _ClassVar[int]
    start: int
    step: int
    stop: int
    def __init__(self, start: _Optional[int] = ..., stop: _Optional[int] = ..., step: _Optional[int] = ...) -> None: ...

class ProfileSummary(_message.Message):
    __slots__ = ["first_weight", "floor_position", "floor_value", "floor_x", "last_token_jump", "last_weight", "leading_mass", "length", "middle_mass", "quantiles", "total", "trailing_mass"]
    FIRST_WEIGHT_FIELD_NUMBER: _ClassVar[int]
    FLOOR_POSITION_FIELD_NUMBER: _ClassVar[int]
    FLOOR_VALUE_FIELD_NUMBER: _ClassVar[int]
    FLOOR_X_FIELD_NUMBER: _ClassVar[int]
    LAST_TOKEN_JUMP_FIELD_NUMBER: _ClassVar[int]
    LAST_WEIGHT_FIELD_NUMBER: _ClassVar[int]
    LEADING_MASS_FIELD_NUMBER: _ClassVar[int]
    LENGTH_FIELD_NUMBER: _ClassVar[int]
    MIDDLE_MASS_FIELD_NUMBER: _ClassVar[int]
    QUANTILES_FIELD_NUMBER: _ClassVar[int]
    TOTAL_FIELD_NUMBER: _ClassVar[int]
    TRAILING_MASS_FIELD_NUMBER: _ClassVar[int]
    first_weight: float
    floor_position: int
    floor_value: float
    floor_x: float
    last_token_jump: float
    last_weight: float
    leading_mass: float
    length: int
    middle_mass: float
    quantiles: _containers.RepeatedCompositeFieldContainer[QuantilePoint]
    total: float
    trailing_mass: float
    def __init__(self, length: _Optional[int] = ..., total: _Optional[float] = ..., first_weight: _Optional[float] = ..., last_weight: _Optional[float] = ..., floor_value: _Optional[float] = ..., floor_position: _Optional[int] = ..., floor_x: _Optional[float] = ..., leading_mass: _Optional[float] = ..., middle_mass: _Optional[float] = ..., trailing_mass: _Optional[float] = ..., quantiles: _Optional[_Iterable[_Union[QuantilePoint, _Mapping]]] = ..., last_token_jump: _Optional[float] = ...) -> None: ...

class QuantilePoint(_message.Message):
    __slots__ = ["level", "position", "x"]
    LEVEL_FIELD_NUMBER: _ClassVar[int]
    POSITION_FIELD_NUMBER: _ClassVar[int]
    X_FIELD_NUMBER: _ClassVar[int]
    level: float
    position: int
    x: float
    def __init__(self, level: _Optional[float] = ..., position: _Optional[int] = ..., x: _Optional[float] = ...) -> None: ...

class RidgePoint(_message.Message):
    __slots__ = ["alpha", "depth", "rmse_log"]
    ALPHA_FIELD_NUMBER: _ClassVar[int]
    DEPTH_FIELD_NUMBER: _ClassVar[int]
    RMSE_LOG_FIELD_NUMBER: _ClassVar[int]
    alpha: float
    depth: int
    rmse_log: float
    def __init__(self, depth: _Optional[int] = ..., alpha: _Optional[float] = ..., rmse_log: _Optional[float] = ...) -> None: ...

class SummarizeProfileRequest(_message.Message):
    __slots__ = ["measured", "options", "theory"]
    MEASURED_FIELD_NUMBER: _ClassVar[int]
    OPTIONS_FIELD_NUMBER: _ClassVar[int]
    THEORY_FIELD_NUMBER: _ClassVar[int]
    measured: MeasuredProfile
    options: SummaryOptions
    theory: TheoryProfile
    def __init__(self, theory: _Optional[_Union[TheoryProfile, _Mapping]] = ..., measured: _Optional[_Union[MeasuredProfile, _Mapping]] = ..., options: _Optional[_Union[SummaryOptions, _Mapping]] = ...) -> None: ...

class SummarizeProfileResponse(_message.Message):
    __slots__ = ["summary"]
    SUMMARY_FIELD_NUMBER: _ClassVar[int]
    summary: ProfileSummary
    def __init__(self, summary: _Optional[_Union[ProfileSummary, _Mapping]] = ...) -> None: ...

class SummaryOptions(_message.Message):
    __slots__ = ["band_fractions", "band_positions", "quantile_levels"]
    BAND_FRACTIONS_FIELD_NUMBER: _ClassVar[int]
    BAND_POSITIONS_FIELD_NUMBER: _ClassVar[int]
    QUANTILE_LEVELS_FIELD_NUMBER: _ClassVar[int]
    band_fractions: BandFractions
    band_positions: BandPositions
    quantile_levels: _containers.RepeatedScalarFieldContainer[float]
    def __init__(self, band_fractions: _Optional[_Union[BandFractions, _Mapping]] = ..., band_positions: _Optional[_Union[BandPositions, _Mapping]] = ..., quantile_levels: _Optional[_Iterable[float]] = ...) -> None: ...

class TheoryProfile(_message.Message):
    __slots__ = ["length", "model", "profile"]
    LENGTH_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    PROFILE_FIELD_NUMBER: _ClassVar[int]
    length: int
    model: _common_pb2.RoutingModel
    profile: _common_pb2.ProfileModel
    def __init__(self, model: _Optional[_Union[_common_pb2.RoutingModel, _Mapping]] = ..., length: _Optional[int] = ..., profile: _Optional[_Union[_common_pb2.ProfileModel, str]] = ...) -> None: ...

class ContinuumQuantity(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []

class GridSpacing(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []
