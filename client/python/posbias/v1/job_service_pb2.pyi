from google.protobuf import duration_pb2 as _duration_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from posbias.v1 import common_pb2 as _common_pb2
from posbias.v1 import options_pb2 as _options_pb2
from posbias.v1 import model_service_pb2 as _model_service_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Iterable as _Iterable, Mapping as _Mapping, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor
JACOBIAN_METHOD_EXACT: JacobianMethod
JACOBIAN_METHOD_HUTCHINSON: JacobianMethod
JACOBIAN_METHOD_UNSPECIFIED: JacobianMethod
JACOBIAN_OUTPUT_FINAL_HIDDEN: JacobianOutput
JACOBIAN_OUTPUT_LAYER_SWEEP: JacobianOutput
JACOBIAN_OUTPUT_LOG_PROB: JacobianOutput
JACOBIAN_OUTPUT_LOSS_GRADIENT: JacobianOutput
JACOBIAN_OUTPUT_UNSPECIFIED: JacobianOutput
JACOBIAN_PATHWAY_FULL: JacobianPathway
JACOBIAN_PATHWAY_UNSPECIFIED: JacobianPathway
JACOBIAN_PATHWAY_VALUE_ONLY: JacobianPathway
JOB_STATE_CANCELLED: JobState
JOB_STATE_CANCELLING: JobState
JOB_STATE_FAILED: JobState
JOB_STATE_QUEUED: JobState
JOB_STATE_RUNNING: JobState
JOB_STATE_SUCCEEDED: JobState
JOB_STATE_UNSPECIFIED: JobState
JOB_VIEW_BASIC: JobView
JOB_VIEW_FULL: JobView
JOB_VIEW_UNSPECIFIED: JobView
PROBE_DISTRIBUTION_GAUSSIAN: ProbeDistribution
PROBE_DISTRIBUTION_ORTHOGONAL: ProbeDistribution
PROBE_DISTRIBUTION_RADEMACHER: ProbeDistribution
PROBE_DISTRIBUTION_UNSPECIFIED: ProbeDistribution
TEXT_BOUNDARY_TOKEN_BOS: TextBoundaryToken
TEXT_BOUNDARY_TOKEN_EOS: TextBoundaryToken
TEXT_BOUNDARY_TOKEN_NONE: TextBoundaryToken
TEXT_BOUNDARY_TOKEN_UNSPECIFIED: TextBoundaryToken
TEXT_LAYOUT_CONCATENATE: TextLayout
TEXT_LAYOUT_FIXED_BOUNDARIES: TextLayout
TEXT_LAYOUT_NEEDLE: TextLayout
TEXT_LAYOUT_UNSPECIFIED: TextLayout
THEORY_ALPHA_SOURCE_FITTED: TheoryAlphaSource
THEORY_ALPHA_SOURCE_MEASURED: TheoryAlphaSource
THEORY_ALPHA_SOURCE_UNSPECIFIED: TheoryAlphaSource

class BoundarySpike(_message.Message):
    __slots__ = ["position", "ratio", "ratio_mean", "ratio_std", "ratio_stderr", "samples"]
    POSITION_FIELD_NUMBER: _ClassVar[int]
    RATIO_FIELD_NUMBER: _ClassVar[int]
    RATIO_MEAN_FIELD_NUMBER: _ClassVar[int]
    RATIO_STDERR_FIELD_NUMBER: _ClassVar[int]
    RATIO_STD_FIELD_NUMBER: _ClassVar[int]
    SAMPLES_FIELD_NUMBER: _ClassVar[int]
    position: int
    ratio: float
    ratio_mean: float
    ratio_std: float
    ratio_stderr: float
    samples: int
    def __init__(self, position: _Optional[int] = ..., ratio: _Optional[float] = ..., ratio_mean: _Optional[float] = ..., ratio_std: _Optional[float] = ..., ratio_stderr: _Optional[float] = ..., samples: _Optional[int] = ...) -> None: ...

