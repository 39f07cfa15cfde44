"""The plain Python results of the client: dataclasses with numpy arrays.

Each dataclass is built from its protobuf message by `from_proto`; the ones that stand for a
whole resource or response keep that message as `.proto` (left out of repr and comparisons) for
fields this module does not surface. Enum values are short lower-case names ("succeeded",
"coherent", "gpt2"); error reasons keep their upper-case ErrorReason names ("INVALID_DEPTH").
"""

from __future__ import annotations

import dataclasses
import datetime
from typing import Any, Dict, List, Optional, Sequence, Tuple

import grpc
import numpy as np
from google.protobuf import json_format

from posbias._convert import enum_name, floats, ints, optional, timestamp
from posbias.v1 import common_pb2, density_service_pb2, job_service_pb2, model_service_pb2


def _proto_field() -> Any:
    return dataclasses.field(default=None, repr=False, compare=False)


# ---------------------------------------------------------------------------------------------
# Density service


@dataclasses.dataclass
class Quantile:
    """Where a level q of the cumulative influence is reached: position (discrete; 0 for the
    continuum) and x (position / L, or the continuum's smallest x with CDF(x) >= q)."""
    level: float
    position: int
    x: float


@dataclasses.dataclass
class ProfileSummary:
    """Level-based summary of a per-position profile (density_service.proto ProfileSummary); the
    weights are of the profile normalized to sum 1."""
    length: int
    total: float
    first_weight: float
    last_weight: float
    floor_value: float
    floor_position: int
    floor_x: float
    leading_mass: float
    middle_mass: float
    trailing_mass: float
    last_token_jump: float
    quantiles: List[Quantile]

    @classmethod
    def from_proto(cls, message: density_service_pb2.ProfileSummary) -> "ProfileSummary":
        return cls(length=message.length, total=message.total, first_weight=message.first_weight,
                   last_weight=message.last_weight, floor_value=message.floor_value,
                   floor_position=message.floor_position, floor_x=message.floor_x,
                   leading_mass=message.leading_mass, middle_mass=message.middle_mass,
                   trailing_mass=message.trailing_mass, last_token_jump=message.last_token_jump,
                   quantiles=[Quantile(q.level, q.position, q.x) for q in message.quantiles])

    def to_dict(self) -> Dict[str, Any]:
        """The summary as a dict with the keys of the CLI's JSON (`posbias summarize --format json`)."""
        return dataclasses.asdict(self)


@dataclasses.dataclass
class ContinuumResult:
    """The continuum profile rho_H(x) at the points `x` (EvaluateContinuum). Arrays that were not
    requested (`quantities`) are empty."""
    x: np.ndarray
    density: np.ndarray
    log_density: np.ndarray
    cdf: np.ndarray
    ccdf: np.ndarray
    atom: float   # the point mass at x = 1: prod (1 - alpha_l)
    floor: float  # the density's limit at x -> 1-
    depth: int
    proto: density_service_pb2.EvaluateContinuumResponse = _proto_field()

    @classmethod
    def from_proto(cls, message: density_service_pb2.EvaluateContinuumResponse) -> "ContinuumResult":
        return cls(x=floats(message.x), density=floats(message.density), log_density=floats(message.log_density),
                   cdf=floats(message.cdf), ccdf=floats(message.ccdf), atom=message.atom, floor=message.floor,
                   depth=message.depth, proto=message)


