from google.protobuf import timestamp_pb2 as _timestamp_pb2
from posbias.v1 import common_pb2 as _common_pb2
from posbias.v1 import options_pb2 as _options_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Iterable as _Iterable, Mapping as _Mapping, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor
MODEL_ACTIVATION_GEGLU_TANH: ModelActivation
MODEL_ACTIVATION_GELU: ModelActivation
MODEL_ACTIVATION_GELU_TANH: ModelActivation
MODEL_ACTIVATION_NONE: ModelActivation
MODEL_ACTIVATION_SWIGLU: ModelActivation
MODEL_ACTIVATION_UNSPECIFIED: ModelActivation
MODEL_FAMILY_CESARO: ModelFamily
MODEL_FAMILY_GEMMA: ModelFamily
MODEL_FAMILY_GEMMA2: ModelFamily
MODEL_FAMILY_GEMMA3_TEXT: ModelFamily
MODEL_FAMILY_GPT2: ModelFamily
MODEL_FAMILY_GPT_NEOX: ModelFamily
MODEL_FAMILY_GRANITE: ModelFamily
MODEL_FAMILY_LLAMA: ModelFamily
MODEL_FAMILY_MISTRAL: ModelFamily
MODEL_FAMILY_OLMO2: ModelFamily
MODEL_FAMILY_PHI3: ModelFamily
MODEL_FAMILY_QWEN2: ModelFamily
MODEL_FAMILY_QWEN3: ModelFamily
MODEL_FAMILY_SMOLLM3: ModelFamily
MODEL_FAMILY_TORCHSCRIPT: ModelFamily
MODEL_FAMILY_UNSPECIFIED: ModelFamily
MODEL_FILE_FORMAT_SAFETENSORS: ModelFileFormat
MODEL_FILE_FORMAT_TORCHSCRIPT: ModelFileFormat
MODEL_FILE_FORMAT_UNSPECIFIED: ModelFileFormat
MODEL_NORM_KIND_LAYER_NORM: ModelNormKind
MODEL_NORM_KIND_NONE: ModelNormKind
MODEL_NORM_KIND_RMS_NORM: ModelNormKind
MODEL_NORM_KIND_RMS_NORM_ONE_PLUS: ModelNormKind
MODEL_NORM_KIND_UNSPECIFIED: ModelNormKind
MODEL_POSITION_ENCODING_LEARNED: ModelPositionEncoding
MODEL_POSITION_ENCODING_NONE: ModelPositionEncoding
MODEL_POSITION_ENCODING_ROPE: ModelPositionEncoding
MODEL_POSITION_ENCODING_UNSPECIFIED: ModelPositionEncoding
MODEL_STATE_FAILED: ModelState
MODEL_STATE_LOADING: ModelState
MODEL_STATE_READY: ModelState
MODEL_STATE_UNSPECIFIED: ModelState

class CheckpointSource(_message.Message):
    __slots__ = ["config_json", "path"]
    CONFIG_JSON_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    config_json: str
    path: str
    def __init__(self, path: _Optional[str] = ..., config_json: _Optional[str] = ...) -> None: ...

class DeleteModelRequest(_message.Message):
    __slots__ = ["force", "name"]
    FORCE_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    force: bool
    name: str
    def __init__(self, name: _Optional[str] = ..., force: bool = ...) -> None: ...

class DeleteModelResponse(_message.Message):
    __slots__ = ["cancelled_job_ids"]
    CANCELLED_JOB_IDS_FIELD_NUMBER: _ClassVar[int]
    cancelled_job_ids: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, cancelled_job_ids: _Optional[_Iterable[str]] = ...) -> None: ...