class CancelJobRequest(_message.Message):
    __slots__ = ["id", "reason"]
    ID_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    id: str
    reason: str
    def __init__(self, id: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class ComparedModel(_message.Message):
    __slots__ = ["boundary_spikes", "context", "first", "first_log_ratio", "last", "last_log_ratio", "leading", "middle", "middle_log_ratio", "model", "model_uid", "recall", "spearman", "sq_norm_mean", "sq_norm_stderr", "trailing", "weights_sha256"]
    BOUNDARY_SPIKES_FIELD_NUMBER: _ClassVar[int]
    CONTEXT_FIELD_NUMBER: _ClassVar[int]
    FIRST_FIELD_NUMBER: _ClassVar[int]
    FIRST_LOG_RATIO_FIELD_NUMBER: _ClassVar[int]
    LAST_FIELD_NUMBER: _ClassVar[int]
    LAST_LOG_RATIO_FIELD_NUMBER: _ClassVar[int]
    LEADING_FIELD_NUMBER: _ClassVar[int]
    MIDDLE_FIELD_NUMBER: _ClassVar[int]
    MIDDLE_LOG_RATIO_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    MODEL_UID_FIELD_NUMBER: _ClassVar[int]
    RECALL_FIELD_NUMBER: _ClassVar[int]
    SPEARMAN_FIELD_NUMBER: _ClassVar[int]
    SQ_NORM_MEAN_FIELD_NUMBER: _ClassVar[int]
    SQ_NORM_STDERR_FIELD_NUMBER: _ClassVar[int]
    TRAILING_FIELD_NUMBER: _ClassVar[int]
    WEIGHTS_SHA256_FIELD_NUMBER: _ClassVar[int]
    boundary_spikes: _containers.RepeatedCompositeFieldContainer[BoundarySpike]
    context: ContextBands
    first: ShareEstimate
    first_log_ratio: PairedLogRatio
    last: ShareEstimate
    last_log_ratio: PairedLogRatio
    leading: ShareEstimate
    middle: ShareEstimate
    middle_log_ratio: PairedLogRatio
    model: str
    model_uid: str
    recall: RecallSummary
    spearman: float
    sq_norm_mean: _containers.RepeatedScalarFieldContainer[float]
    sq_norm_stderr: _containers.RepeatedScalarFieldContainer[float]
    trailing: ShareEstimate
    weights_sha256: str
    def __init__(self, model: _Optional[str] = ..., model_uid: _Optional[str] = ..., weights_sha256: _Optional[str] = ..., sq_norm_mean: _Optional[_Iterable[float]] = ..., sq_norm_stderr: _Optional[_Iterable[float]] = ..., leading: _Optional[_Union[ShareEstimate, _Mapping]] = ..., middle: _Optional[_Union[ShareEstimate, _Mapping]] = ..., trailing: _Optional[_Union[ShareEstimate, _Mapping]] = ..., first: _Optional[_Union[ShareEstimate, _Mapping]] = ..., last: _Optional[_Union[ShareEstimate, _Mapping]] = ..., middle_log_ratio: _Optional[_Union[PairedLogRatio, _Mapping]] = ..., first_log_ratio: _Optional[_Union[PairedLogRatio, _Mapping]] = ..., last_log_ratio: _Optional[_Union[PairedLogRatio, _Mapping]] = ..., spearman: _Optional[float] = ..., boundary_spikes: _Optional[_Iterable[_Union[BoundarySpike, _Mapping]]] = ..., context: _Optional[_Union[ContextBands, _Mapping]] = ..., recall: _Optional[_Union[RecallSummary, _Mapping]] = ...) -> None: ...

class ContextBands(_message.Message):
    __slots__ = ["first", "first_log_ratio", "last", "last_log_ratio", "leading", "middle", "middle_log_ratio", "spearman", "trailing"]
    FIRST_FIELD_NUMBER: _ClassVar[int]
    FIRST_LOG_RATIO_FIELD_NUMBER: _ClassVar[int]
    LAST_FIELD_NUMBER: _ClassVar[int]
    LAST_LOG_RATIO_FIELD_NUMBER: _ClassVar[int]
    LEADING_FIELD_NUMBER: _ClassVar[int]
    MIDDLE_FIELD_NUMBER: _ClassVar[int]
    MIDDLE_LOG_RATIO_FIELD_NUMBER: _ClassVar[int]
    SPEARMAN_FIELD_NUMBER: _ClassVar[int]
    TRAILING_FIELD_NUMBER: _ClassVar[int]
    first: ShareEstimate
    first_log_ratio: PairedLogRatio
    last: ShareEstimate
    last_log_ratio: PairedLogRatio
    leading: ShareEstimate
    middle: ShareEstimate
    middle_log_ratio: PairedLogRatio
    spearman: float
    trailing: ShareEstimate
    def __init__(self, leading: _Optional[_Union[ShareEstimate, _Mapping]] = ..., middle: _Optional[_Union[ShareEstimate, _Mapping]] = ..., trailing: _Optional[_Union[ShareEstimate, _Mapping]] = ..., first: _Optional[_Union[ShareEstimate, _Mapping]] = ..., last: _Optional[_Union[ShareEstimate, _Mapping]] = ..., middle_log_ratio: _Optional[_Union[PairedLogRatio, _Mapping]] = ..., first_log_ratio: _Optional[_Union[PairedLogRatio, _Mapping]] = ..., last_log_ratio: _Optional[_Union[PairedLogRatio, _Mapping]] = ..., spearman: _Optional[float] = ...) -> None: ...

class DeleteJobRequest(_message.Message):
    __slots__ = ["force", "id"]
    FORCE_FIELD_NUMBER: _ClassVar[int]
    ID_FIELD_NUMBER: _ClassVar[int]
    force: bool
    id: str
    def __init__(self, id: _Optional[str] = ..., force: bool = ...) -> None: ...

class DeleteJobResponse(_message.Message):
    __slots__ = []
    def __init__(self) -> None: ...

class GaussianEmbeddingsInput(_message.Message):
    __slots__ = ["seed", "stddev"]
    SEED_FIELD_NUMBER: _ClassVar[int]
    STDDEV_FIELD_NUMBER: _ClassVar[int]
    seed: int
    stddev: float
    def __init__(self, seed: _Optional[int] = ..., stddev: _Optional[float] = ...) -> None: ...

class GetJobRequest(_message.Message):
    __slots__ = ["id", "view"]
    ID_FIELD_NUMBER: _ClassVar[int]
    VIEW_FIELD_NUMBER: _ClassVar[int]
    id: str
    view: JobView
    def __init__(self, id: _Optional[str] = ..., view: _Optional[_Union[JobView, str]] = ...) -> None: ...

class GetJobResultRequest(_message.Message):
    __slots__ = ["first_position", "first_sample", "id", "include_raw_samples", "include_token_ids", "last_position", "omit_layer_profiles", "omit_theory", "page_size", "page_token", "sample_count", "stride"]
    FIRST_POSITION_FIELD_NUMBER: _ClassVar[int]
    FIRST_SAMPLE_FIELD_NUMBER: _ClassVar[int]
    ID_FIELD_NUMBER: _ClassVar[int]
    INCLUDE_RAW_SAMPLES_FIELD_NUMBER: _ClassVar[int]
    INCLUDE_TOKEN_IDS_FIELD_NUMBER: _ClassVar[int]
    LAST_POSITION_FIELD_NUMBER: _ClassVar[int]
    OMIT_LAYER_PROFILES_FIELD_NUMBER: _ClassVar[int]
    OMIT_THEORY_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    SAMPLE_COUNT_FIELD_NUMBER: _ClassVar[int]
    STRIDE_FIELD_NUMBER: _ClassVar[int]
    first_position: int
    first_sample: int
    id: str
    include_raw_samples: bool
    include_token_ids: bool
    last_position: int
    omit_layer_profiles: bool
    omit_theory: bool
    page_size: int
    page_token: str
    sample_count: int
    stride: int
    def __init__(self, id: _Optional[str] = ..., first_position: _Optional[int] = ..., last_position: _Optional[int] = ..., stride: _Optional[int] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ..., omit_layer_profiles: bool = ..., omit_theory: bool = ..., include_raw_samples: bool = ..., include_token_ids: bool = ..., first_sample: _Optional[int] = ..., sample_count: _Optional[int] = ...) -> None: ...

class GetJobResultResponse(_message.Message):
    __slots__ = ["id", "jacobian_norm", "next_page_token", "report_json"]
    ID_FIELD_NUMBER: _ClassVar[int]
    JACOBIAN_NORM_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    REPORT_JSON_FIELD_NUMBER: _ClassVar[int]
    id: str
    jacobian_norm: JacobianNormResult
    next_page_token: str
    report_json: str
    def __init__(self, id: _Optional[str] = ..., report_json: _Optional[str] = ..., jacobian_norm: _Optional[_Union[JacobianNormResult, _Mapping]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class GetQuotaRequest(_message.Message):
    __slots__ = []
    def __init__(self) -> None: ...

class GivenTokensInput(_message.Message):
    __slots__ = ["sequence_count", "sequences"]
    SEQUENCES_FIELD_NUMBER: _ClassVar[int]
    SEQUENCE_COUNT_FIELD_NUMBER: _ClassVar[int]
    sequence_count: int
    sequences: _containers.RepeatedCompositeFieldContainer[JobTokenSequence]
    def __init__(self, sequences: _Optional[_Iterable[_Union[JobTokenSequence, _Mapping]]] = ..., sequence_count: _Optional[int] = ...) -> None: ...

class JacobianInput(_message.Message):
    __slots__ = ["gaussian_embeddings", "given_tokens", "random_tokens", "recall", "text"]
    GAUSSIAN_EMBEDDINGS_FIELD_NUMBER: _ClassVar[int]
    GIVEN_TOKENS_FIELD_NUMBER: _ClassVar[int]
    RANDOM_TOKENS_FIELD_NUMBER: _ClassVar[int]
    RECALL_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    gaussian_embeddings: GaussianEmbeddingsInput
    given_tokens: GivenTokensInput
    random_tokens: RandomTokensInput
    recall: RecallInput
    text: TextInput
    def __init__(self, random_tokens: _Optional[_Union[RandomTokensInput, _Mapping]] = ..., given_tokens: _Optional[_Union[GivenTokensInput, _Mapping]] = ..., gaussian_embeddings: _Optional[_Union[GaussianEmbeddingsInput, _Mapping]] = ..., text: _Optional[_Union[TextInput, _Mapping]] = ..., recall: _Optional[_Union[RecallInput, _Mapping]] = ...) -> None: ...

class JacobianNormProfile(_message.Message):
    __slots__ = ["layer", "stats", "theory"]
    LAYER_FIELD_NUMBER: _ClassVar[int]
    STATS_FIELD_NUMBER: _ClassVar[int]
    THEORY_FIELD_NUMBER: _ClassVar[int]
    layer: int
    stats: JacobianNormStats
    theory: JobTheoryComparison
    def __init__(self, layer: _Optional[int] = ..., stats: _Optional[_Union[JacobianNormStats, _Mapping]] = ..., theory: _Optional[_Union[JobTheoryComparison, _Mapping]] = ...) -> None: ...

class JacobianNormResult(_message.Message):
    __slots__ = ["boundary_spikes", "branch_ratios", "comparison", "document_starts", "layer_profiles", "log_prob_mean", "log_prob_std", "method", "needle_sweep", "num_layers", "output", "pathways", "positions", "profile", "provenance", "raw_samples", "recall", "recall_correlation", "sample_tokens", "samples", "sequence_length", "target_position"]
    BOUNDARY_SPIKES_FIELD_NUMBER: _ClassVar[int]
    BRANCH_RATIOS_FIELD_NUMBER: _ClassVar[int]
    COMPARISON_FIELD_NUMBER: _ClassVar[int]
    DOCUMENT_STARTS_FIELD_NUMBER: _ClassVar[int]
    LAYER_PROFILES_FIELD_NUMBER: _ClassVar[int]
    LOG_PROB_MEAN_FIELD_NUMBER: _ClassVar[int]
    LOG_PROB_STD_FIELD_NUMBER: _ClassVar[int]
    METHOD_FIELD_NUMBER: _ClassVar[int]
    NEEDLE_SWEEP_FIELD_NUMBER: _ClassVar[int]
    NUM_LAYERS_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_FIELD_NUMBER: _ClassVar[int]
    PATHWAYS_FIELD_NUMBER: _ClassVar[int]
    POSITIONS_FIELD_NUMBER: _ClassVar[int]
    PROFILE_FIELD_NUMBER: _ClassVar[int]
    PROVENANCE_FIELD_NUMBER: _ClassVar[int]
    RAW_SAMPLES_FIELD_NUMBER: _ClassVar[int]
    RECALL_CORRELATION_FIELD_NUMBER: _ClassVar[int]
    RECALL_FIELD_NUMBER: _ClassVar[int]
    SAMPLES_FIELD_NUMBER: _ClassVar[int]
    SAMPLE_TOKENS_FIELD_NUMBER: _ClassVar[int]
    SEQUENCE_LENGTH_FIELD_NUMBER: _ClassVar[int]
    TARGET_POSITION_FIELD_NUMBER: _ClassVar[int]
    boundary_spikes: _containers.RepeatedCompositeFieldContainer[BoundarySpike]
    branch_ratios: _containers.RepeatedCompositeFieldContainer[JobLayerBranchRatio]
    comparison: _containers.RepeatedCompositeFieldContainer[ComparedModel]
    document_starts: _containers.RepeatedCompositeFieldContainer[JobSampleMarks]
    layer_profiles: _containers.RepeatedCompositeFieldContainer[JacobianNormProfile]
    log_prob_mean: float
    log_prob_std: float
    method: JacobianMethod
    needle_sweep: _containers.RepeatedCompositeFieldContainer[NeedleDepth]
    num_layers: int
    output: JacobianOutput
    pathways: JobPathwayComparison
    positions: _containers.RepeatedScalarFieldContainer[int]
    profile: JacobianNormProfile
    provenance: JobProvenance
    raw_samples: _containers.RepeatedCompositeFieldContainer[JobRawSample]
    recall: RecallSummary
    recall_correlation: RecallCorrelation
    sample_tokens: _containers.RepeatedCompositeFieldContainer[JobSampleTokens]
    samples: int
    sequence_length: int
    target_position: int
    def __init__(self, sequence_length: _Optional[int] = ..., target_position: _Optional[int] = ..., samples: _Optional[int] = ..., output: _Optional[_Union[JacobianOutput, str]] = ..., method: _Optional[_Union[JacobianMethod, str]] = ..., num_layers: _Optional[int] = ..., positions: _Optional[_Iterable[int]] = ..., profile: _Optional[_Union[JacobianNormProfile, _Mapping]] = ..., layer_profiles: _Optional[_Iterable[_Union[JacobianNormProfile, _Mapping]]] = ..., branch_ratios: _Optional[_Iterable[_Union[JobLayerBranchRatio, _Mapping]]] = ..., log_prob_mean: _Optional[float] = ..., log_prob_std: _Optional[float] = ..., raw_samples: _Optional[_Iterable[_Union[JobRawSample, _Mapping]]] = ..., sample_tokens: _Optional[_Iterable[_Union[JobSampleTokens, _Mapping]]] = ..., provenance: _Optional[_Union[JobProvenance, _Mapping]] = ..., pathways: _Optional[_Union[JobPathwayComparison, _Mapping]] = ..., document_starts: _Optional[_Iterable[_Union[JobSampleMarks, _Mapping]]] = ..., boundary_spikes: _Optional[_Iterable[_Union[BoundarySpike, _Mapping]]] = ..., needle_sweep: _Optional[_Iterable[_Union[NeedleDepth, _Mapping]]] = ..., comparison: _Optional[_Iterable[_Union[ComparedModel, _Mapping]]] = ..., recall: _Optional[_Union[RecallSummary, _Mapping]] = ..., recall_correlation: _Optional[_Union[RecallCorrelation, _Mapping]] = ...) -> None: ...

class JacobianNormSpec(_message.Message):
    __slots__ = ["compare_pathways", "dtype", "fit_effective_depth", "init_seed", "input", "method", "model", "output", "pathway", "probe_distribution", "probe_seed", "probes", "reference", "return_raw_samples", "samples", "sequence_length", "target_position", "versus"]
    COMPARE_PATHWAYS_FIELD_NUMBER: _ClassVar[int]
    DTYPE_FIELD_NUMBER: _ClassVar[int]
    FIT_EFFECTIVE_DEPTH_FIELD_NUMBER: _ClassVar[int]
    INIT_SEED_FIELD_NUMBER: _ClassVar[int]
    INPUT_FIELD_NUMBER: _ClassVar[int]
    METHOD_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_FIELD_NUMBER: _ClassVar[int]
    PATHWAY_FIELD_NUMBER: _ClassVar[int]
    PROBES_FIELD_NUMBER: _ClassVar[int]
    PROBE_DISTRIBUTION_FIELD_NUMBER: _ClassVar[int]
    PROBE_SEED_FIELD_NUMBER: _ClassVar[int]
    REFERENCE_FIELD_NUMBER: _ClassVar[int]
    RETURN_RAW_SAMPLES_FIELD_NUMBER: _ClassVar[int]
    SAMPLES_FIELD_NUMBER: _ClassVar[int]
    SEQUENCE_LENGTH_FIELD_NUMBER: _ClassVar[int]
    TARGET_POSITION_FIELD_NUMBER: _ClassVar[int]
    VERSUS_FIELD_NUMBER: _ClassVar[int]
    compare_pathways: bool
    dtype: _common_pb2.ComputeDtype
    fit_effective_depth: bool
    init_seed: int
    input: JacobianInput
    method: JacobianMethod
    model: str
    output: JacobianOutput
    pathway: JacobianPathway
    probe_distribution: ProbeDistribution
    probe_seed: int
    probes: int
    reference: str
    return_raw_samples: bool
    samples: int
    sequence_length: int
    target_position: int
    versus: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, model: _Optional[str] = ..., sequence_length: _Optional[int] = ..., samples: _Optional[int] = ..., input: _Optional[_Union[JacobianInput, _Mapping]] = ..., target_position: _Optional[int] = ..., output: _Optional[_Union[JacobianOutput, str]] = ..., method: _Optional[_Union[JacobianMethod, str]] = ..., probes: _Optional[int] = ..., probe_seed: _Optional[int] = ..., dtype: _Optional[_Union[_common_pb2.ComputeDtype, str]] = ..., return_raw_samples: bool = ..., fit_effective_depth: bool = ..., pathway: _Optional[_Union[JacobianPathway, str]] = ..., compare_pathways: bool = ..., probe_distribution: _Optional[_Union[ProbeDistribution, str]] = ..., versus: _Optional[_Iterable[str]] = ..., init_seed: _Optional[int] = ..., reference: _Optional[str] = ...) -> None: ...

class JacobianNormStats(_message.Message):
    __slots__ = ["estimator_stderr", "norm_mean", "norm_std", "norm_stderr", "profile", "sq_norm_mean", "sq_norm_std", "sq_norm_stderr", "sq_norm_total"]
    ESTIMATOR_STDERR_FIELD_NUMBER: _ClassVar[int]
    NORM_MEAN_FIELD_NUMBER: _ClassVar[int]
    NORM_STDERR_FIELD_NUMBER: _ClassVar[int]
    NORM_STD_FIELD_NUMBER: _ClassVar[int]
    PROFILE_FIELD_NUMBER: _ClassVar[int]
    SQ_NORM_MEAN_FIELD_NUMBER: _ClassVar[int]
    SQ_NORM_STDERR_FIELD_NUMBER: _ClassVar[int]
    SQ_NORM_STD_FIELD_NUMBER: _ClassVar[int]
    SQ_NORM_TOTAL_FIELD_NUMBER: _ClassVar[int]
    estimator_stderr: _containers.RepeatedScalarFieldContainer[float]
    norm_mean: _containers.RepeatedScalarFieldContainer[float]
    norm_std: _containers.RepeatedScalarFieldContainer[float]
    norm_stderr: _containers.RepeatedScalarFieldContainer[float]
    profile: _containers.RepeatedScalarFieldContainer[float]
    sq_norm_mean: _containers.RepeatedScalarFieldContainer[float]
    sq_norm_std: _containers.RepeatedScalarFieldContainer[float]
    sq_norm_stderr: _containers.RepeatedScalarFieldContainer[float]
    sq_norm_total: float
    def __init__(self, sq_norm_mean: _Optional[_Iterable[float]] = ..., sq_norm_std: _Optional[_Iterable[float]] = ..., sq_norm_stderr: _Optional[_Iterable[float]] = ..., norm_mean: _Optional[_Iterable[float]] = ..., norm_std: _Optional[_Iterable[float]] = ..., norm_stderr: _Optional[_Iterable[float]] = ..., profile: _Optional[_Iterable[float]] = ..., estimator_stderr: _Optional[_Iterable[float]] = ..., sq_norm_total: _Optional[float] = ...) -> None: ...

class Job(_message.Message):
    __slots__ = ["attempt", "create_time", "device", "error", "estimated_memory_bytes", "finish_time", "id", "labels", "model_uid", "model_weights_sha256", "progress", "queue_position", "request_id", "spec", "start_time", "state", "status_message", "update_time"]
    class LabelsEntry(_message.Message):
        __slots__ = ["key", "value"]
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    CREATE_TIME_FIELD_NUMBER: _ClassVar[int]
    DEVICE_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    ESTIMATED_MEMORY_BYTES_FIELD_NUMBER: _ClassVar[int]
    FINISH_TIME_FIELD_NUMBER: _ClassVar[int]
    ID_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    MODEL_UID_FIELD_NUMBER: _ClassVar[int]
    MODEL_WEIGHTS_SHA256_FIELD_NUMBER: _ClassVar[int]
    PROGRESS_FIELD_NUMBER: _ClassVar[int]
    QUEUE_POSITION_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    SPEC_FIELD_NUMBER: _ClassVar[int]
    START_TIME_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    STATUS_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    UPDATE_TIME_FIELD_NUMBER: _ClassVar[int]
    attempt: int
    create_time: _timestamp_pb2.Timestamp
    device: str
    error: JobError
    estimated_memory_bytes: int
    finish_time: _timestamp_pb2.Timestamp
    id: str
    labels: _containers.ScalarMap[str, str]
    model_uid: str
    model_weights_sha256: str
    progress: JobProgress
    queue_position: int
    request_id: str
    spec: JobSpec
    start_time: _timestamp_pb2.Timestamp
    state: JobState
    status_message: str
    update_time: _timestamp_pb2.Timestamp
    def __init__(self, id: _Optional[str] = ..., spec: _Optional[_Union[JobSpec, _Mapping]] = ..., state: _Optional[_Union[JobState, str]] = ..., progress: _Optional[_Union[JobProgress, _Mapping]] = ..., attempt: _Optional[int] = ..., create_time: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., start_time: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., finish_time: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., update_time: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., queue_position: _Optional[int] = ..., device: _Optional[str] = ..., error: _Optional[_Union[JobError, _Mapping]] = ..., labels: _Optional[_Mapping[str, str]] = ..., request_id: _Optional[str] = ..., status_message: _Optional[str] = ..., estimated_memory_bytes: _Optional[int] = ..., model_uid: _Optional[str] = ..., model_weights_sha256: _Optional[str] = ...) -> None: ...

class JobError(_message.Message):
    __slots__ = ["code", "message", "reason"]
    CODE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    code: int
    message: str
    reason: _common_pb2.ErrorReason
    def __init__(self, reason: _Optional[_Union[_common_pb2.ErrorReason, str]] = ..., code: _Optional[int] = ..., message: _Optional[str] = ...) -> None: ...

class JobFitSummary(_message.Message):
    __slots__ = ["alpha", "effective_depth", "error", "lambda_high", "lambda_low", "lambda_sample_high", "lambda_sample_low", "model", "ridge", "rmse_log"]
    ALPHA_FIELD_NUMBER: _ClassVar[int]
    EFFECTIVE_DEPTH_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    LAMBDA_FIELD_NUMBER: _ClassVar[int]
    LAMBDA_HIGH_FIELD_NUMBER: _ClassVar[int]
    LAMBDA_LOW_FIELD_NUMBER: _ClassVar[int]
    LAMBDA_SAMPLE_HIGH_FIELD_NUMBER: _ClassVar[int]
    LAMBDA_SAMPLE_LOW_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    RIDGE_FIELD_NUMBER: _ClassVar[int]
    RMSE_LOG_FIELD_NUMBER: _ClassVar[int]
    alpha: float
    effective_depth: int
    error: JobError
    lambda_high: float
    lambda_low: float
    lambda_sample_high: float
    lambda_sample_low: float
    model: _common_pb2.ProfileModel
    ridge: _containers.RepeatedCompositeFieldContainer[JobRidgePoint]
    rmse_log: float
    def __init__(self, model: _Optional[_Union[_common_pb2.ProfileModel, str]] = ..., alpha: _Optional[float] = ..., effective_depth: _Optional[int] = ..., lambda_low: _Optional[float] = ..., lambda_high: _Optional[float] = ..., lambda_sample_low: _Optional[float] = ..., lambda_sample_high: _Optional[float] = ..., rmse_log: _Optional[float] = ..., ridge: _Optional[_Iterable[_Union[JobRidgePoint, _Mapping]]] = ..., error: _Optional[_Union[JobError, _Mapping]] = ..., **kwargs) -> None: ...

class JobLayerBranchRatio(_message.Message):
    __slots__ = ["attention_mean", "attention_std", "layer", "mlp_mean", "mlp_std"]
    ATTENTION_MEAN_FIELD_NUMBER: _ClassVar[int]
    ATTENTION_STD_FIELD_NUMBER: _ClassVar[int]
    LAYER_FIELD_NUMBER: _ClassVar[int]
    MLP_MEAN_FIELD_NUMBER: _ClassVar[int]
    MLP_STD_FIELD_NUMBER: _ClassVar[int]
    attention_mean: float
    attention_std: float
    layer: int
    mlp_mean: float
    mlp_std: float
    def __init__(self, layer: _Optional[int] = ..., attention_mean: _Optional[float] = ..., attention_std: _Optional[float] = ..., mlp_mean: _Optional[float] = ..., mlp_std: _Optional[float] = ...) -> None: ...

class JobPathwayComparison(_message.Message):
    __slots__ = ["cosine_mean", "cosine_std", "cosine_stderr", "interference_share_mean", "interference_share_std", "interference_share_stderr", "ratio_mean", "ratio_std", "ratio_stderr", "score_share_mean", "score_share_std", "score_share_stderr", "total_interference_share_mean", "total_interference_share_stderr", "total_ratio_mean", "total_ratio_stderr", "total_score_share_mean", "total_score_share_stderr", "value_sq_norm_mean", "value_sq_norm_stderr"]
    COSINE_MEAN_FIELD_NUMBER: _ClassVar[int]
    COSINE_STDERR_FIELD_NUMBER: _ClassVar[int]
    COSINE_STD_FIELD_NUMBER: _ClassVar[int]
    INTERFERENCE_SHARE_MEAN_FIELD_NUMBER: _ClassVar[int]
    INTERFERENCE_SHARE_STDERR_FIELD_NUMBER: _ClassVar[int]
    INTERFERENCE_SHARE_STD_FIELD_NUMBER: _ClassVar[int]
    RATIO_MEAN_FIELD_NUMBER: _ClassVar[int]
    RATIO_STDERR_FIELD_NUMBER: _ClassVar[int]
    RATIO_STD_FIELD_NUMBER: _ClassVar[int]
    SCORE_SHARE_MEAN_FIELD_NUMBER: _ClassVar[int]
    SCORE_SHARE_STDERR_FIELD_NUMBER: _ClassVar[int]
    SCORE_SHARE_STD_FIELD_NUMBER: _ClassVar[int]
    TOTAL_INTERFERENCE_SHARE_MEAN_FIELD_NUMBER: _ClassVar[int]
    TOTAL_INTERFERENCE_SHARE_STDERR_FIELD_NUMBER: _ClassVar[int]
    TOTAL_RATIO_MEAN_FIELD_NUMBER: _ClassVar[int]
    TOTAL_RATIO_STDERR_FIELD_NUMBER: _ClassVar[int]
    TOTAL_SCORE_SHARE_MEAN_FIELD_NUMBER: _ClassVar[int]
    TOTAL_SCORE_SHARE_STDERR_FIELD_NUMBER: _ClassVar[int]
    VALUE_SQ_NORM_MEAN_FIELD_NUMBER: _ClassVar[int]
    VALUE_SQ_NORM_STDERR_FIELD_NUMBER: _ClassVar[int]
    cosine_mean: _containers.RepeatedScalarFieldContainer[float]
    cosine_std: _containers.RepeatedScalarFieldContainer[float]
    cosine_stderr: _containers.RepeatedScalarFieldContainer[float]
    interference_share_mean: _containers.RepeatedScalarFieldContainer[float]
    interference_share_std: _containers.RepeatedScalarFieldContainer[float]
    interference_share_stderr: _containers.RepeatedScalarFieldContainer[float]
    ratio_mean: _containers.RepeatedScalarFieldContainer[float]
    ratio_std: _containers.RepeatedScalarFieldContainer[float]
    ratio_stderr: _containers.RepeatedScalarFieldContainer[float]
    score_share_mean: _containers.RepeatedScalarFieldContainer[float]
    score_share_std: _containers.RepeatedScalarFieldContainer[float]
    score_share_stderr: _containers.RepeatedScalarFieldContainer[float]
    total_interference_share_mean: float
    total_interference_share_stderr: float
    total_ratio_mean: float
    total_ratio_stderr: float
    total_score_share_mean: float
    total_score_share_stderr: float
    value_sq_norm_mean: _containers.RepeatedScalarFieldContainer[float]
    value_sq_norm_stderr: _containers.RepeatedScalarFieldContainer[float]
    def __init__(self, value_sq_norm_mean: _Optional[_Iterable[float]] = ..., value_sq_norm_stderr: _Optional[_Iterable[float]] = ..., ratio_mean: _Optional[_Iterable[float]] = ..., ratio_std: _Optional[_Iterable[float]] = ..., ratio_stderr: _Optional[_Iterable[float]] = ..., total_ratio_mean: _Optional[float] = ..., total_ratio_stderr: _Optional[float] = ..., score_share_mean: _Optional[_Iterable[float]] = ..., score_share_std: _Optional[_Iterable[float]] = ..., score_share_stderr: _Optional[_Iterable[float]] = ..., interference_share_mean: _Optional[_Iterable[float]] = ..., interference_share_std: _Optional[_Iterable[float]] = ..., interference_share_stderr: _Optional[_Iterable[float]] = ..., cosine_mean: _Optional[_Iterable[float]] = ..., cosine_std: _Optional[_Iterable[float]] = ..., cosine_stderr: _Optional[_Iterable[float]] = ..., total_score_share_mean: _Optional[float] = ..., total_score_share_stderr: _Optional[float] = ..., total_interference_share_mean: _Optional[float] = ..., total_interference_share_stderr: _Optional[float] = ...) -> None: ...

class JobProgress(_message.Message):
    __slots__ = ["chunks_done", "chunks_total", "estimated_seconds_remaining", "fraction", "samples_done", "samples_total"]
    CHUNKS_DONE_FIELD_NUMBER: _ClassVar[int]
    CHUNKS_TOTAL_FIELD_NUMBER: _ClassVar[int]
    ESTIMATED_SECONDS_REMAINING_FIELD_NUMBER: _ClassVar[int]
    FRACTION_FIELD_NUMBER: _ClassVar[int]
    SAMPLES_DONE_FIELD_NUMBER: _ClassVar[int]
    SAMPLES_TOTAL_FIELD_NUMBER: _ClassVar[int]
    chunks_done: int
    chunks_total: int
    estimated_seconds_remaining: float
    fraction: float
    samples_done: int
    samples_total: int
    def __init__(self, fraction: _Optional[float] = ..., samples_done: _Optional[int] = ..., samples_total: _Optional[int] = ..., chunks_done: _Optional[int] = ..., chunks_total: _Optional[int] = ..., estimated_seconds_remaining: _Optional[float] = ...) -> None: ...

class JobProvenance(_message.Message):
    __slots__ = ["attempt", "cuda_version", "device_name", "dtype", "forward_passes", "input_seed", "intra_op_threads", "libtorch_version", "model_config", "model_init", "model_name", "model_uid", "probe_seed", "queue_wait", "run_time", "server_version", "vector_jacobian_products", "weights_sha256"]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    CUDA_VERSION_FIELD_NUMBER: _ClassVar[int]
    DEVICE_NAME_FIELD_NUMBER: _ClassVar[int]
    DTYPE_FIELD_NUMBER: _ClassVar[int]
    FORWARD_PASSES_FIELD_NUMBER: _ClassVar[int]
    INPUT_SEED_FIELD_NUMBER: _ClassVar[int]
    INTRA_OP_THREADS_FIELD_NUMBER: _ClassVar[int]
    LIBTORCH_VERSION_FIELD_NUMBER: _ClassVar[int]
    MODEL_CONFIG_FIELD_NUMBER: _ClassVar[int]
    MODEL_INIT_FIELD_NUMBER: _ClassVar[int]
    MODEL_NAME_FIELD_NUMBER: _ClassVar[int]
    MODEL_UID_FIELD_NUMBER: _ClassVar[int]
    PROBE_SEED_FIELD_NUMBER: _ClassVar[int]
    QUEUE_WAIT_FIELD_NUMBER: _ClassVar[int]
    RUN_TIME_FIELD_NUMBER: _ClassVar[int]
    SERVER_VERSION_FIELD_NUMBER: _ClassVar[int]
    VECTOR_JACOBIAN_PRODUCTS_FIELD_NUMBER: _ClassVar[int]
    WEIGHTS_SHA256_FIELD_NUMBER: _ClassVar[int]
    attempt: int
    cuda_version: str
    device_name: str
    dtype: _common_pb2.ComputeDtype
    forward_passes: int
    input_seed: int
    intra_op_threads: int
    libtorch_version: str
    model_config: _model_service_pb2.ModelConfig
    model_init: _model_service_pb2.ModelInitRecipe
    model_name: str
    model_uid: str
    probe_seed: int
    queue_wait: _duration_pb2.Duration
    run_time: _duration_pb2.Duration
    server_version: str
    vector_jacobian_products: int
    weights_sha256: str
    def __init__(self, input_seed: _Optional[int] = ..., probe_seed: _Optional[int] = ..., dtype: _Optional[_Union[_common_pb2.ComputeDtype, str]] = ..., device_name: _Optional[str] = ..., server_version: _Optional[str] = ..., libtorch_version: _Optional[str] = ..., cuda_version: _Optional[str] = ..., intra_op_threads: _Optional[int] = ..., model_name: _Optional[str] = ..., model_config: _Optional[_Union[_model_service_pb2.ModelConfig, _Mapping]] = ..., weights_sha256: _Optional[str] = ..., model_init: _Optional[_Union[_model_service_pb2.ModelInitRecipe, _Mapping]] = ..., queue_wait: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ..., run_time: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ..., vector_jacobian_products: _Optional[int] = ..., forward_passes: _Optional[int] = ..., attempt: _Optional[int] = ..., model_uid: _Optional[str] = ...) -> None: ...

class JobRawSample(_message.Message):
    __slots__ = ["layer", "log_prob", "sample", "sq_norm"]
    LAYER_FIELD_NUMBER: _ClassVar[int]
    LOG_PROB_FIELD_NUMBER: _ClassVar[int]
    SAMPLE_FIELD_NUMBER: _ClassVar[int]
    SQ_NORM_FIELD_NUMBER: _ClassVar[int]
    layer: int
    log_prob: float
    sample: int
    sq_norm: _containers.RepeatedScalarFieldContainer[float]
    def __init__(self, sample: _Optional[int] = ..., layer: _Optional[int] = ..., sq_norm: _Optional[_Iterable[float]] = ..., log_prob: _Optional[float] = ...) -> None: ...

class JobRidgePoint(_message.Message):
    __slots__ = ["alpha", "depth", "rmse_log"]
    ALPHA_FIELD_NUMBER: _ClassVar[int]
    DEPTH_FIELD_NUMBER: _ClassVar[int]
    RMSE_LOG_FIELD_NUMBER: _ClassVar[int]
    alpha: float
    depth: int
    rmse_log: float
    def __init__(self, depth: _Optional[int] = ..., alpha: _Optional[float] = ..., rmse_log: _Optional[float] = ...) -> None: ...

class JobSampleMarks(_message.Message):
    __slots__ = ["positions"]
    POSITIONS_FIELD_NUMBER: _ClassVar[int]
    positions: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, positions: _Optional[_Iterable[int]] = ...) -> None: ...

class JobSampleTokens(_message.Message):
    __slots__ = ["next_token_id", "sample", "token_ids"]
    NEXT_TOKEN_ID_FIELD_NUMBER: _ClassVar[int]
    SAMPLE_FIELD_NUMBER: _ClassVar[int]
    TOKEN_IDS_FIELD_NUMBER: _ClassVar[int]
    next_token_id: int
    sample: int
    token_ids: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, sample: _Optional[int] = ..., token_ids: _Optional[_Iterable[int]] = ..., next_token_id: _Optional[int] = ...) -> None: ...