@dataclasses.dataclass
class DiscreteResult:
    """The exact finite-L profile (EvaluateDiscrete) at `positions` (1-based), with summaries over
    all L positions of each requested profile (None for one not requested)."""
    positions: np.ndarray
    coherent: np.ndarray
    incoherent: np.ndarray
    coherent_summary: Optional[ProfileSummary]
    incoherent_summary: Optional[ProfileSummary]
    depth: int
    length: int
    proto: density_service_pb2.EvaluateDiscreteResponse = _proto_field()

    @classmethod
    def from_proto(cls, message: density_service_pb2.EvaluateDiscreteResponse,
                   profiles: List[int]) -> "DiscreteResult":
        wanted = set(profiles) or {common_pb2.COHERENT, common_pb2.INCOHERENT}
        return cls(positions=ints(message.position), coherent=floats(message.coherent),
                   incoherent=floats(message.incoherent),
                   coherent_summary=ProfileSummary.from_proto(message.coherent_summary)
                   if common_pb2.COHERENT in wanted else None,
                   incoherent_summary=ProfileSummary.from_proto(message.incoherent_summary)
                   if common_pb2.INCOHERENT in wanted else None,
                   depth=message.depth, length=message.length, proto=message)


@dataclasses.dataclass
class Metrics:
    """Agreement of a measured and a model profile, both normalized to sum 1 (posbias.v1.FitMetrics)."""
    spearman: float
    pearson_log: float
    rmse_log: float
    ks: float
    wasserstein1: float
    measured_last_weight: float
    model_last_weight: float
    measured_floor: float
    model_floor: float
    measured_last_jump: float
    model_last_jump: float

    @classmethod
    def from_proto(cls, message: Any) -> "Metrics":
        return cls(**{f.name: getattr(message, f.name) for f in dataclasses.fields(cls)})


@dataclasses.dataclass
class RidgePoint:
    """The best alpha at one depth and its objective (rmse_log)."""
    depth: int
    alpha: float
    rmse_log: float


@dataclasses.dataclass
class ModelFit:
    """A fit of the coherent or incoherent model to a measured profile (FitProfile). `lambda_` is
    alpha * depth (the proto's `lambda`, a Python keyword), with its ridge interval."""
    model: str
    depth: int
    alpha: float
    lambda_: float
    lambda_low: float
    lambda_high: float
    metrics: Metrics
    ridge: List[RidgePoint]
    profile: np.ndarray  # the fitted normalized profile (only with include_profiles=True)

    @classmethod
    def from_proto(cls, message: density_service_pb2.ModelFit) -> "ModelFit":
        return cls(model=enum_name(common_pb2.ProfileModel, message.model), depth=message.depth,
                   alpha=message.alpha, lambda_=getattr(message, "lambda"), lambda_low=message.lambda_low,
                   lambda_high=message.lambda_high, metrics=Metrics.from_proto(message.metrics),
                   ridge=[RidgePoint(r.depth, r.alpha, r.rmse_log) for r in message.ridge],
                   profile=floats(message.profile))


@dataclasses.dataclass
class FitResult:
    """FitProfile's answer: one fit per requested model and the measured profile's summary."""
    fits: List[ModelFit]
    measured_summary: ProfileSummary
    proto: density_service_pb2.FitProfileResponse = _proto_field()

    @classmethod
    def from_proto(cls, message: density_service_pb2.FitProfileResponse) -> "FitResult":
        return cls(fits=[ModelFit.from_proto(f) for f in message.fits],
                   measured_summary=ProfileSummary.from_proto(message.measured_summary), proto=message)

    def fit(self, model: str) -> ModelFit:
        """The fit of "coherent" or "incoherent" (KeyError when it was not requested)."""
        for fit in self.fits:
            if fit.model == model:
                return fit
        raise KeyError("no %s fit (fitted: %s)" % (model, ", ".join(f.model for f in self.fits)))

    @property
    def coherent(self) -> Optional[ModelFit]:
        """The coherent fit, None when it was not requested."""
        return next((f for f in self.fits if f.model == "coherent"), None)

    @property
    def incoherent(self) -> Optional[ModelFit]:
        """The incoherent fit, None when it was not requested."""
        return next((f for f in self.fits if f.model == "incoherent"), None)


# ---------------------------------------------------------------------------------------------
# Model service


@dataclasses.dataclass
class Failure:
    """Why a model failed to load or a job failed: the ErrorReason name, the gRPC status code
    (jobs only; None for models) and the server's message."""
    reason: str
    message: str
    code: Optional[grpc.StatusCode] = None

    @classmethod
    def from_proto(cls, message: Any) -> Optional["Failure"]:
        if message.reason == 0 and not message.message:
            return None
        reason = common_pb2.ErrorReason.Name(message.reason) \
            if message.reason in common_pb2.ErrorReason.values() else str(message.reason)
        code = None
        if hasattr(message, "code"):
            code = next((c for c in grpc.StatusCode if c.value[0] == message.code), grpc.StatusCode.UNKNOWN)
        return cls(reason=reason, message=message.message, code=code)


@dataclasses.dataclass
class ModelConfig:
    """The resolved architecture of a model (model_service.proto ModelConfig); fields that do not
    apply to the family are 0 / False / "none"."""
    family: str
    num_layers: int
    hidden_size: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    mlp_width: int
    vocab_size: int
    max_positions: int
    rope_theta: float
    tie_embeddings: bool
    position_encoding: str
    norm: str
    norm_eps: float
    activation: str
    initializer_range: float
    cesaro_alpha: float
    ablations: Dict[str, bool]

    @classmethod
    def from_proto(cls, c: model_service_pb2.ModelConfig) -> "ModelConfig":
        m = model_service_pb2
        return cls(family=enum_name(m.ModelFamily, c.family), num_layers=c.num_layers, hidden_size=c.hidden_size,
                   num_heads=c.num_heads, num_kv_heads=c.num_kv_heads, head_dim=c.head_dim, mlp_width=c.mlp_width,
                   vocab_size=c.vocab_size, max_positions=c.max_positions, rope_theta=c.rope_theta,
                   tie_embeddings=c.tie_embeddings,
                   position_encoding=enum_name(m.ModelPositionEncoding, c.position_encoding),
                   norm=enum_name(m.ModelNormKind, c.norm), norm_eps=c.norm_eps,
                   activation=enum_name(m.ModelActivation, c.activation), initializer_range=c.initializer_range,
                   cesaro_alpha=c.cesaro_alpha,
                   ablations={"no_position_encoding": c.ablations.no_position_encoding,
                              "uniform_attention": c.ablations.uniform_attention,
                              "no_mlp": c.ablations.no_mlp})


@dataclasses.dataclass
class Preset:
    """A preset the server can build (ListPresets)."""
    name: str
    description: str
    test_preset: bool
    parameter_count: int
    memory_bytes: int
    config: ModelConfig
    proto: model_service_pb2.ModelPreset = _proto_field()

    @classmethod
    def from_proto(cls, message: model_service_pb2.ModelPreset) -> "Preset":
        return cls(name=message.name, description=message.description, test_preset=message.test_preset,
                   parameter_count=message.parameter_count, memory_bytes=message.memory_bytes,
                   config=ModelConfig.from_proto(message.config), proto=message)


@dataclasses.dataclass
class Model:
    """A registered model (model_service.proto Model). `source_kind` is "preset", "checkpoint",
    "torchscript" or "upload"; `source` holds that source's fields as a dict (proto JSON names).
    `tenant` is the model's namespace ("" = public); `uid` the registration's identity."""
    name: str
    tenant: str
    uid: str
    family: str
    state: str  # "loading", "ready" or "failed"
    config: ModelConfig
    source_kind: str
    source: Dict[str, Any]
    init_recipe: str
    init_seed: int
    error: Optional[Failure]
    weights_sha256: str
    parameter_count: int
    memory_bytes: int
    weights_dtype: str
    create_time: Optional[datetime.datetime]
    ready_time: Optional[datetime.datetime]
    labels: Dict[str, str]
    builtin: bool
    active_job_count: int
    has_tokenizer: bool
    proto: model_service_pb2.Model = _proto_field()

    @classmethod
    def from_proto(cls, message: model_service_pb2.Model) -> "Model":
        kind = message.source.WhichOneof("kind") or ""
        source = json_format.MessageToDict(getattr(message.source, kind), preserving_proto_field_name=True) \
            if kind else {}
        return cls(name=message.name, tenant=message.tenant, uid=message.uid, family=enum_name(model_service_pb2.ModelFamily, message.family),
                   state=enum_name(model_service_pb2.ModelState, message.state),
                   config=ModelConfig.from_proto(message.config), source_kind=kind, source=source,
                   init_recipe=message.init.name, init_seed=message.init.seed,
                   error=Failure.from_proto(message.error) if message.HasField("error") else None,
                   weights_sha256=message.weights_sha256, parameter_count=message.parameter_count,
                   memory_bytes=message.memory_bytes,
                   weights_dtype=enum_name(common_pb2.ComputeDtype, message.weights_dtype),
                   create_time=timestamp(message, "create_time"), ready_time=timestamp(message, "ready_time"),
                   labels=dict(message.labels), builtin=message.builtin,
                   active_job_count=message.active_job_count, has_tokenizer=message.has_tokenizer, proto=message)


@dataclasses.dataclass
class ExportedModel:
    """A model's weights written by Client.export_model: the file, its verified SHA-256 and size,
    and the Hugging Face config.json text (also written to `config_path` when one was asked for)."""
    path: str
    sha256: str
    total_bytes: int
    format: str
    file_name: str
    config_json: str
    tensor_count: int
    config_path: Optional[str]


# ---------------------------------------------------------------------------------------------
# Job service


@dataclasses.dataclass
class JobProgress:
    """Progress of a job's current (or last) attempt. `eta_seconds` is the server's estimate of the
    seconds remaining (None when unknown: queued, before the first chunk, and when terminal)."""
    fraction: float
    samples_done: int
    samples_total: int
    chunks_done: int
    chunks_total: int
    eta_seconds: Optional[float]

    @classmethod
    def from_proto(cls, p: job_service_pb2.JobProgress) -> "JobProgress":
        return cls(fraction=p.fraction, samples_done=p.samples_done, samples_total=p.samples_total,
                   chunks_done=p.chunks_done, chunks_total=p.chunks_total,
                   eta_seconds=optional(p, "estimated_seconds_remaining"))


@dataclasses.dataclass
class TheoryFit:
    """A fit of the routing theory to a job's measured profile (JobFitSummary): alpha, the
    effective depth when it was fitted (else None), lambda = alpha * depth (`lambda_`) with its
    ridge interval (lambda_low/high) and its bootstrap interval over samples
    (lambda_sample_low/high). `error` is set when the fit failed."""
    model: str
    alpha: float
    effective_depth: Optional[int]
    lambda_: float
    lambda_low: float
    lambda_high: float
    lambda_sample_low: float
    lambda_sample_high: float
    rmse_log: float
    ridge: List[RidgePoint]
    error: Optional[Failure]

    @classmethod
    def from_proto(cls, f: job_service_pb2.JobFitSummary) -> "TheoryFit":
        return cls(model=enum_name(common_pb2.ProfileModel, f.model), alpha=f.alpha,
                   effective_depth=optional(f, "effective_depth"), lambda_=getattr(f, "lambda"),
                   lambda_low=f.lambda_low, lambda_high=f.lambda_high, lambda_sample_low=f.lambda_sample_low,
                   lambda_sample_high=f.lambda_sample_high, rmse_log=f.rmse_log,
                   ridge=[RidgePoint(r.depth, r.alpha, r.rmse_log) for r in f.ridge],
                   error=Failure.from_proto(f.error) if f.HasField("error") else None)


@dataclasses.dataclass
class TheoryCurve:
    """A theory prediction on the result's positions (normalized over 1..T): model "coherent" or
    "incoherent", alpha_source "measured" (the measured per-layer schedule, `alpha_schedule`) or
    "fitted" (the constant `alpha`), with its comparison metrics over all positions."""
    model: str
    alpha_source: str
    depth: int
    alpha: Optional[float]
    alpha_schedule: Optional[np.ndarray]
    profile: np.ndarray
    metrics: Metrics


@dataclasses.dataclass
class BranchRatios:
    """Measured branch ratios per layer (arrays over layers 1..H): the attention branch's mean is
    the model's own alpha_l."""
    layer: np.ndarray
    attention_mean: np.ndarray
    attention_std: np.ndarray
    mlp_mean: np.ndarray
    mlp_std: np.ndarray


@dataclasses.dataclass
class BoundarySpike:
    """The spike at a document start (job_service.proto BoundarySpike): `ratio` of the mean
    profile over the `samples` samples starting a document at `position`, and the mean, standard
    deviation and standard error of each one's own ratio (None in results of older servers)."""
    position: int
    ratio: float
    ratio_mean: Optional[float]
    ratio_std: Optional[float]
    ratio_stderr: Optional[float]
    samples: Optional[int]

    @classmethod
    def from_proto(cls, spike) -> "BoundarySpike":
        def field(name):
            return getattr(spike, name) if spike.HasField(name) else None
        return cls(position=spike.position, ratio=spike.ratio, ratio_mean=field("ratio_mean"),
                   ratio_std=field("ratio_std"), ratio_stderr=field("ratio_stderr"), samples=field("samples"))


@dataclasses.dataclass
class NeedleSweep:
    """A needle-depth sweep, per depth (job_service.proto NeedleDepth), as arrays: the needle's
    `start` and `tokens`, its span's share of sum_j ||J_j||^2 (mean, std and standard error over
    the `fillers`) and the same positions' share with the filler alone (the baseline)."""
    depth: np.ndarray
    start: np.ndarray
    tokens: np.ndarray
    fillers: np.ndarray
    share_mean: np.ndarray
    share_std: np.ndarray
    share_stderr: np.ndarray
    baseline_share_mean: np.ndarray
    baseline_share_std: np.ndarray
    baseline_share_stderr: np.ndarray

    @classmethod
    def from_proto(cls, depths) -> "NeedleSweep":
        def column(name, dtype):
            return np.array([getattr(d, name) for d in depths], dtype=dtype)
        return cls(depth=column("depth", np.float64), start=column("start", np.int64), tokens=column("tokens", np.int64),
                   fillers=column("fillers", np.int64),
                   **{name: column(name, np.float64) for name in (
                       "share_mean", "share_std", "share_stderr", "baseline_share_mean", "baseline_share_std",
                       "baseline_share_stderr")})


@dataclasses.dataclass
class RecallSweep:
    """Recall by depth of one model (job_service.proto RecallSummary), as arrays over depths:
    `probes` and `correct` (the answer strictly the model's top token at L), `accuracy` with its
    95 % Clopper-Pearson interval `accuracy_low` / `accuracy_high`, the answer's log-probability
    (`log_prob_mean` / `_std` / `_stderr`), and the queried pair's share of sum_j ||J_j||^2 over
    1..L (`pair_share_*`) and over the context 1..L-1 (`pair_context_share_*`). `chance` = 1 / the
    values' alphabet; `share_accuracy` = (r, low, high, cells): Pearson's r of the depths' mean
    pair_context_share against accuracy with its 95 % Fisher-z interval (None when undefined).
    `asked`: which probes, in words ("text: 8 key=value pairs, ..." or "token ids: 8 pairs, keys
    128:192, ... (the task <model> was trained on)")."""
    chance: float
    depth: np.ndarray
    probes: np.ndarray
    correct: np.ndarray
    accuracy: np.ndarray
    accuracy_low: np.ndarray
    accuracy_high: np.ndarray
    log_prob_mean: np.ndarray
    log_prob_std: np.ndarray
    log_prob_stderr: np.ndarray
    pair_share_mean: np.ndarray
    pair_share_stderr: np.ndarray
    pair_context_share_mean: np.ndarray
    pair_context_share_stderr: np.ndarray
    share_accuracy: Optional[Tuple[float, float, float, int]]
    asked: str = ""

    @staticmethod
    def correlation(message) -> Tuple[float, float, float, int]:
        return (message.r, message.low, message.high, message.cells)

    @classmethod
    def from_proto(cls, summary) -> "RecallSweep":
        def column(name, dtype=np.float64):
            return np.array([getattr(d, name) for d in summary.depths], dtype=dtype)
        floats_ = ("depth", "accuracy", "accuracy_low", "accuracy_high", "log_prob_mean", "log_prob_std",
                   "log_prob_stderr", "pair_share_mean", "pair_share_stderr", "pair_context_share_mean",
                   "pair_context_share_stderr")
        return cls(chance=summary.chance, probes=column("probes", np.int64), correct=column("correct", np.int64),
                   share_accuracy=cls.correlation(summary.share_accuracy) if summary.HasField("share_accuracy")
                   else None, asked=summary.probes, **{name: column(name) for name in floats_})


@dataclasses.dataclass
class ModelComparison:
    """A comparison job's models (job_service.proto ComparedModel), the job's model first, as
    arrays over models (the reference, `model` unless the job named another, has NaN log ratios): `models` (names; "init" = the reference's architecture at
    seeded initialization); `sq_norm_mean` / `sq_norm_stderr` of shape (models, positions), parallel
    to JobResult.positions; each sample's band shares of sum_j ||J_j||^2 averaged over samples,
    `<band>_mean` / `_std` / `_stderr` for band in leading (first tenth of the positions), middle,
    trailing (last tenth), first and last (w_1, w_T); the paired log ratios against the reference
    per sample, `<name>_log_ratio_mean` / `_stderr` / `_low` / `_high` (95 % bootstrap interval) for
    name in middle, first, last (NaN for the reference itself; a negative middle ratio is a
    deeper valley); and `spearman` of each mean profile with the reference's. `context_bands`,
    `context_log_ratios` and `context_spearman` are the same over the context alone (positions
    1..T-1, the target's own position left out; NaN where the server sent none). Recall jobs:
    `recall`, each model's RecallSweep."""
    models: List[str]
    sq_norm_mean: np.ndarray
    sq_norm_stderr: np.ndarray
    bands: Dict[str, Dict[str, np.ndarray]]
    log_ratios: Dict[str, Dict[str, np.ndarray]]
    spearman: np.ndarray
    boundary_spikes: List[Dict[int, float]]
    context_bands: Optional[Dict[str, Dict[str, np.ndarray]]] = None
    context_log_ratios: Optional[Dict[str, Dict[str, np.ndarray]]] = None
    context_spearman: Optional[np.ndarray] = None
    recall: Optional[List[Optional[RecallSweep]]] = None

    BANDS = ("leading", "middle", "trailing", "first", "last")
    RATIOS = ("middle", "first", "last")

    def __repr__(self) -> str:
        """A summary, one line a model (the arrays are the fields): the middle, first and last
        weight with their standard errors, the log middle ratio against the reference with its
        95 % interval, and the Spearman correlation with the reference."""
        lines = ["ModelComparison of %d models over %d positions:"
                 % (len(self.models), self.sq_norm_mean.shape[1] if self.sq_norm_mean.ndim == 2 else 0)]
        width = max(len(name) for name in self.models) if self.models else 5
        for m, name in enumerate(self.models):
            ratio = self.log_ratios["middle"]
            against = ("reference" if np.isnan(ratio["mean"][m]) else "log middle ratio %+.3f [%+.3f, %+.3f]"
                       % (ratio["mean"][m], ratio["low"][m], ratio["high"][m]))
            lines.append("  %-*s  middle %.4f +- %.4f  first %.4f  last %.4f  %s  spearman %.3f" % (
                width, name, self.bands["middle"]["mean"][m], self.bands["middle"]["stderr"][m],
                self.bands["first"]["mean"][m], self.bands["last"]["mean"][m], against, self.spearman[m]))
        return "\n".join(lines)

    @classmethod
    def from_pages(cls, pages) -> "ModelComparison":
        """From the `comparison` of every page of one result (profiles joined over the pages)."""
        first = list(pages[0])
        profiles = [([], []) for _ in first]
        for page in pages:
            for (mean, stderr), model in zip(profiles, page):
                mean.extend(model.sq_norm_mean)
                stderr.extend(model.sq_norm_stderr)
        nan = float("nan")

        def statistics(of):
            """(bands, log ratios, spearman) of the band messages of[m] (None: NaN)."""
            bands = {band: {stat: np.array([getattr(getattr(m, band), stat) if m is not None else nan for m in of],
                                           dtype=np.float64)
                            for stat in ("mean", "std", "stderr")} for band in cls.BANDS}
            log_ratios = {name: {stat: np.array([getattr(getattr(m, name + "_log_ratio"), stat)
                                                 if m is not None and m.HasField(name + "_log_ratio") else nan
                                                 for m in of], dtype=np.float64)
                                 for stat in ("mean", "std", "stderr", "low", "high")} for name in cls.RATIOS}
            spearman = np.array([m.spearman if m is not None else nan for m in of], dtype=np.float64)
            return bands, log_ratios, spearman

        bands, log_ratios, spearman = statistics(first)
        context_bands, context_log_ratios, context_spearman = statistics(
            [m.context if m.HasField("context") else None for m in first])
        return cls(models=[m.model for m in first],
                   sq_norm_mean=np.array([mean for mean, _ in profiles], dtype=np.float64),
                   sq_norm_stderr=np.array([stderr for _, stderr in profiles], dtype=np.float64),
                   bands=bands, log_ratios=log_ratios, spearman=spearman,
                   boundary_spikes=[{s.position: s.ratio for s in m.boundary_spikes} for m in first],
                   context_bands=context_bands, context_log_ratios=context_log_ratios,
                   context_spearman=context_spearman,
                   recall=[RecallSweep.from_proto(m.recall) if m.HasField("recall") else None for m in first]
                   if any(m.HasField("recall") for m in first) else None)

    def plot(self, positions: np.ndarray, ax: Any = None) -> Any:
        """Overlays every model's normalized profile (share of its total) with its standard-error
        band, on a log scale with matplotlib; returns the Axes."""
        try:
            import matplotlib.pyplot as plt
        except ImportError as error:
            raise ImportError("ModelComparison.plot needs matplotlib: pip install matplotlib") from error
        if ax is None:
            _, ax = plt.subplots(figsize=(7, 4.5))
        for name, mean, stderr in zip(self.models, self.sq_norm_mean, self.sq_norm_stderr):
            total = mean.sum()
            line, = ax.plot(positions, mean / total, label=name)
            ax.fill_between(positions, np.maximum((mean - stderr) / total, 1e-300), (mean + stderr) / total,
                            color=line.get_color(), alpha=0.2)
        ax.set_yscale("log")
        ax.set_xlabel("position j")
        ax.set_ylabel("share of sum_j ||dy/de_j||^2")
        ax.legend()
        return ax

    def plot_middle(self, ax: Any = None) -> Any:
        """The middle share (mean +- standard error) against each model's place in the job (a
        training trajectory's checkpoints in order); returns the Axes."""
        try:
            import matplotlib.pyplot as plt
        except ImportError as error:
            raise ImportError("ModelComparison.plot_middle needs matplotlib: pip install matplotlib") from error
        if ax is None:
            _, ax = plt.subplots(figsize=(7, 4.5))
        middle = self.bands["middle"]
        ax.errorbar(range(len(self.models)), middle["mean"], yerr=middle["stderr"], marker="o", capsize=3)
        ax.set_xticks(range(len(self.models)))
        ax.set_xticklabels(self.models)
        ax.set_ylabel("middle 80 % share")
        return ax


