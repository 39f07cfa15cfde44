"""posbias: a Python client of the posbias server (transformer position bias, over gRPC).

    import posbias

    with posbias.Client("127.0.0.1:50051") as client:
        rho = client.evaluate_continuum(24, alpha=0.5, grid=(1e-6, 1, 200))   # numpy arrays
        model = client.register_model("tiny", preset="gpt2-tiny", seed=1)
        job = client.submit_jacobian("tiny", 64, samples=4)
        job.wait()                                                             # progress bar
        result = job.result()                                                  # positions, profiles, fits

Every RPC of proto/posbias/v1/ is a method of Client (snake case); results are dataclasses with
numpy arrays (posbias.ContinuumResult, posbias.JobResult, ...); every failed call raises a
posbias.Error subclass carrying the server's code, reason, field, value and allowed range.
"""

from posbias._client import DEFAULT_ADDRESS, Client
from posbias._errors import (AbortedError, AlreadyExistsError, CancelledError, DataLossError,
                             DeadlineExceededError, Error, FailedPreconditionError, InternalError,
                             InvalidArgumentError, NotFoundError, OutOfRangeError, PermissionDeniedError,
                             ResourceExhaustedError, UnauthenticatedError, UnavailableError, UnimplementedError,
                             UnknownError, error_class)
from posbias._jobs import TERMINAL_STATES, Job
from posbias._results import JobResult
from posbias._types import (BoundarySpike, BranchRatios, ContinuumResult, DiscreteResult, ExportedModel, Failure,
                            FitResult, JobProgress, LayerProfile, Metrics, Model, ModelComparison, ModelConfig, ModelFit,
                            NeedleSweep, RecallSweep,
                            PathwayComparison, Preset, ProfileSummary, Quantile, RidgePoint, TheoryCurve, TheoryFit,
                            Tokenization)

__version__ = "0.1.0"

__all__ = [
    "Client", "DEFAULT_ADDRESS", "Job", "TERMINAL_STATES", "JobResult",
    "Error", "error_class", "AbortedError", "AlreadyExistsError", "CancelledError", "DataLossError",
    "DeadlineExceededError", "FailedPreconditionError", "InternalError", "InvalidArgumentError", "NotFoundError",
    "OutOfRangeError", "PermissionDeniedError", "ResourceExhaustedError", "UnauthenticatedError",
    "UnavailableError", "UnimplementedError", "UnknownError",
    "BranchRatios", "ContinuumResult", "DiscreteResult", "ExportedModel", "Failure", "FitResult", "JobProgress",
    "BoundarySpike", "LayerProfile", "Metrics", "Model", "ModelComparison", "ModelConfig", "ModelFit", "PathwayComparison", "Preset",
    "NeedleSweep", "ProfileSummary", "RecallSweep",
    "Quantile",
    "RidgePoint", "TheoryCurve", "TheoryFit",
    "Tokenization",
]