class JobSpec(_message.Message):
    __slots__ = ["device", "jacobian_norm", "priority", "time_limit"]
    DEVICE_FIELD_NUMBER: _ClassVar[int]
    JACOBIAN_NORM_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    TIME_LIMIT_FIELD_NUMBER: _ClassVar[int]
    device: _common_pb2.DevicePreference
    jacobian_norm: JacobianNormSpec
    priority: int
    time_limit: _duration_pb2.Duration
    def __init__(self, jacobian_norm: _Optional[_Union[JacobianNormSpec, _Mapping]] = ..., priority: _Optional[int] = ..., time_limit: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ..., device: _Optional[_Union[_common_pb2.DevicePreference, str]] = ...) -> None: ...

class JobTheoryComparison(_message.Message):
    __slots__ = ["curves", "fits", "quantity"]
    CURVES_FIELD_NUMBER: _ClassVar[int]
    FITS_FIELD_NUMBER: _ClassVar[int]
    QUANTITY_FIELD_NUMBER: _ClassVar[int]
    curves: _containers.RepeatedCompositeFieldContainer[JobTheoryCurve]
    fits: _containers.RepeatedCompositeFieldContainer[JobFitSummary]
    quantity: _common_pb2.ProfileQuantity
    def __init__(self, quantity: _Optional[_Union[_common_pb2.ProfileQuantity, str]] = ..., curves: _Optional[_Iterable[_Union[JobTheoryCurve, _Mapping]]] = ..., fits: _Optional[_Iterable[_Union[JobFitSummary, _Mapping]]] = ...) -> None: ...