@dataclasses.dataclass
class PathwayComparison:
    """compare_pathways jobs: the value pathway measured beside the full one (same samples, same
    probes). Arrays are parallel to JobResult.positions; per position and sample, with
    J_full = J_value + J_score: `ratio` = ||J_value||^2 / ||J_full||^2, `score_share` =
    ||J_full - J_value||^2 / ||J_full||^2 (the score pathway's own share, >= 0),
    `interference_share` = 2 <J_value, J_score> / ||J_full||^2 (either sign; ratio + score_share +
    interference_share = 1) and `cosine` = <J_value, J_score> / (||J_value|| ||J_score||), each as
    mean / std / stderr over samples. The totals are over all positions, with their standard errors."""
    value_sq_norm_mean: np.ndarray
    value_sq_norm_stderr: np.ndarray
    ratio_mean: np.ndarray
    ratio_std: np.ndarray
    ratio_stderr: np.ndarray
    score_share_mean: np.ndarray
    score_share_std: np.ndarray
    score_share_stderr: np.ndarray
    interference_share_mean: np.ndarray
    interference_share_std: np.ndarray
    interference_share_stderr: np.ndarray
    cosine_mean: np.ndarray
    cosine_std: np.ndarray
    cosine_stderr: np.ndarray
    total_ratio_mean: float
    total_ratio_stderr: float
    total_score_share_mean: float
    total_score_share_stderr: float
    total_interference_share_mean: float
    total_interference_share_stderr: float

    ARRAYS = ("value_sq_norm_mean", "value_sq_norm_stderr", "ratio_mean", "ratio_std", "ratio_stderr",
              "score_share_mean", "score_share_std", "score_share_stderr", "interference_share_mean",
              "interference_share_std", "interference_share_stderr", "cosine_mean", "cosine_std", "cosine_stderr")
    TOTALS = ("total_ratio_mean", "total_ratio_stderr", "total_score_share_mean", "total_score_share_stderr",
              "total_interference_share_mean", "total_interference_share_stderr")

    @classmethod
    def from_pages(cls, parts: Sequence[job_service_pb2.JobPathwayComparison]) -> "PathwayComparison":
        """Joins one comparison over result pages (arrays concatenated, totals from page one)."""
        arrays = {name: floats(v for part in parts for v in getattr(part, name)) for name in cls.ARRAYS}
        totals = {name: getattr(parts[0], name) for name in cls.TOTALS}
        return cls(**arrays, **totals)


@dataclasses.dataclass
class LayerProfile:
    """The measured profile of one layer's residual stream (LAYER_SWEEP jobs), arrays parallel to
    JobResult.positions."""
    layer: int
    sq_norm_mean: np.ndarray
    sq_norm_std: np.ndarray
    sq_norm_stderr: np.ndarray
    norm_mean: np.ndarray
    norm_std: np.ndarray
    norm_stderr: np.ndarray
    profile: np.ndarray
    estimator_stderr: np.ndarray
    sq_norm_total: float
    fits: List[TheoryFit]
    curves: List[TheoryCurve]


@dataclasses.dataclass
class Tokenization:
    """What Tokenize answered: the ids, per id the bytes [start, end) of the text it came from
    (an (n, 2) array; empty when ids were decoded), the decoded text, and the tokenizer's
    end-of-sequence id when it names one."""
    token_ids: np.ndarray
    offsets: np.ndarray
    text: str
    eos_token_id: Optional[int]

    @classmethod
    def from_proto(cls, message: model_service_pb2.TokenizeResponse) -> "Tokenization":
        offsets = np.array([(o.start, o.end) for o in message.offsets], dtype=np.int64).reshape(-1, 2)
        return cls(token_ids=np.array(message.token_ids, dtype=np.int64), offsets=offsets, text=message.text,
                   eos_token_id=message.eos_token_id if message.HasField("eos_token_id") else None)