class ExportModelHeader(_message.Message):
    __slots__ = ["config_json", "file_name", "format", "sha256", "tensor_count", "total_bytes"]
    CONFIG_JSON_FIELD_NUMBER: _ClassVar[int]
    FILE_NAME_FIELD_NUMBER: _ClassVar[int]
    FORMAT_FIELD_NUMBER: _ClassVar[int]
    SHA256_FIELD_NUMBER: _ClassVar[int]
    TENSOR_COUNT_FIELD_NUMBER: _ClassVar[int]
    TOTAL_BYTES_FIELD_NUMBER: _ClassVar[int]
    config_json: str
    file_name: str
    format: ModelFileFormat
    sha256: str
    tensor_count: int
    total_bytes: int
    def __init__(self, format: _Optional[_Union[ModelFileFormat, str]] = ..., total_bytes: _Optional[int] = ..., sha256: _Optional[str] = ..., file_name: _Optional[str] = ..., config_json: _Optional[str] = ..., tensor_count: _Optional[int] = ...) -> None: ...

class ExportModelRequest(_message.Message):
    __slots__ = ["dtype", "name"]
    DTYPE_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    dtype: _common_pb2.ComputeDtype
    name: str
    def __init__(self, name: _Optional[str] = ..., dtype: _Optional[_Union[_common_pb2.ComputeDtype, str]] = ...) -> None: ...

class ExportModelResponse(_message.Message):
    __slots__ = ["chunk", "header"]
    CHUNK_FIELD_NUMBER: _ClassVar[int]
    HEADER_FIELD_NUMBER: _ClassVar[int]
    chunk: bytes
    header: ExportModelHeader
    def __init__(self, header: _Optional[_Union[ExportModelHeader, _Mapping]] = ..., chunk: _Optional[bytes] = ...) -> None: ...

class GetModelRequest(_message.Message):
    __slots__ = ["name"]
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class IdRange(_message.Message):
    __slots__ = ["first", "last"]
    FIRST_FIELD_NUMBER: _ClassVar[int]
    LAST_FIELD_NUMBER: _ClassVar[int]
    first: int
    last: int
    def __init__(self, first: _Optional[int] = ..., last: _Optional[int] = ...) -> None: ...

class ListModelsRequest(_message.Message):
    __slots__ = ["family", "label_selector", "page_size", "page_token", "state"]
    FAMILY_FIELD_NUMBER: _ClassVar[int]
    LABEL_SELECTOR_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    family: ModelFamily
    label_selector: str
    page_size: int
    page_token: str
    state: ModelState
    def __init__(self, page_size: _Optional[int] = ..., page_token: _Optional[str] = ..., family: _Optional[_Union[ModelFamily, str]] = ..., state: _Optional[_Union[ModelState, str]] = ..., label_selector: _Optional[str] = ...) -> None: ...

class ListModelsResponse(_message.Message):
    __slots__ = ["models", "next_page_token"]
    MODELS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    models: _containers.RepeatedCompositeFieldContainer[Model]
    next_page_token: str
    def __init__(self, models: _Optional[_Iterable[_Union[Model, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class ListPresetsRequest(_message.Message):
    __slots__ = []
    def __init__(self) -> None: ...

class ListPresetsResponse(_message.Message):
    __slots__ = ["presets"]
    PRESETS_FIELD_NUMBER: _ClassVar[int]
    presets: _containers.RepeatedCompositeFieldContainer[ModelPreset]
    def __init__(self, presets: _Optional[_Iterable[_Union[ModelPreset, _Mapping]]] = ...) -> None: ...

class Model(_message.Message):
    __slots__ = ["active_job_count", "builtin", "config", "create_time", "error", "family", "generation", "has_tokenizer", "init", "labels", "memory_bytes", "name", "parameter_count", "ready_time", "source", "state", "tenant", "trained_recall", "uid", "weights_dtype", "weights_sha256"]
    class LabelsEntry(_message.Message):
        __slots__ = ["key", "value"]
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    ACTIVE_JOB_COUNT_FIELD_NUMBER: _ClassVar[int]
    BUILTIN_FIELD_NUMBER: _ClassVar[int]
    CONFIG_FIELD_NUMBER: _ClassVar[int]
    CREATE_TIME_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    FAMILY_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    HAS_TOKENIZER_FIELD_NUMBER: _ClassVar[int]
    INIT_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    MEMORY_BYTES_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    PARAMETER_COUNT_FIELD_NUMBER: _ClassVar[int]
    READY_TIME_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    TENANT_FIELD_NUMBER: _ClassVar[int]
    TRAINED_RECALL_FIELD_NUMBER: _ClassVar[int]
    UID_FIELD_NUMBER: _ClassVar[int]
    WEIGHTS_DTYPE_FIELD_NUMBER: _ClassVar[int]
    WEIGHTS_SHA256_FIELD_NUMBER: _ClassVar[int]
    active_job_count: int
    builtin: bool
    config: ModelConfig
    create_time: _timestamp_pb2.Timestamp
    error: ModelError
    family: ModelFamily
    generation: int
    has_tokenizer: bool
    init: ModelInitRecipe
    labels: _containers.ScalarMap[str, str]
    memory_bytes: int
    name: str
    parameter_count: int
    ready_time: _timestamp_pb2.Timestamp
    source: ModelSource
    state: ModelState
    tenant: str
    trained_recall: TrainedRecallTask
    uid: str
    weights_dtype: _common_pb2.ComputeDtype
    weights_sha256: str
    def __init__(self, name: _Optional[str] = ..., family: _Optional[_Union[ModelFamily, str]] = ..., config: _Optional[_Union[ModelConfig, _Mapping]] = ..., source: _Optional[_Union[ModelSource, _Mapping]] = ..., init: _Optional[_Union[ModelInitRecipe, _Mapping]] = ..., state: _Optional[_Union[ModelState, str]] = ..., error: _Optional[_Union[ModelError, _Mapping]] = ..., weights_sha256: _Optional[str] = ..., parameter_count: _Optional[int] = ..., memory_bytes: _Optional[int] = ..., weights_dtype: _Optional[_Union[_common_pb2.ComputeDtype, str]] = ..., create_time: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., ready_time: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., labels: _Optional[_Mapping[str, str]] = ..., builtin: bool = ..., active_job_count: _Optional[int] = ..., has_tokenizer: bool = ..., uid: _Optional[str] = ..., generation: _Optional[int] = ..., tenant: _Optional[str] = ..., trained_recall: _Optional[_Union[TrainedRecallTask, _Mapping]] = ...) -> None: ...

class ModelAblations(_message.Message):
    __slots__ = ["no_mlp", "no_position_encoding", "uniform_attention"]
    NO_MLP_FIELD_NUMBER: _ClassVar[int]
    NO_POSITION_ENCODING_FIELD_NUMBER: _ClassVar[int]
    UNIFORM_ATTENTION_FIELD_NUMBER: _ClassVar[int]
    no_mlp: bool
    no_position_encoding: bool
    uniform_attention: bool
    def __init__(self, no_position_encoding: bool = ..., uniform_attention: bool = ..., no_mlp: bool = ...) -> None: ...

class ModelArchitectureOverrides(_message.Message):
    __slots__ = ["cesaro_alpha", "hidden_size", "initializer_range", "max_positions", "mlp_width", "num_heads", "num_kv_heads", "num_layers", "rope_theta", "sliding_window", "tie_embeddings", "vocab_size"]
    CESARO_ALPHA_FIELD_NUMBER: _ClassVar[int]
    HIDDEN_SIZE_FIELD_NUMBER: _ClassVar[int]
    INITIALIZER_RANGE_FIELD_NUMBER: _ClassVar[int]
    MAX_POSITIONS_FIELD_NUMBER: _ClassVar[int]
    MLP_WIDTH_FIELD_NUMBER: _ClassVar[int]
    NUM_HEADS_FIELD_NUMBER: _ClassVar[int]
    NUM_KV_HEADS_FIELD_NUMBER: _ClassVar[int]
    NUM_LAYERS_FIELD_NUMBER: _ClassVar[int]
    ROPE_THETA_FIELD_NUMBER: _ClassVar[int]
    SLIDING_WINDOW_FIELD_NUMBER: _ClassVar[int]
    TIE_EMBEDDINGS_FIELD_NUMBER: _ClassVar[int]
    VOCAB_SIZE_FIELD_NUMBER: _ClassVar[int]
    cesaro_alpha: float
    hidden_size: int
    initializer_range: float
    max_positions: int
    mlp_width: int
    num_heads: int
    num_kv_heads: int
    num_layers: int
    rope_theta: float
    sliding_window: int
    tie_embeddings: bool
    vocab_size: int
    def __init__(self, num_layers: _Optional[int] = ..., hidden_size: _Optional[int] = ..., num_heads: _Optional[int] = ..., num_kv_heads: _Optional[int] = ..., mlp_width: _Optional[int] = ..., vocab_size: _Optional[int] = ..., max_positions: _Optional[int] = ..., rope_theta: _Optional[float] = ..., tie_embeddings: bool = ..., initializer_range: _Optional[float] = ..., cesaro_alpha: _Optional[float] = ..., sliding_window: _Optional[int] = ...) -> None: ...

class ModelConfig(_message.Message):
    __slots__ = ["ablations", "activation", "attention_bias", "attention_scale", "attn_logit_softcapping", "cesaro_alpha", "embedding_multiplier", "family", "final_logit_softcapping", "head_dim", "hidden_size", "initializer_range", "logits_scaling", "max_positions", "mlp_bias", "mlp_width", "norm", "norm_eps", "num_heads", "num_kv_heads", "num_layers", "parallel_residual", "position_encoding", "residual_multiplier", "rope_local_theta", "rope_scaling", "rope_theta", "rotary_layers", "rotary_pct", "sliding_layers", "sliding_window", "tie_embeddings", "vocab_size"]
    ABLATIONS_FIELD_NUMBER: _ClassVar[int]
    ACTIVATION_FIELD_NUMBER: _ClassVar[int]
    ATTENTION_BIAS_FIELD_NUMBER: _ClassVar[int]
    ATTENTION_SCALE_FIELD_NUMBER: _ClassVar[int]
    ATTN_LOGIT_SOFTCAPPING_FIELD_NUMBER: _ClassVar[int]
    CESARO_ALPHA_FIELD_NUMBER: _ClassVar[int]
    EMBEDDING_MULTIPLIER_FIELD_NUMBER: _ClassVar[int]
    FAMILY_FIELD_NUMBER: _ClassVar[int]
    FINAL_LOGIT_SOFTCAPPING_FIELD_NUMBER: _ClassVar[int]
    HEAD_DIM_FIELD_NUMBER: _ClassVar[int]
    HIDDEN_SIZE_FIELD_NUMBER: _ClassVar[int]
    INITIALIZER_RANGE_FIELD_NUMBER: _ClassVar[int]
    LOGITS_SCALING_FIELD_NUMBER: _ClassVar[int]
    MAX_POSITIONS_FIELD_NUMBER: _ClassVar[int]
    MLP_BIAS_FIELD_NUMBER: _ClassVar[int]
    MLP_WIDTH_FIELD_NUMBER: _ClassVar[int]
    NORM_EPS_FIELD_NUMBER: _ClassVar[int]
    NORM_FIELD_NUMBER: _ClassVar[int]
    NUM_HEADS_FIELD_NUMBER: _ClassVar[int]
    NUM_KV_HEADS_FIELD_NUMBER: _ClassVar[int]
    NUM_LAYERS_FIELD_NUMBER: _ClassVar[int]
    PARALLEL_RESIDUAL_FIELD_NUMBER: _ClassVar[int]
    POSITION_ENCODING_FIELD_NUMBER: _ClassVar[int]
    RESIDUAL_MULTIPLIER_FIELD_NUMBER: _ClassVar[int]
    ROPE_LOCAL_THETA_FIELD_NUMBER: _ClassVar[int]
    ROPE_SCALING_FIELD_NUMBER: _ClassVar[int]
    ROPE_THETA_FIELD_NUMBER: _ClassVar[int]
    ROTARY_LAYERS_FIELD_NUMBER: _ClassVar[int]
    ROTARY_PCT_FIELD_NUMBER: _ClassVar[int]
    SLIDING_LAYERS_FIELD_NUMBER: _ClassVar[int]
    SLIDING_WINDOW_FIELD_NUMBER: _ClassVar[int]
    TIE_EMBEDDINGS_FIELD_NUMBER: _ClassVar[int]
    VOCAB_SIZE_FIELD_NUMBER: _ClassVar[int]
    ablations: ModelAblations
    activation: ModelActivation
    attention_bias: bool
    attention_scale: float
    attn_logit_softcapping: float
    cesaro_alpha: float
    embedding_multiplier: float
    family: ModelFamily
    final_logit_softcapping: float
    head_dim: int
    hidden_size: int
    initializer_range: float
    logits_scaling: float
    max_positions: int
    mlp_bias: bool
    mlp_width: int
    norm: ModelNormKind
    norm_eps: float
    num_heads: int
    num_kv_heads: int
    num_layers: int
    parallel_residual: bool
    position_encoding: ModelPositionEncoding
    residual_multiplier: float
    rope_local_theta: float
    rope_scaling: RopeScaling
    rope_theta: float
    rotary_layers: _containers.RepeatedScalarFieldContainer[bool]
    rotary_pct: float
    sliding_layers: _containers.RepeatedScalarFieldContainer[bool]
    sliding_window: int
    tie_embeddings: bool
    vocab_size: int
    def __init__(self, family: _Optional[_Union[ModelFamily, str]] = ..., num_layers: _Optional[int] = ..., hidden_size: _Optional[int] = ..., num_heads: _Optional[int] = ..., num_kv_heads: _Optional[int] = ..., head_dim: _Optional[int] = ..., mlp_width: _Optional[int] = ..., vocab_size: _Optional[int] = ..., max_positions: _Optional[int] = ..., rope_theta: _Optional[float] = ..., tie_embeddings: bool = ..., position_encoding: _Optional[_Union[ModelPositionEncoding, str]] = ..., norm: _Optional[_Union[ModelNormKind, str]] = ..., norm_eps: _Optional[float] = ..., activation: _Optional[_Union[ModelActivation, str]] = ..., initializer_range: _Optional[float] = ..., cesaro_alpha: _Optional[float] = ..., ablations: _Optional[_Union[ModelAblations, _Mapping]] = ..., sliding_window: _Optional[int] = ..., attention_bias: bool = ..., mlp_bias: bool = ..., rope_scaling: _Optional[_Union[RopeScaling, _Mapping]] = ..., rotary_pct: _Optional[float] = ..., parallel_residual: bool = ..., sliding_layers: _Optional[_Iterable[bool]] = ..., rotary_layers: _Optional[_Iterable[bool]] = ..., rope_local_theta: _Optional[float] = ..., attention_scale: _Optional[float] = ..., attn_logit_softcapping: _Optional[float] = ..., final_logit_softcapping: _Optional[float] = ..., embedding_multiplier: _Optional[float] = ..., residual_multiplier: _Optional[float] = ..., logits_scaling: _Optional[float] = ...) -> None: ...

class ModelError(_message.Message):
    __slots__ = ["message", "reason"]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    message: str
    reason: _common_pb2.ErrorReason
    def __init__(self, reason: _Optional[_Union[_common_pb2.ErrorReason, str]] = ..., message: _Optional[str] = ...) -> None: ...

class ModelInitRecipe(_message.Message):
    __slots__ = ["name", "seed"]
    NAME_FIELD_NUMBER: _ClassVar[int]
    SEED_FIELD_NUMBER: _ClassVar[int]
    name: str
    seed: int
    def __init__(self, name: _Optional[str] = ..., seed: _Optional[int] = ...) -> None: ...

class ModelPreset(_message.Message):
    __slots__ = ["config", "description", "memory_bytes", "name", "parameter_count", "test_preset"]
    CONFIG_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    MEMORY_BYTES_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    PARAMETER_COUNT_FIELD_NUMBER: _ClassVar[int]
    TEST_PRESET_FIELD_NUMBER: _ClassVar[int]
    config: ModelConfig
    description: str
    memory_bytes: int
    name: str
    parameter_count: int
    test_preset: bool
    def __init__(self, name: _Optional[str] = ..., config: _Optional[_Union[ModelConfig, _Mapping]] = ..., description: _Optional[str] = ..., test_preset: bool = ..., parameter_count: _Optional[int] = ..., memory_bytes: _Optional[int] = ...) -> None: ...

class ModelSource(_message.Message):
    __slots__ = ["checkpoint", "preset", "torchscript", "upload"]
    CHECKPOINT_FIELD_NUMBER: _ClassVar[int]
    PRESET_FIELD_NUMBER: _ClassVar[int]
    TORCHSCRIPT_FIELD_NUMBER: _ClassVar[int]
    UPLOAD_FIELD_NUMBER: _ClassVar[int]
    checkpoint: CheckpointSource
    preset: PresetSource
    torchscript: TorchScriptSource
    upload: UploadSource
    def __init__(self, preset: _Optional[_Union[PresetSource, _Mapping]] = ..., checkpoint: _Optional[_Union[CheckpointSource, _Mapping]] = ..., torchscript: _Optional[_Union[TorchScriptSource, _Mapping]] = ..., upload: _Optional[_Union[UploadSource, _Mapping]] = ...) -> None: ...

class PresetSource(_message.Message):
    __slots__ = ["init_recipe", "init_seed", "overrides", "preset", "tokenizer_path"]
    INIT_RECIPE_FIELD_NUMBER: _ClassVar[int]
    INIT_SEED_FIELD_NUMBER: _ClassVar[int]
    OVERRIDES_FIELD_NUMBER: _ClassVar[int]
    PRESET_FIELD_NUMBER: _ClassVar[int]
    TOKENIZER_PATH_FIELD_NUMBER: _ClassVar[int]
    init_recipe: str
    init_seed: int
    overrides: ModelArchitectureOverrides
    preset: str
    tokenizer_path: str
    def __init__(self, preset: _Optional[str] = ..., overrides: _Optional[_Union[ModelArchitectureOverrides, _Mapping]] = ..., init_seed: _Optional[int] = ..., init_recipe: _Optional[str] = ..., tokenizer_path: _Optional[str] = ...) -> None: ...

class RegisterModelRequest(_message.Message):
    __slots__ = ["ablations", "checkpoint", "labels", "name", "preset", "request_id", "torchscript", "wait"]
    class LabelsEntry(_message.Message):
        __slots__ = ["key", "value"]
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    ABLATIONS_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINT_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    PRESET_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    TORCHSCRIPT_FIELD_NUMBER: _ClassVar[int]
    WAIT_FIELD_NUMBER: _ClassVar[int]
    ablations: ModelAblations
    checkpoint: CheckpointSource
    labels: _containers.ScalarMap[str, str]
    name: str
    preset: PresetSource
    request_id: str
    torchscript: TorchScriptSource
    wait: bool
    def __init__(self, name: _Optional[str] = ..., preset: _Optional[_Union[PresetSource, _Mapping]] = ..., checkpoint: _Optional[_Union[CheckpointSource, _Mapping]] = ..., torchscript: _Optional[_Union[TorchScriptSource, _Mapping]] = ..., ablations: _Optional[_Union[ModelAblations, _Mapping]] = ..., labels: _Optional[_Mapping[str, str]] = ..., request_id: _Optional[str] = ..., wait: bool = ...) -> None: ...

class RopeScaling(_message.Message):
    __slots__ = ["attention_factor", "factor", "high_freq_factor", "long_factor", "low_freq_factor", "original_max_position_embeddings", "rope_type", "short_factor"]
    ATTENTION_FACTOR_FIELD_NUMBER: _ClassVar[int]
    FACTOR_FIELD_NUMBER: _ClassVar[int]
    HIGH_FREQ_FACTOR_FIELD_NUMBER: _ClassVar[int]
    LONG_FACTOR_FIELD_NUMBER: _ClassVar[int]
    LOW_FREQ_FACTOR_FIELD_NUMBER: _ClassVar[int]
    ORIGINAL_MAX_POSITION_EMBEDDINGS_FIELD_NUMBER: _ClassVar[int]
    ROPE_TYPE_FIELD_NUMBER: _ClassVar[int]
    SHORT_FACTOR_FIELD_NUMBER: _ClassVar[int]
    attention_factor: float
    factor: float
    high_freq_factor: float
    long_factor: _containers.RepeatedScalarFieldContainer[float]
    low_freq_factor: float
    original_max_position_embeddings: int
    rope_type: str
    short_factor: _containers.RepeatedScalarFieldContainer[float]
    def __init__(self, rope_type: _Optional[str] = ..., factor: _Optional[float] = ..., low_freq_factor: _Optional[float] = ..., high_freq_factor: _Optional[float] = ..., original_max_position_embeddings: _Optional[int] = ..., short_factor: _Optional[_Iterable[float]] = ..., long_factor: _Optional[_Iterable[float]] = ..., attention_factor: _Optional[float] = ...) -> None: ...

class TokenIdRecall(_message.Message):
    __slots__ = ["filler_ids", "key_ids", "value_ids"]
    FILLER_IDS_FIELD_NUMBER: _ClassVar[int]
    KEY_IDS_FIELD_NUMBER: _ClassVar[int]
    VALUE_IDS_FIELD_NUMBER: _ClassVar[int]
    filler_ids: IdRange
    key_ids: IdRange
    value_ids: IdRange
    def __init__(self, key_ids: _Optional[_Union[IdRange, _Mapping]] = ..., value_ids: _Optional[_Union[IdRange, _Mapping]] = ..., filler_ids: _Optional[_Union[IdRange, _Mapping]] = ...) -> None: ...

class TokenIds(_message.Message):
    __slots__ = ["ids"]
    IDS_FIELD_NUMBER: _ClassVar[int]
    ids: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, ids: _Optional[_Iterable[int]] = ...) -> None: ...

class TokenOffset(_message.Message):
    __slots__ = ["end", "start"]
    END_FIELD_NUMBER: _ClassVar[int]
    START_FIELD_NUMBER: _ClassVar[int]
    end: int
    start: int
    def __init__(self, start: _Optional[int] = ..., end: _Optional[int] = ...) -> None: ...

class TokenizeRequest(_message.Message):
    __slots__ = ["model", "special_tokens_as_text", "text", "token_ids"]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    SPECIAL_TOKENS_AS_TEXT_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    TOKEN_IDS_FIELD_NUMBER: _ClassVar[int]
    model: str
    special_tokens_as_text: bool
    text: str
    token_ids: TokenIds
    def __init__(self, model: _Optional[str] = ..., text: _Optional[str] = ..., token_ids: _Optional[_Union[TokenIds, _Mapping]] = ..., special_tokens_as_text: bool = ...) -> None: ...

class TokenizeResponse(_message.Message):
    __slots__ = ["eos_token_id", "offsets", "text", "token_ids"]
    EOS_TOKEN_ID_FIELD_NUMBER: _ClassVar[int]
    OFFSETS_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    TOKEN_IDS_FIELD_NUMBER: _ClassVar[int]
    eos_token_id: int
    offsets: _containers.RepeatedCompositeFieldContainer[TokenOffset]
    text: str
    token_ids: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, token_ids: _Optional[_Iterable[int]] = ..., offsets: _Optional[_Iterable[_Union[TokenOffset, _Mapping]]] = ..., text: _Optional[str] = ..., eos_token_id: _Optional[int] = ...) -> None: ...

class TorchScriptShape(_message.Message):
    __slots__ = ["hidden_size", "max_positions", "num_layers"]
    HIDDEN_SIZE_FIELD_NUMBER: _ClassVar[int]
    MAX_POSITIONS_FIELD_NUMBER: _ClassVar[int]
    NUM_LAYERS_FIELD_NUMBER: _ClassVar[int]
    hidden_size: int
    max_positions: int
    num_layers: int
    def __init__(self, hidden_size: _Optional[int] = ..., max_positions: _Optional[int] = ..., num_layers: _Optional[int] = ...) -> None: ...

class TorchScriptSource(_message.Message):
    __slots__ = ["path", "shape"]
    PATH_FIELD_NUMBER: _ClassVar[int]
    SHAPE_FIELD_NUMBER: _ClassVar[int]
    path: str
    shape: TorchScriptShape
    def __init__(self, path: _Optional[str] = ..., shape: _Optional[_Union[TorchScriptShape, _Mapping]] = ...) -> None: ...

class TrainedRecallTask(_message.Message):
    __slots__ = ["length", "pairs", "token_ids"]
    LENGTH_FIELD_NUMBER: _ClassVar[int]
    PAIRS_FIELD_NUMBER: _ClassVar[int]
    TOKEN_IDS_FIELD_NUMBER: _ClassVar[int]
    length: int
    pairs: int
    token_ids: TokenIdRecall
    def __init__(self, token_ids: _Optional[_Union[TokenIdRecall, _Mapping]] = ..., pairs: _Optional[int] = ..., length: _Optional[int] = ...) -> None: ...

class UploadModelMetadata(_message.Message):
    __slots__ = ["ablations", "config_json", "file_name", "format", "labels", "name", "request_id", "sha256", "torchscript_shape", "total_bytes", "wait"]
    class LabelsEntry(_message.Message):
        __slots__ = ["key", "value"]
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    ABLATIONS_FIELD_NUMBER: _ClassVar[int]
    CONFIG_JSON_FIELD_NUMBER: _ClassVar[int]
    FILE_NAME_FIELD_NUMBER: _ClassVar[int]
    FORMAT_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    SHA256_FIELD_NUMBER: _ClassVar[int]
    TORCHSCRIPT_SHAPE_FIELD_NUMBER: _ClassVar[int]
    TOTAL_BYTES_FIELD_NUMBER: _ClassVar[int]
    WAIT_FIELD_NUMBER: _ClassVar[int]
    ablations: ModelAblations
    config_json: str
    file_name: str
    format: ModelFileFormat
    labels: _containers.ScalarMap[str, str]
    name: str
    request_id: str
    sha256: str
    torchscript_shape: TorchScriptShape
    total_bytes: int
    wait: bool
    def __init__(self, name: _Optional[str] = ..., format: _Optional[_Union[ModelFileFormat, str]] = ..., config_json: _Optional[str] = ..., torchscript_shape: _Optional[_Union[TorchScriptShape, _Mapping]] = ..., total_bytes: _Optional[int] = ..., sha256: _Optional[str] = ..., file_name: _Optional[str] = ..., ablations: _Optional[_Union[ModelAblations, _Mapping]] = ..., labels: _Optional[_Mapping[str, str]] = ..., request_id: _Optional[str] = ..., wait: bool = ...) -> None: ...

class UploadModelRequest(_message.Message):
    __slots__ = ["chunk", "metadata"]
    CHUNK_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    chunk: bytes
    metadata: UploadModelMetadata
    def __init__(self, metadata: _Optional[_Union[UploadModelMetadata, _Mapping]] = ..., chunk: _Optional[bytes] = ...) -> None: ...

class UploadSource(_message.Message):
    __slots__ = ["file_name", "format", "sha256", "total_bytes"]
    FILE_NAME_FIELD_NUMBER: _ClassVar[int]
    FORMAT_FIELD_NUMBER: _ClassVar[int]
    SHA256_FIELD_NUMBER: _ClassVar[int]
    TOTAL_BYTES_FIELD_NUMBER: _ClassVar[int]
    file_name: str
    format: ModelFileFormat
    sha256: str
    total_bytes: int
    def __init__(self, format: _Optional[_Union[ModelFileFormat, str]] = ..., file_name: _Optional[str] = ..., total_bytes: _Optional[int] = ..., sha256: _Optional[str] = ...) -> None: ...

class ModelFamily(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []

class ModelState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []

class ModelPositionEncoding(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []

class ModelNormKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []

class ModelActivation(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []

class ModelFileFormat(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []
