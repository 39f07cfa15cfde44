"""A finished job's result, assembled from every page of GetJobResult."""

from __future__ import annotations

import dataclasses
import json
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np
from google.protobuf import json_format

from posbias._convert import enum_name, floats, ints, optional
from posbias._types import (BoundarySpike, BranchRatios, LayerProfile, ModelComparison, NeedleSweep, Metrics, RecallSweep,
                            PathwayComparison, TheoryCurve, TheoryFit)
from posbias.v1 import common_pb2, job_service_pb2

STATS = ["sq_norm_mean", "sq_norm_std", "sq_norm_stderr", "norm_mean", "norm_std", "norm_stderr", "profile",
         "estimator_stderr"]


class _ProfilePages:
    """One JacobianNormProfile (the job's, or one layer's) over several pages: per-position
    arrays are concatenated, job-level parts (fits, totals, curve metrics) taken from page one."""

    def __init__(self, first: job_service_pb2.JacobianNormProfile) -> None:
        self.layer = first.layer
        self.sq_norm_total = first.stats.sq_norm_total
        self.fits = [TheoryFit.from_proto(f) for f in first.theory.fits]
        self.arrays: Dict[str, List[float]] = {name: [] for name in STATS}
        self.curves: Dict[Tuple[int, int], Tuple[Any, List[float]]] = {}
        for curve in first.theory.curves:
            self.curves[(curve.model, curve.alpha_source)] = (curve, [])

    def add(self, page: job_service_pb2.JacobianNormProfile) -> None:
        for name in STATS:
            self.arrays[name].extend(getattr(page.stats, name))
        for curve in page.theory.curves:
            key = (curve.model, curve.alpha_source)
            if key not in self.curves:
                self.curves[key] = (curve, [])
            self.curves[key][1].extend(curve.profile)

    def build(self) -> LayerProfile:
        curves = []
        for curve, profile in self.curves.values():
            routing = curve.routing
            schedule = routing.alpha_schedule.alpha if routing.WhichOneof("attention_weight") == "alpha_schedule" \
                else None
            curves.append(TheoryCurve(
                model=enum_name(common_pb2.ProfileModel, curve.model),
                alpha_source=enum_name(job_service_pb2.TheoryAlphaSource, curve.alpha_source),
                depth=routing.depth or (len(schedule) if schedule is not None else 0),
                alpha=routing.alpha if routing.WhichOneof("attention_weight") == "alpha" else None,
                alpha_schedule=floats(schedule) if schedule is not None else None,
                profile=floats(profile), metrics=Metrics.from_proto(curve.metrics)))
        return LayerProfile(layer=self.layer, **{n: floats(v) for n, v in self.arrays.items()},
                            sq_norm_total=self.sq_norm_total, fits=self.fits, curves=curves)


@dataclasses.dataclass
class JobResult:
    """The result of a SUCCEEDED Jacobian-norm job, every page of GetJobResult joined.

    Per-position arrays are parallel to `positions` (1-based, increasing, within 1..T):
    `sq_norm_mean` / `_std` / `_stderr` of ||dy/de_j||_F^2 over samples, the same of the norms,
    `profile` (sq_norm_mean normalized to sum 1 over 1..T: what the theory is compared with) and,
    for Hutchinson jobs, `estimator_stderr`. `fits` are the theory fits (TheoryFit, one per model),
    `curves` the theory predictions on the same positions. `report` is the complete JSON report
    (the document `posbias-measure --format json` and `posbias jobs result --format json` print).

    With include_raw_samples, `raw_sq_norm` has shape (samples, layers, positions) for the samples
    `raw_samples` and layers `raw_layers` (layer 0 is the output y); with include_token_ids,
    `token_ids` has shape (samples, positions) and `next_token_ids` one id per sample (LOG_PROB).

    compare_pathways jobs: `pathways` (PathwayComparison: the value pathway beside the full one,
    with the score and interference shares); else None. Text inputs: `document_starts`, per sample
    the 1-based positions where its documents (or its needle) begin; `boundary_spikes`, the spike
    ratio (of the mean profile) at each position where samples start a document, and
    `boundary_spike_stats` the same spikes with the per-sample mean, standard deviation and
    standard error of the ratio (BoundarySpike); NEEDLE inputs: `needle_sweep` (NeedleSweep, per
    depth the needle span's share and the filler-alone baseline), else None. Comparison jobs
    (`versus`): `comparison` (ModelComparison: every model's profile, band shares and paired log
    ratios against the job's model; its plot() overlays the profiles), else None. Recall inputs:
    `recall` (RecallSweep: the job's model's accuracy by depth beside the queried pair's Jacobian
    share), and for comparisons `recall_correlation` (r, low, high, cells) over every model's depths.
    """
    job_id: str
    sequence_length: int
    target_position: int
    samples: int
    output: str
    method: str
    num_layers: int
    positions: np.ndarray
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
    layer_profiles: List[LayerProfile]
    branch_ratios: BranchRatios
    log_prob_mean: Optional[float]
    log_prob_std: Optional[float]
    raw_samples: Optional[np.ndarray]
    raw_layers: Optional[np.ndarray]
    raw_sq_norm: Optional[np.ndarray]
    token_ids: Optional[np.ndarray]
    next_token_ids: Optional[np.ndarray]
    provenance: Dict[str, Any]
    pathways: Optional[PathwayComparison]
    document_starts: List[np.ndarray]
    boundary_spikes: Dict[int, float]
    boundary_spike_stats: Dict[int, BoundarySpike]
    needle_sweep: Optional[NeedleSweep]
    comparison: Optional[ModelComparison]
    recall: Optional[RecallSweep]
    recall_correlation: Optional[Tuple[float, float, float, int]]
    report: Dict[str, Any] = dataclasses.field(repr=False)
    pages: List[job_service_pb2.GetJobResultResponse] = dataclasses.field(default_factory=list, repr=False,
                                                                          compare=False)

    @classmethod
    def from_pages(cls, pages: Sequence[job_service_pb2.GetJobResultResponse]) -> "JobResult":
        """Joins the pages of one GetJobResult request (in order)."""
        first = pages[0]
        result = first.jacobian_norm
        main = _ProfilePages(result.profile)
        layers = [_ProfilePages(p) for p in result.layer_profiles]
        positions: List[int] = []
        raw: Dict[Tuple[int, int], List[float]] = {}
        tokens: Dict[int, List[int]] = {}
        next_tokens: Dict[int, Optional[int]] = {}
        for page in pages:
            part = page.jacobian_norm
            positions.extend(part.positions)
            main.add(part.profile)
            for accumulator, layer in zip(layers, part.layer_profiles):
                accumulator.add(layer)
            for sample in part.raw_samples:
                raw.setdefault((sample.sample, sample.layer), []).extend(sample.sq_norm)
            for sample in part.sample_tokens:
                tokens.setdefault(sample.sample, []).extend(sample.token_ids)
                next_tokens[sample.sample] = optional(sample, "next_token_id")
        profile = main.build()
        ratios = result.branch_ratios
        raw_samples = raw_layers = raw_sq_norm = None
        if raw:
            raw_samples = ints(sorted({s for s, _ in raw}))
            raw_layers = ints(sorted({layer for _, layer in raw}))
            raw_sq_norm = np.array([[raw.get((s, layer), []) for layer in raw_layers] for s in raw_samples],
                                   dtype=np.float64)
        token_ids = next_token_ids = None
        if tokens:
            token_ids = np.array([tokens[s] for s in sorted(tokens)], dtype=np.int64)
            if any(v is not None for v in next_tokens.values()):
                next_token_ids = np.array([next_tokens[s] if next_tokens[s] is not None else -1
                                           for s in sorted(tokens)], dtype=np.int64)
        report = json.loads(first.report_json) if first.report_json else {}
        return cls(
            job_id=first.id, sequence_length=result.sequence_length, target_position=result.target_position,
            samples=result.samples, output=enum_name(job_service_pb2.JacobianOutput, result.output),
            method=enum_name(job_service_pb2.JacobianMethod, result.method), num_layers=result.num_layers,
            positions=ints(positions), sq_norm_mean=profile.sq_norm_mean, sq_norm_std=profile.sq_norm_std,
            sq_norm_stderr=profile.sq_norm_stderr, norm_mean=profile.norm_mean, norm_std=profile.norm_std,
            norm_stderr=profile.norm_stderr, profile=profile.profile, estimator_stderr=profile.estimator_stderr,
            sq_norm_total=profile.sq_norm_total, fits=profile.fits, curves=profile.curves,
            layer_profiles=[layer.build() for layer in layers],
            branch_ratios=BranchRatios(layer=ints(r.layer for r in ratios),
                                       attention_mean=floats(r.attention_mean for r in ratios),
                                       attention_std=floats(r.attention_std for r in ratios),
                                       mlp_mean=floats(r.mlp_mean for r in ratios),
                                       mlp_std=floats(r.mlp_std for r in ratios)),
            log_prob_mean=optional(result, "log_prob_mean"), log_prob_std=optional(result, "log_prob_std"),
            raw_samples=raw_samples, raw_layers=raw_layers, raw_sq_norm=raw_sq_norm, token_ids=token_ids,
            next_token_ids=next_token_ids,
            provenance=json_format.MessageToDict(result.provenance, preserving_proto_field_name=True),
            pathways=PathwayComparison.from_pages([p.jacobian_norm.pathways for p in pages])
            if result.HasField("pathways") else None,
            document_starts=[ints(marks.positions) for marks in result.document_starts],
            boundary_spikes={spike.position: spike.ratio for spike in result.boundary_spikes},
            boundary_spike_stats={spike.position: BoundarySpike.from_proto(spike) for spike in result.boundary_spikes},
            needle_sweep=NeedleSweep.from_proto(result.needle_sweep) if len(result.needle_sweep) else None,
            comparison=ModelComparison.from_pages([p.jacobian_norm.comparison for p in pages])
            if len(result.comparison) else None,
            recall=RecallSweep.from_proto(result.recall) if result.HasField("recall") else None,
            recall_correlation=RecallSweep.correlation(result.recall_correlation)
            if result.HasField("recall_correlation") else None,
            report=report, pages=list(pages))

    def fit(self, model: str = "coherent") -> TheoryFit:
        """The theory fit of "coherent" or "incoherent" (KeyError when there is none)."""
        for fit in self.fits:
            if fit.model == model:
                return fit
        raise KeyError("no %s fit in the result of %s" % (model, self.job_id))

    def curve(self, model: str = "coherent", alpha_source: str = "fitted") -> TheoryCurve:
        """The theory curve of a model ("coherent", "incoherent") and alpha source ("fitted",
        "measured"); KeyError when the result has none."""
        for curve in self.curves:
            if curve.model == model and curve.alpha_source == alpha_source:
                return curve
        raise KeyError("no %s curve with %s alpha in the result of %s" % (model, alpha_source, self.job_id))

    def plot(self, ax: Any = None) -> Any:
        """Draws the measured normalized profile and the fitted theory curves on a log scale with
        matplotlib (installed separately); returns the Axes. ax: where to draw (default: a new
        figure's axes)."""
        try:
            import matplotlib.pyplot as plt
        except ImportError as error:
            raise ImportError("JobResult.plot needs matplotlib: pip install matplotlib") from error
        if ax is None:
            _, ax = plt.subplots(figsize=(7, 4.5))
        ax.plot(self.positions, self.profile, "o", markersize=3, label="measured")
        for curve in self.curves:
            if curve.alpha_source != "fitted" or curve.profile.size != self.positions.size:
                continue
            label = "%s, H %d, alpha %.3f" % (curve.model, curve.depth, curve.alpha or 0.0)
            ax.plot(self.positions, curve.profile, "--", label=label)
        ax.set_yscale("log")
        ax.set_xlabel("position j")
        ax.set_ylabel("normalized ||dy/de_j||^2")
        ax.set_title("job %s (L %d, %d samples)" % (self.job_id, self.sequence_length, self.samples))
        ax.legend()
        return ax