class JobTheoryCurve(_message.Message):
    __slots__ = ["alpha_source", "metrics", "model", "profile", "routing"]
    ALPHA_SOURCE_FIELD_NUMBER: _ClassVar[int]
    METRICS_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    PROFILE_FIELD_NUMBER: _ClassVar[int]
    ROUTING_FIELD_NUMBER: _ClassVar[int]
    alpha_source: TheoryAlphaSource
    metrics: _common_pb2.FitMetrics
    model: _common_pb2.ProfileModel
    profile: _containers.RepeatedScalarFieldContainer[float]
    routing: _common_pb2.RoutingModel
    def __init__(self, model: _Optional[_Union[_common_pb2.ProfileModel, str]] = ..., alpha_source: _Optional[_Union[TheoryAlphaSource, str]] = ..., routing: _Optional[_Union[_common_pb2.RoutingModel, _Mapping]] = ..., profile: _Optional[_Iterable[float]] = ..., metrics: _Optional[_Union[_common_pb2.FitMetrics, _Mapping]] = ...) -> None: ...

class JobTokenSequence(_message.Message):
    __slots__ = ["next_token_id", "token_ids"]
    NEXT_TOKEN_ID_FIELD_NUMBER: _ClassVar[int]
    TOKEN_IDS_FIELD_NUMBER: _ClassVar[int]
    next_token_id: int
    token_ids: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, token_ids: _Optional[_Iterable[int]] = ..., next_token_id: _Optional[int] = ...) -> None: ...

class ListJobsRequest(_message.Message):
    __slots__ = ["label_selector", "model", "page_size", "page_token", "states", "view"]
    LABEL_SELECTOR_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    STATES_FIELD_NUMBER: _ClassVar[int]
    VIEW_FIELD_NUMBER: _ClassVar[int]
    label_selector: str
    model: str
    page_size: int
    page_token: str
    states: _containers.RepeatedScalarFieldContainer[JobState]
    view: JobView
    def __init__(self, page_size: _Optional[int] = ..., page_token: _Optional[str] = ..., states: _Optional[_Iterable[_Union[JobState, str]]] = ..., model: _Optional[str] = ..., label_selector: _Optional[str] = ..., view: _Optional[_Union[JobView, str]] = ...) -> None: ...

class ListJobsResponse(_message.Message):
    __slots__ = ["jobs", "next_page_token"]
    JOBS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    jobs: _containers.RepeatedCompositeFieldContainer[Job]
    next_page_token: str
    def __init__(self, jobs: _Optional[_Iterable[_Union[Job, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class NeedleDepth(_message.Message):
    __slots__ = ["baseline_share_mean", "baseline_share_std", "baseline_share_stderr", "depth", "fillers", "share_mean", "share_std", "share_stderr", "start", "tokens"]
    BASELINE_SHARE_MEAN_FIELD_NUMBER: _ClassVar[int]
    BASELINE_SHARE_STDERR_FIELD_NUMBER: _ClassVar[int]
    BASELINE_SHARE_STD_FIELD_NUMBER: _ClassVar[int]
    DEPTH_FIELD_NUMBER: _ClassVar[int]
    FILLERS_FIELD_NUMBER: _ClassVar[int]
    SHARE_MEAN_FIELD_NUMBER: _ClassVar[int]
    SHARE_STDERR_FIELD_NUMBER: _ClassVar[int]
    SHARE_STD_FIELD_NUMBER: _ClassVar[int]
    START_FIELD_NUMBER: _ClassVar[int]
    TOKENS_FIELD_NUMBER: _ClassVar[int]
    baseline_share_mean: float
    baseline_share_std: float
    baseline_share_stderr: float
    depth: float
    fillers: int
    share_mean: float
    share_std: float
    share_stderr: float
    start: int
    tokens: int
    def __init__(self, depth: _Optional[float] = ..., start: _Optional[int] = ..., tokens: _Optional[int] = ..., fillers: _Optional[int] = ..., share_mean: _Optional[float] = ..., share_std: _Optional[float] = ..., share_stderr: _Optional[float] = ..., baseline_share_mean: _Optional[float] = ..., baseline_share_std: _Optional[float] = ..., baseline_share_stderr: _Optional[float] = ...) -> None: ...

class PairedLogRatio(_message.Message):
    __slots__ = ["high", "low", "mean", "samples", "std", "stderr"]
    HIGH_FIELD_NUMBER: _ClassVar[int]
    LOW_FIELD_NUMBER: _ClassVar[int]
    MEAN_FIELD_NUMBER: _ClassVar[int]
    SAMPLES_FIELD_NUMBER: _ClassVar[int]
    STDERR_FIELD_NUMBER: _ClassVar[int]
    STD_FIELD_NUMBER: _ClassVar[int]
    high: float
    low: float
    mean: float
    samples: int
    std: float
    stderr: float
    def __init__(self, mean: _Optional[float] = ..., std: _Optional[float] = ..., stderr: _Optional[float] = ..., low: _Optional[float] = ..., high: _Optional[float] = ..., samples: _Optional[int] = ...) -> None: ...

class Quota(_message.Message):
    __slots__ = ["max_queued_jobs", "max_running_jobs", "principal", "queued_jobs", "role", "running_jobs", "tenant"]
    MAX_QUEUED_JOBS_FIELD_NUMBER: _ClassVar[int]
    MAX_RUNNING_JOBS_FIELD_NUMBER: _ClassVar[int]
    PRINCIPAL_FIELD_NUMBER: _ClassVar[int]
    QUEUED_JOBS_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    RUNNING_JOBS_FIELD_NUMBER: _ClassVar[int]
    TENANT_FIELD_NUMBER: _ClassVar[int]
    max_queued_jobs: int
    max_running_jobs: int
    principal: str
    queued_jobs: int
    role: _options_pb2.AccessRole
    running_jobs: int
    tenant: str
    def __init__(self, principal: _Optional[str] = ..., tenant: _Optional[str] = ..., role: _Optional[_Union[_options_pb2.AccessRole, str]] = ..., max_queued_jobs: _Optional[int] = ..., max_running_jobs: _Optional[int] = ..., queued_jobs: _Optional[int] = ..., running_jobs: _Optional[int] = ...) -> None: ...

class RandomTokensInput(_message.Message):
    __slots__ = ["seed"]
    SEED_FIELD_NUMBER: _ClassVar[int]
    seed: int
    def __init__(self, seed: _Optional[int] = ...) -> None: ...

class RecallCorrelation(_message.Message):
    __slots__ = ["cells", "high", "low", "r"]
    CELLS_FIELD_NUMBER: _ClassVar[int]
    HIGH_FIELD_NUMBER: _ClassVar[int]
    LOW_FIELD_NUMBER: _ClassVar[int]
    R_FIELD_NUMBER: _ClassVar[int]
    cells: int
    high: float
    low: float
    r: float
    def __init__(self, r: _Optional[float] = ..., low: _Optional[float] = ..., high: _Optional[float] = ..., cells: _Optional[int] = ...) -> None: ...

class RecallDepth(_message.Message):
    __slots__ = ["accuracy", "accuracy_high", "accuracy_low", "correct", "depth", "log_prob_mean", "log_prob_std", "log_prob_stderr", "pair_context_share_mean", "pair_context_share_stderr", "pair_share_mean", "pair_share_stderr", "probes"]
    ACCURACY_FIELD_NUMBER: _ClassVar[int]
    ACCURACY_HIGH_FIELD_NUMBER: _ClassVar[int]
    ACCURACY_LOW_FIELD_NUMBER: _ClassVar[int]
    CORRECT_FIELD_NUMBER: _ClassVar[int]
    DEPTH_FIELD_NUMBER: _ClassVar[int]
    LOG_PROB_MEAN_FIELD_NUMBER: _ClassVar[int]
    LOG_PROB_STDERR_FIELD_NUMBER: _ClassVar[int]
    LOG_PROB_STD_FIELD_NUMBER: _ClassVar[int]
    PAIR_CONTEXT_SHARE_MEAN_FIELD_NUMBER: _ClassVar[int]
    PAIR_CONTEXT_SHARE_STDERR_FIELD_NUMBER: _ClassVar[int]
    PAIR_SHARE_MEAN_FIELD_NUMBER: _ClassVar[int]
    PAIR_SHARE_STDERR_FIELD_NUMBER: _ClassVar[int]
    PROBES_FIELD_NUMBER: _ClassVar[int]
    accuracy: float
    accuracy_high: float
    accuracy_low: float
    correct: int
    depth: float
    log_prob_mean: float
    log_prob_std: float
    log_prob_stderr: float
    pair_context_share_mean: float
    pair_context_share_stderr: float
    pair_share_mean: float
    pair_share_stderr: float
    probes: int
    def __init__(self, depth: _Optional[float] = ..., probes: _Optional[int] = ..., correct: _Optional[int] = ..., accuracy: _Optional[float] = ..., accuracy_low: _Optional[float] = ..., accuracy_high: _Optional[float] = ..., log_prob_mean: _Optional[float] = ..., log_prob_std: _Optional[float] = ..., log_prob_stderr: _Optional[float] = ..., pair_share_mean: _Optional[float] = ..., pair_share_stderr: _Optional[float] = ..., pair_context_share_mean: _Optional[float] = ..., pair_context_share_stderr: _Optional[float] = ...) -> None: ...

class RecallInput(_message.Message):
    __slots__ = ["depths", "key_letters", "pairs", "probes_per_depth", "seed", "text", "token_ids", "values"]
    DEPTHS_FIELD_NUMBER: _ClassVar[int]
    KEY_LETTERS_FIELD_NUMBER: _ClassVar[int]
    PAIRS_FIELD_NUMBER: _ClassVar[int]
    PROBES_PER_DEPTH_FIELD_NUMBER: _ClassVar[int]
    SEED_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    TOKEN_IDS_FIELD_NUMBER: _ClassVar[int]
    VALUES_FIELD_NUMBER: _ClassVar[int]
    depths: _containers.RepeatedScalarFieldContainer[float]
    key_letters: int
    pairs: int
    probes_per_depth: int
    seed: int
    text: bool
    token_ids: _model_service_pb2.TokenIdRecall
    values: str
    def __init__(self, depths: _Optional[_Iterable[float]] = ..., probes_per_depth: _Optional[int] = ..., pairs: _Optional[int] = ..., key_letters: _Optional[int] = ..., values: _Optional[str] = ..., seed: _Optional[int] = ..., token_ids: _Optional[_Union[_model_service_pb2.TokenIdRecall, _Mapping]] = ..., text: bool = ...) -> None: ...

class RecallSummary(_message.Message):
    __slots__ = ["chance", "depths", "probes", "share_accuracy"]
    CHANCE_FIELD_NUMBER: _ClassVar[int]
    DEPTHS_FIELD_NUMBER: _ClassVar[int]
    PROBES_FIELD_NUMBER: _ClassVar[int]
    SHARE_ACCURACY_FIELD_NUMBER: _ClassVar[int]
    chance: float
    depths: _containers.RepeatedCompositeFieldContainer[RecallDepth]
    probes: str
    share_accuracy: RecallCorrelation
    def __init__(self, chance: _Optional[float] = ..., depths: _Optional[_Iterable[_Union[RecallDepth, _Mapping]]] = ..., share_accuracy: _Optional[_Union[RecallCorrelation, _Mapping]] = ..., probes: _Optional[str] = ...) -> None: ...

class ShareEstimate(_message.Message):
    __slots__ = ["mean", "std", "stderr"]
    MEAN_FIELD_NUMBER: _ClassVar[int]
    STDERR_FIELD_NUMBER: _ClassVar[int]
    STD_FIELD_NUMBER: _ClassVar[int]
    mean: float
    std: float
    stderr: float
    def __init__(self, mean: _Optional[float] = ..., std: _Optional[float] = ..., stderr: _Optional[float] = ...) -> None: ...

class SubmitJobRequest(_message.Message):
    __slots__ = ["labels", "request_id", "spec"]
    class LabelsEntry(_message.Message):
        __slots__ = ["key", "value"]
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    LABELS_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    SPEC_FIELD_NUMBER: _ClassVar[int]
    labels: _containers.ScalarMap[str, str]
    request_id: str
    spec: JobSpec
    def __init__(self, spec: _Optional[_Union[JobSpec, _Mapping]] = ..., labels: _Optional[_Mapping[str, str]] = ..., request_id: _Optional[str] = ...) -> None: ...

class TextInput(_message.Message):
    __slots__ = ["boundaries", "boundary_token", "layout", "needle", "needle_depths", "question", "samples", "separator", "truncate"]
    BOUNDARIES_FIELD_NUMBER: _ClassVar[int]
    BOUNDARY_TOKEN_FIELD_NUMBER: _ClassVar[int]
    LAYOUT_FIELD_NUMBER: _ClassVar[int]
    NEEDLE_DEPTHS_FIELD_NUMBER: _ClassVar[int]
    NEEDLE_FIELD_NUMBER: _ClassVar[int]
    QUESTION_FIELD_NUMBER: _ClassVar[int]
    SAMPLES_FIELD_NUMBER: _ClassVar[int]
    SEPARATOR_FIELD_NUMBER: _ClassVar[int]
    TRUNCATE_FIELD_NUMBER: _ClassVar[int]
    boundaries: _containers.RepeatedScalarFieldContainer[int]
    boundary_token: TextBoundaryToken
    layout: TextLayout
    needle: str
    needle_depths: _containers.RepeatedScalarFieldContainer[float]
    question: str
    samples: _containers.RepeatedCompositeFieldContainer[TextSample]
    separator: str
    truncate: bool
    def __init__(self, samples: _Optional[_Iterable[_Union[TextSample, _Mapping]]] = ..., layout: _Optional[_Union[TextLayout, str]] = ..., separator: _Optional[str] = ..., boundaries: _Optional[_Iterable[int]] = ..., needle: _Optional[str] = ..., needle_depths: _Optional[_Iterable[float]] = ..., truncate: bool = ..., boundary_token: _Optional[_Union[TextBoundaryToken, str]] = ..., question: _Optional[str] = ...) -> None: ...

class TextSample(_message.Message):
    __slots__ = ["documents"]
    DOCUMENTS_FIELD_NUMBER: _ClassVar[int]
    documents: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, documents: _Optional[_Iterable[str]] = ...) -> None: ...

class WatchJobRequest(_message.Message):
    __slots__ = ["id", "view"]
    ID_FIELD_NUMBER: _ClassVar[int]
    VIEW_FIELD_NUMBER: _ClassVar[int]
    id: str
    view: JobView
    def __init__(self, id: _Optional[str] = ..., view: _Optional[_Union[JobView, str]] = ...) -> None: ...

class WatchJobResponse(_message.Message):
    __slots__ = ["job"]
    JOB_FIELD_NUMBER: _ClassVar[int]
    job: Job
    def __init__(self, job: _Optional[_Union[Job, _Mapping]] = ...) -> None: ...

class JobState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []

class JobView(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []

class ProbeDistribution(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []

class JacobianPathway(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []

class TextBoundaryToken(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []

class TextLayout(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []

class JacobianOutput(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []

class JacobianMethod(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []

class TheoryAlphaSource(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []
