"""posbias.Client: every RPC of the posbias v1 API as a Python method."""

from __future__ import annotations

import hashlib
import ipaddress
import json
import os
import warnings
from typing import (IO, Any, Callable, Dict, Iterable, Iterator, List, Mapping, Optional, Sequence, Tuple,
                    TypeVar, Union)

import grpc
import numpy as np

from posbias._convert import EnumLike, enum_name, enum_value, enum_values
from posbias._errors import DataLossError, Error, error_from_rpc  # noqa: F401 (Error: __all__)
from posbias._jobs import Job
from posbias._progress import Progress, ProgressMode, resolve_mode
from posbias._results import JobResult
from posbias._types import (ContinuumResult, DiscreteResult, ExportedModel, FitResult, Model, Preset, Tokenization,
                            ProfileSummary)
from posbias.v1 import (common_pb2, density_service_pb2, density_service_pb2_grpc, job_service_pb2,
                        job_service_pb2_grpc, model_service_pb2, model_service_pb2_grpc, options_pb2)

DEFAULT_ADDRESS = "127.0.0.1:50051"
CHUNK_BYTES = 1 << 20            # the largest chunk UploadModel accepts (1 MiB)
_DEFAULT = object()              # "the client's timeout" (None means no deadline)

T = TypeVar("T")
Floats = Union[Sequence[float], np.ndarray]

# Names the CLI uses, accepted besides the enum names.
OUTPUT_ALIASES = {"final": "final_hidden", "layers": "layer_sweep", "logprob": "log_prob", "loss": "loss_gradient"}
QUANTITY_ALIASES = {"squared-norm": "squared_norm", "sq_norm": "squared_norm"}
INPUT_KINDS = ("random", "gaussian", "tokens")
ABLATIONS = ("no_position_encoding", "uniform_attention", "no_mlp")
HEALTH_STATUSES = {0: "unknown", 1: "serving", 2: "not_serving", 3: "service_unknown"}


def _read(path: Optional[str]) -> Optional[bytes]:
    if path is None:
        return None
    with open(path, "rb") as f:
        return f.read()


def _is_loopback(address: str) -> bool:
    host = address.rsplit(":", 1)[0].strip("[]")
    if host in ("localhost", ""):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return address.startswith("unix:")


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def _health_request(service: str) -> bytes:
    """grpc.health.v1.HealthCheckRequest{service} on the wire (field 1, length-delimited): the
    health proto is not part of this package, and one string field needs no generated code."""
    data = service.encode("utf-8")
    return (b"\x0a" + _varint(len(data)) + data) if data else b""


def _health_status(data: bytes) -> int:
    """The `status` (field 1, varint) of a grpc.health.v1.HealthCheckResponse."""
    i, status = 0, 0
    while i < len(data):
        key, shift = 0, 0
        while True:
            byte = data[i]
            i += 1
            key |= (byte & 0x7F) << shift
            shift += 7
            if not byte & 0x80:
                break
        if key & 7 != 0:  # Not a varint: no other field is defined, stop reading.
            break
        value, shift = 0, 0
        while True:
            byte = data[i]
            i += 1
            value |= (byte & 0x7F) << shift
            shift += 7
            if not byte & 0x80:
                break
        if key >> 3 == 1:
            status = value
    return status


def _routing(depth: Optional[int], alpha: Optional[float], alpha_schedule: Optional[Floats]) -> common_pb2.RoutingModel:
    if alpha is not None and alpha_schedule is not None:
        raise ValueError("give alpha or alpha_schedule, not both")
    model = common_pb2.RoutingModel(depth=int(depth or 0))
    if alpha_schedule is not None:
        model.alpha_schedule.alpha.extend(float(a) for a in alpha_schedule)
    elif alpha is not None:
        model.alpha = float(alpha)
    return model


def _summary_options(leading: Optional[float], trailing: Optional[float],
                     band_positions: Optional[Tuple[int, int]],
                     quantile_levels: Optional[Floats]) -> Optional[density_service_pb2.SummaryOptions]:
    if band_positions is not None and (leading is not None or trailing is not None):
        raise ValueError("give band fractions (leading, trailing) or band_positions, not both")
    if leading is None and trailing is None and band_positions is None and quantile_levels is None:
        return None
    options = density_service_pb2.SummaryOptions()
    if band_positions is not None:
        leading_end, trailing_start = band_positions
        options.band_positions.leading_end = int(leading_end)
        options.band_positions.trailing_start = int(trailing_start)
    elif leading is not None or trailing is not None:
        options.band_fractions.leading = 0.1 if leading is None else float(leading)
        options.band_fractions.trailing = 0.1 if trailing is None else float(trailing)
    if quantile_levels is not None:
        options.quantile_levels.extend(float(q) for q in quantile_levels)
    return options


def _set_fields(message: Any, values: Optional[Mapping[str, Any]], what: str) -> None:
    """Sets scalar fields of `message` from a mapping; an unknown key is a ValueError naming it."""
    for key, value in (values or {}).items():
        if key not in message.DESCRIPTOR.fields_by_name:
            raise ValueError("%s has no field %r: allowed %s" % (what, key, ", ".join(message.DESCRIPTOR.fields_by_name)))
        setattr(message, key, value)


def _ablations(values: Optional[Union[Iterable[str], Mapping[str, bool]]]) -> Optional[model_service_pb2.ModelAblations]:
    if values is None:
        return None
    if isinstance(values, str):
        values = [values]
    mapping = dict(values) if isinstance(values, Mapping) else {name: True for name in values}
    message = model_service_pb2.ModelAblations()
    _set_fields(message, {k.replace("-", "_"): bool(v) for k, v in mapping.items()}, "ablations")
    return message


def _pages(fetch: Callable[[str], Any], items: str) -> Iterator[Any]:
    """Every item of a paginated list: fetch(page_token) per page, following next_page_token."""
    token = ""
    while True:
        page = fetch(token)
        yield from getattr(page, items)
        token = page.next_page_token
        if not token:
            return


class Client:
    """A connection to a posbias server, with one method per RPC.

    Args:
        address: "HOST:PORT" of the server's gRPC port (default: the environment's POSBIAS_SERVER, else
            127.0.0.1:50051, as the CLI).
        token: sent as `authorization: Bearer <token>` metadata on every call (servers that check
            tokens need TLS for it to be secret: without TLS the token travels in plain text).
        tls: connect with TLS. Also on when ca_file, cert_file or key_file is given.
        ca_file: PEM root certificates to verify the server with (default: the system's roots).
        cert_file, key_file: PEM client certificate chain and private key, for mutual TLS (both or
            neither).
        tls_server_name: the name the server's certificate must carry when it differs from the host
            in `address` (the grpc.ssl_target_name_override channel option).
        timeout: deadline of each unary call in seconds (None: no deadline). Streams (watch,
            uploads, exports) have no deadline unless their method is given one.
        options: extra gRPC channel options, as (name, value) pairs.

    A Client is a context manager (the channel is closed on exit) and may be shared by threads.
    Every failed call raises a posbias.Error subclass (see posbias.Error).
    """

    def __init__(self, address: Optional[str] = None, *, token: Optional[str] = None, tls: bool = False,
                 ca_file: Optional[str] = None, cert_file: Optional[str] = None, key_file: Optional[str] = None,
                 tls_server_name: Optional[str] = None, timeout: Optional[float] = 60,
                 options: Optional[Sequence[Tuple[str, Any]]] = None) -> None:
        if (cert_file is None) != (key_file is None):
            raise ValueError("cert_file and key_file go together (mutual TLS): give both or neither")
        # As the CLI: the environment's POSBIAS_SERVER, else the local default.
        address = address or os.environ.get("POSBIAS_SERVER") or DEFAULT_ADDRESS
        self.address = address
        self.timeout = timeout
        self.tls = bool(tls or ca_file or cert_file or key_file)
        self._metadata: Tuple[Tuple[str, str], ...] = ()
        if token is not None:
            if not token or any(c in token for c in "\r\n"):
                raise ValueError("token must be a non-empty string without line breaks")
            self._metadata = (("authorization", "Bearer " + token),)
            if not self.tls and not _is_loopback(address):
                warnings.warn("posbias.Client: the token is sent without TLS to %s" % address, stacklevel=2)
        channel_options: List[Tuple[str, Any]] = [("grpc.max_receive_message_length", -1),
                                                  ("grpc.max_send_message_length", -1)]
        if tls_server_name:
            channel_options.append(("grpc.ssl_target_name_override", tls_server_name))
        channel_options += list(options or ())
        if self.tls:
            credentials = grpc.ssl_channel_credentials(root_certificates=_read(ca_file),
                                                       private_key=_read(key_file),
                                                       certificate_chain=_read(cert_file))
            self._channel = grpc.secure_channel(address, credentials, options=channel_options)
        else:
            if tls_server_name:
                raise ValueError("tls_server_name needs tls=True")
            self._channel = grpc.insecure_channel(address, options=channel_options)
        self._density = density_service_pb2_grpc.DensityServiceStub(self._channel)
        self._models = model_service_pb2_grpc.ModelServiceStub(self._channel)
        self._jobs = job_service_pb2_grpc.JobServiceStub(self._channel)
        self._health = self._channel.unary_unary("/grpc.health.v1.Health/Check",
                                                 request_serializer=None, response_deserializer=None)

    # -------------------------------------------------------------------------------- plumbing

    def close(self) -> None:
        """Closes the channel; calls after this fail."""
        self._channel.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return "posbias.Client(%r, tls=%s)" % (self.address, self.tls)

    def _deadline(self, timeout: Any) -> Optional[float]:
        return self.timeout if timeout is _DEFAULT else timeout

    def _call(self, method: Callable[..., T], request: Any, timeout: Any = _DEFAULT) -> T:
        """One unary call; a failure becomes the matching posbias.Error."""
        try:
            return method(request, timeout=self._deadline(timeout), metadata=self._metadata)
        except grpc.RpcError as error:
            raise error_from_rpc(error) from None

    def _stream(self, method: Callable[..., Any], request: Any, timeout: Optional[float]) -> Iterator[Any]:
        """The messages of a server stream; the call is cancelled when the iterator is closed."""
        call = method(request, timeout=timeout, metadata=self._metadata)
        try:
            for message in call:
                yield message
        except grpc.RpcError as error:
            raise error_from_rpc(error) from None
        finally:
            call.cancel()

    def health(self, service: str = "", timeout: Any = _DEFAULT) -> str:
        """The server's health (grpc.health.v1.Health/Check): "serving", "not_serving", "unknown"
        or "service_unknown"; service "" is the whole server, or e.g. "posbias.v1.JobService"."""
        response = self._call(self._health, _health_request(service), timeout)
        return HEALTH_STATUSES.get(_health_status(response), "unknown")

    # ---------------------------------------------------------------------------- DensityService

    def evaluate_continuum(self, depth: Optional[int], alpha: Optional[float] = None,
                           alpha_schedule: Optional[Floats] = None, x: Optional[Floats] = None,
                           grid: Optional[Union[Tuple[Any, ...], Mapping[str, Any]]] = None,
                           quantities: Optional[Iterable[EnumLike]] = None,
                           timeout: Any = _DEFAULT) -> ContinuumResult:
        """The continuum profile rho_H(x) (EvaluateContinuum): density, log-density, CDF and CCDF.

        depth: H (with alpha_schedule: its length, or None). alpha: constant attention weight in
        [0, 1]; alpha_schedule: per-layer weights instead. x: points in (0, 1]; or grid:
        (start, stop, count) or (start, stop, count, "log" | "linear") (default log), or a mapping
        with those keys. quantities: a subset of "density", "log_density", "cdf", "ccdf" (default
        all); the others come back empty."""
        request = density_service_pb2.EvaluateContinuumRequest(model=_routing(depth, alpha, alpha_schedule))
        if x is not None and grid is not None:
            raise ValueError("give x or grid, not both")
        if x is not None:
            request.point_list.x.extend(float(v) for v in np.asarray(x, dtype=np.float64).ravel())
        elif grid is not None:
            values = dict(grid) if isinstance(grid, Mapping) else dict(zip(("start", "stop", "count", "spacing"), grid))
            spacing = values.pop("spacing", None)
            _set_fields(request.grid, values, "grid")
            if spacing is not None:
                request.grid.spacing = enum_value(density_service_pb2.GridSpacing, spacing, "grid.spacing")
        request.quantities.extend(enum_values(density_service_pb2.ContinuumQuantity, quantities, "quantities"))
        return ContinuumResult.from_proto(self._call(self._density.EvaluateContinuum, request, timeout))

    def evaluate_discrete(self, depth: Optional[int], length: int, alpha: Optional[float] = None,
                          alpha_schedule: Optional[Floats] = None, *, positions: Optional[Iterable[int]] = None,
                          stride: Optional[Union[range, Tuple[int, int, int]]] = None,
                          profiles: Optional[Iterable[EnumLike]] = None, summaries_only: bool = False,
                          leading: Optional[float] = None, trailing: Optional[float] = None,
                          band_positions: Optional[Tuple[int, int]] = None,
                          quantile_levels: Optional[Floats] = None, timeout: Any = _DEFAULT) -> DiscreteResult:
        """The exact profile at length L (EvaluateDiscrete): coherent row and incoherent prediction.

        positions: 1-based positions to return; or stride: (start, stop, step) with stop inclusive,
        or a Python range (range(1, L + 1, 64)); neither: all positions 1..L. profiles: "coherent",
        "incoherent" or both (default). summaries_only: no arrays, only the summaries (any L).
        leading / trailing (band fractions) or band_positions (leading_end, trailing_start), and
        quantile_levels: the summaries' options."""
        request = density_service_pb2.EvaluateDiscreteRequest(model=_routing(depth, alpha, alpha_schedule),
                                                              length=int(length), summaries_only=summaries_only)
        if positions is not None and stride is not None:
            raise ValueError("give positions or stride, not both")
        if positions is not None:
            request.positions.position.extend(int(p) for p in positions)
        elif stride is not None:
            if isinstance(stride, range):
                if len(stride) == 0 or stride.step < 1:
                    raise ValueError("stride %r selects no increasing positions" % (stride,))
                stride = (stride.start, stride[-1], stride.step)
            start, stop, step = stride
            request.stride.start, request.stride.stop, request.stride.step = int(start), int(stop), int(step)
        wanted = enum_values(common_pb2.ProfileModel, profiles, "profiles")
        request.profiles.extend(wanted)
        options = _summary_options(leading, trailing, band_positions, quantile_levels)
        if options is not None:
            request.summary_options.CopyFrom(options)
        return DiscreteResult.from_proto(self._call(self._density.EvaluateDiscrete, request, timeout), wanted)

    def summarize_profile(self, measured: Optional[Floats] = None, *, depth: Optional[int] = None,
                          alpha: Optional[float] = None, alpha_schedule: Optional[Floats] = None,
                          length: int = 0, profile: EnumLike = "coherent", leading: Optional[float] = None,
                          trailing: Optional[float] = None, band_positions: Optional[Tuple[int, int]] = None,
                          quantile_levels: Optional[Floats] = None, timeout: Any = _DEFAULT) -> ProfileSummary:
        """Summaries of a measured profile or of a theory one (SummarizeProfile).

        measured: the per-position values j = 1..L. Or a theory: depth with alpha or
        alpha_schedule, length (0 = the continuum) and profile ("coherent" or "incoherent").
        leading / trailing, band_positions and quantile_levels as in evaluate_discrete."""
        request = density_service_pb2.SummarizeProfileRequest()
        if measured is not None:
            if depth is not None or alpha is not None or alpha_schedule is not None:
                raise ValueError("give a measured profile or a theory (depth, alpha), not both")
            request.measured.values.extend(float(v) for v in np.asarray(measured, dtype=np.float64).ravel())
        elif depth is not None or alpha is not None or alpha_schedule is not None:
            request.theory.model.CopyFrom(_routing(depth, alpha, alpha_schedule))
            request.theory.length = int(length)
            request.theory.profile = enum_value(common_pb2.ProfileModel, profile, "profile")
        options = _summary_options(leading, trailing, band_positions, quantile_levels)
        if options is not None:
            request.options.CopyFrom(options)
        return ProfileSummary.from_proto(self._call(self._density.SummarizeProfile, request, timeout).summary)

    def fit_profile(self, measured: Floats, *, quantity: EnumLike = "squared_norm",
                    models: Optional[Iterable[EnumLike]] = None,
                    depth: Optional[Union[int, Tuple[int, int]]] = None,
                    depth_range: Optional[Tuple[int, int]] = None, include_profiles: bool = False,
                    timeout: Any = _DEFAULT) -> FitResult:
        """Fits the coherent and/or incoherent model to a measured profile (FitProfile).

        measured: values j = 1..L; quantity: what they are, "squared_norm" (default), "norm" or
        "weight". models: "coherent", "incoherent" or both (default). depth: a fixed depth (the
        server's default is 24), or depth_range=(min, max) (or depth=(min, max)) to fit an
        effective depth too. include_profiles: return each fitted profile."""
        if isinstance(depth, tuple):
            depth, depth_range = None, depth if depth_range is None else depth_range
        request = density_service_pb2.FitProfileRequest(
            quantity=enum_value(common_pb2.ProfileQuantity, quantity, "quantity", QUANTITY_ALIASES),
            include_profiles=include_profiles)
        request.measured.values.extend(float(v) for v in np.asarray(measured, dtype=np.float64).ravel())
        request.models.extend(enum_values(common_pb2.ProfileModel, models, "models"))
        if depth is not None and depth_range is not None:
            raise ValueError("give depth or depth_range, not both")
        if depth is not None:
            request.depth.fixed = int(depth)
        elif depth_range is not None:
            request.depth.range.min, request.depth.range.max = (int(v) for v in depth_range)
        return FitResult.from_proto(self._call(self._density.FitProfile, request, timeout))

    # ------------------------------------------------------------------------------ ModelService

    def tokenize(self, model: str, text: Optional[str] = None, token_ids: Optional[Sequence[int]] = None, *,
                 special_tokens_as_text: bool = False, timeout: Any = _DEFAULT) -> Tokenization:
        """Text to token ids with byte offsets, or ids back to text, with the model's own tokenizer
        (Tokenize; Model.has_tokenizer). Give exactly one of `text` (str, or bytes taken as UTF-8)
        and `token_ids`."""
        if (text is None) == (token_ids is None):
            raise ValueError("give exactly one of text and token_ids")
        request = model_service_pb2.TokenizeRequest(model=model, special_tokens_as_text=special_tokens_as_text)
        if text is not None:
            request.text = text.decode("utf-8", "replace") if isinstance(text, bytes) else text
        else:
            request.token_ids.ids.extend(int(i) for i in token_ids)
        return Tokenization.from_proto(self._call(self._models.Tokenize, request, timeout))

    def list_presets(self, timeout: Any = _DEFAULT) -> List[Preset]:
        """The presets this server can build (ListPresets), ordered by name."""
        response = self._call(self._models.ListPresets, model_service_pb2.ListPresetsRequest(), timeout)
        return [Preset.from_proto(p) for p in response.presets]

    def register_model(self, name: str, preset: Optional[str] = None, checkpoint: Optional[str] = None,
                       overrides: Optional[Mapping[str, Any]] = None, seed: Optional[int] = None, *,
                       init_recipe: Optional[str] = None, tokenizer_path: Optional[str] = None,
                       config_json: Optional[Union[str, Mapping[str, Any]]] = None,
                       torchscript: Optional[str] = None, torchscript_shape: Optional[Mapping[str, int]] = None,
                       ablations: Optional[Union[Iterable[str], Mapping[str, bool]]] = None,
                       labels: Optional[Mapping[str, str]] = None, request_id: Optional[str] = None,
                       timeout: Any = _DEFAULT) -> Model:
        """Registers a model (RegisterModel) and returns it once loaded (READY; a load error raises).

        One source: preset (a ListPresets name) with architecture `overrides` (ModelConfig field
        names: num_layers, hidden_size, num_heads, num_kv_heads, mlp_width, vocab_size,
        max_positions, rope_theta, tie_embeddings, initializer_range, cesaro_alpha), `seed` and
        `init_recipe` ("hf" or "normal") and optionally `tokenizer_path` (a directory under the
        server's model root with tokenizer files, for text inputs); or checkpoint (a path under the server's model root,
        optionally with `config_json` text or dict); or torchscript (a path) with
        torchscript_shape (hidden_size, max_positions, num_layers). ablations: names among
        "no_position_encoding", "uniform_attention", "no_mlp" (or a mapping to bools). labels
        and request_id (idempotent retries) as in the API."""
        sources = [s for s in (preset, checkpoint, torchscript) if s is not None]
        if len(sources) != 1:
            raise ValueError("give exactly one source: preset, checkpoint or torchscript")
        request = model_service_pb2.RegisterModelRequest(name=name, labels=dict(labels or {}),
                                                         request_id=request_id or "")
        if preset is not None:
            request.preset.preset = preset
            _set_fields(request.preset.overrides, overrides, "overrides")
            request.preset.SetInParent()
            if seed is not None:
                request.preset.init_seed = int(seed)
            if init_recipe is not None:
                request.preset.init_recipe = init_recipe
            if tokenizer_path is not None:
                request.preset.tokenizer_path = tokenizer_path
        elif overrides is not None or seed is not None or init_recipe is not None or tokenizer_path is not None:
            raise ValueError("overrides, seed, init_recipe and tokenizer_path apply to presets only")
        if checkpoint is not None:
            request.checkpoint.path = checkpoint
            if config_json is not None:
                request.checkpoint.config_json = config_json if isinstance(config_json, str) else json.dumps(config_json)
        if torchscript is not None:
            request.torchscript.path = torchscript
            _set_fields(request.torchscript.shape, torchscript_shape, "torchscript_shape")
        ablation_message = _ablations(ablations)
        if ablation_message is not None:
            request.ablations.CopyFrom(ablation_message)
        return Model.from_proto(self._call(self._models.RegisterModel, request, timeout))

    def upload_model(self, path: str, name: str, progress: ProgressMode = True, *,
                     config: Optional[Union[str, Mapping[str, Any]]] = None, format: str = "safetensors",
                     torchscript_shape: Optional[Mapping[str, int]] = None,
                     ablations: Optional[Union[Iterable[str], Mapping[str, bool]]] = None,
                     labels: Optional[Mapping[str, str]] = None, request_id: Optional[str] = None,
                     chunk_bytes: int = CHUNK_BYTES, timeout: Optional[float] = None,
                     file: Optional[IO[str]] = None) -> Model:
        """Uploads a local model file (UploadModel) and returns the model once loaded.

        path: a .safetensors file (format="torchscript" is refused by the server with
        UNIMPLEMENTED: register a TorchScript module from the server's model root with
        register_model instead). config: the Hugging Face config.json as a dict, as JSON text or
        as a path; default: config.json next to the file. A bad config is refused before any
        weights are sent. The SHA-256 is computed
        first and checked by the server. progress: a bar over the bytes sent (True, "tqdm",
        "plain" or False; to `file`, default stderr). timeout: deadline of the whole upload in
        seconds (default none). Ctrl-C cancels the upload; nothing is registered then."""
        file_format = enum_value(model_service_pb2.ModelFileFormat, format, "format")
        if not 1 <= chunk_bytes <= CHUNK_BYTES:
            raise ValueError("chunk_bytes = %d is invalid: allowed 1..%d" % (chunk_bytes, CHUNK_BYTES))
        size = os.path.getsize(path)
        digest = hashlib.sha256()
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(CHUNK_BYTES), b""):
                digest.update(block)
        metadata = model_service_pb2.UploadModelMetadata(
            name=name, format=file_format, total_bytes=size, sha256=digest.hexdigest(),
            file_name=os.path.basename(path), labels=dict(labels or {}), request_id=request_id or "")
        if file_format == model_service_pb2.MODEL_FILE_FORMAT_SAFETENSORS:
            metadata.config_json = self._config_text(path, config)
        else:
            _set_fields(metadata.torchscript_shape, torchscript_shape, "torchscript_shape")
            metadata.torchscript_shape.SetInParent()
        ablation_message = _ablations(ablations)
        if ablation_message is not None:
            metadata.ablations.CopyFrom(ablation_message)
        mode = resolve_mode(progress)
        bar = Progress(size, "upload %s" % name, mode, file, bytes_unit=True) if mode else None

        def messages() -> Iterator[model_service_pb2.UploadModelRequest]:
            yield model_service_pb2.UploadModelRequest(metadata=metadata)
            sent = 0
            with open(path, "rb") as f:
                for block in iter(lambda: f.read(chunk_bytes), b""):
                    yield model_service_pb2.UploadModelRequest(chunk=block)
                    sent += len(block)
                    if bar is not None:
                        bar.update(sent)

        future = self._models.UploadModel.future(messages(), timeout=timeout, metadata=self._metadata)
        try:
            return Model.from_proto(future.result())
        except grpc.RpcError as error:
            raise error_from_rpc(error) from None
        except KeyboardInterrupt:
            future.cancel()
            raise
        finally:
            if bar is not None:
                bar.close()

    @staticmethod
    def _config_text(path: str, config: Optional[Union[str, Mapping[str, Any]]]) -> str:
        if isinstance(config, Mapping):
            return json.dumps(config)
        if isinstance(config, str) and config.lstrip().startswith("{"):
            return config
        config_path = config if config is not None else os.path.join(os.path.dirname(os.path.abspath(path)),
                                                                     "config.json")
        if not os.path.isfile(config_path):
            raise ValueError("a safetensors upload needs its config.json: pass config= (a dict, JSON text "
                             "or a path); %s does not exist" % config_path)
        with open(config_path, encoding="utf-8") as f:
            return f.read()

    def get_model(self, name: str, timeout: Any = _DEFAULT) -> Model:
        """One model (GetModel)."""
        return Model.from_proto(self._call(self._models.GetModel, model_service_pb2.GetModelRequest(name=name), timeout))

    def list_models(self, *, family: Optional[EnumLike] = None, state: Optional[EnumLike] = None,
                    label_selector: str = "", page_size: int = 0, timeout: Any = _DEFAULT) -> Iterator[Model]:
        """Every model (ListModels, all pages), ordered by name; family ("gpt2", "qwen2", "llama",
        "mistral", "gpt_neox", "cesaro", "torchscript"), state ("loading", "ready", "failed") and a label selector "k=v,k2=v2"
        filter. Pages are fetched as the iterator advances."""
        request = model_service_pb2.ListModelsRequest(page_size=page_size, label_selector=label_selector)
        if family is not None:
            request.family = enum_value(model_service_pb2.ModelFamily, family, "family")
        if state is not None:
            request.state = enum_value(model_service_pb2.ModelState, state, "state")

        def fetch(token: str) -> model_service_pb2.ListModelsResponse:
            request.page_token = token
            return self._call(self._models.ListModels, request, timeout)

        return (Model.from_proto(m) for m in _pages(fetch, "models"))

    def delete_model(self, name: str, force: bool = False, timeout: Any = _DEFAULT) -> List[str]:
        """Deletes a model (DeleteModel); force cancels the jobs that use it first. Returns the ids
        of the jobs cancelled that way."""
        request = model_service_pb2.DeleteModelRequest(name=name, force=force)
        return list(self._call(self._models.DeleteModel, request, timeout).cancelled_job_ids)

    def export_model(self, name: str, path: str, *, dtype: Optional[EnumLike] = None,
                     config_path: Optional[str] = None, progress: ProgressMode = False,
                     timeout: Optional[float] = None, file: Optional[IO[str]] = None) -> ExportedModel:
        """Writes a model's weights to a local file (ExportModel) and checks their SHA-256.

        path: the file to write, or an existing directory (then the server's suggested file name,
        "model.safetensors", inside it, with config.json beside it). config_path: where to write
        the Hugging Face config.json too (safetensors only). dtype: "float32", "bfloat16",
        "float16" (default: as stored). The file appears only complete and verified (a digest
        mismatch raises posbias.DataLossError and leaves nothing)."""
        request = model_service_pb2.ExportModelRequest(name=name)
        if dtype is not None:
            request.dtype = enum_value(common_pb2.ComputeDtype, dtype, "dtype")
        stream = self._stream(self._models.ExportModel, request, timeout)
        mode = resolve_mode(progress)
        bar = None
        partial = None
        try:
            first = next(stream, None)
            if first is None or first.WhichOneof("part") != "header":
                raise DataLossError("the export of %s did not start with a header" % name)
            header = first.header
            if os.path.isdir(path):
                if config_path is None and header.config_json:
                    config_path = os.path.join(path, "config.json")
                path = os.path.join(path, header.file_name or "model.safetensors")
            partial = path + ".part"
            digest = hashlib.sha256()
            received = 0
            bar = Progress(header.total_bytes, "export %s" % name, mode, file, bytes_unit=True) if mode else None
            with open(partial, "wb") as out:
                for message in stream:
                    chunk = message.chunk
                    out.write(chunk)
                    digest.update(chunk)
                    received += len(chunk)
                    if bar is not None:
                        bar.update(received)
            if received != header.total_bytes or digest.hexdigest() != header.sha256:
                raise DataLossError("the export of %s is damaged: %d of %d bytes, SHA-256 %s instead of %s"
                                    % (name, received, header.total_bytes, digest.hexdigest(), header.sha256))
            os.replace(partial, path)
            partial = None
        finally:
            stream.close()
            if bar is not None:
                bar.close()
            if partial is not None and os.path.exists(partial):
                os.remove(partial)
        if config_path is not None and header.config_json:
            with open(config_path, "w", encoding="utf-8") as f:
                f.write(header.config_json)
        return ExportedModel(path=path, sha256=header.sha256, total_bytes=header.total_bytes,
                             format=enum_name(model_service_pb2.ModelFileFormat, header.format),
                             file_name=header.file_name, config_json=header.config_json,
                             tensor_count=header.tensor_count,
                             config_path=config_path if header.config_json else None)

    # -------------------------------------------------------------------------------- JobService

    def submit_jacobian(self, model: str, length: int, samples: Optional[int] = None, method: EnumLike = "exact",
                        probes: Optional[int] = None, tokens: Optional[Union[Sequence[Sequence[int]], np.ndarray]] = None,
                        *, seed: Optional[int] = None, input: str = "random", stddev: Optional[float] = None,
                        next_token_ids: Optional[Sequence[Optional[int]]] = None, target: Optional[int] = None,
                        output: EnumLike = "final_hidden", probe_seed: Optional[int] = None,
                        probe_distribution: Optional[EnumLike] = None,
                        dtype: Optional[EnumLike] = None, device: Optional[EnumLike] = None, priority: int = 0,
                        time_limit: Optional[float] = None, return_raw_samples: bool = False,
                        fit_effective_depth: bool = False, pathway: EnumLike = "full", compare_pathways: bool = False,
                        texts: Optional[Sequence[Union[str, Sequence[str]]]] = None, layout: EnumLike = "concatenate",
                        boundaries: Optional[Sequence[int]] = None, needle: Optional[str] = None,
                        needle_depths: Optional[Sequence[float]] = None, separator: str = "", truncate: bool = False,
                        boundary_token: EnumLike = "none", question: str = "",
                        recall_depths: Optional[Sequence[float]] = None, recall_probes: int = 16,
                        recall_pairs: int = 0, recall_key_letters: int = 0, recall_values: str = "",
                        recall_seed: Optional[int] = None, recall_kind: Optional[str] = None,
                        recall_key_ids: Optional[Tuple[int, int]] = None,
                        recall_value_ids: Optional[Tuple[int, int]] = None,
                        recall_filler_ids: Optional[Tuple[int, int]] = None,
                        versus: Optional[Sequence[str]] = None, init_seed: Optional[int] = None,
                        reference: Optional[str] = None,
                        labels: Optional[Mapping[str, str]] = None,
                        request_id: Optional[str] = None, timeout: Any = _DEFAULT) -> Job:
        """Submits a Jacobian-norm measurement (SubmitJob) and returns its Job (queued).

        model: a registered model's name; length: L. samples: S (server default 16). method:
        "exact" or "hutchinson" (with `probes`, default 64, `probe_seed`, and `probe_distribution`
        "gaussian", "rademacher" or "orthogonal", default the server's: orthogonal). Inputs: "random"
        tokens (default) or "gaussian" embeddings (`stddev`), each from `seed` (default drawn by
        the server); or `tokens`, one list of L ids per sample (then samples may be None), with
        `next_token_ids` for the LOG_PROB output at T = L. target: T (default L). output:
        "final_hidden" ("final"), "layer_sweep" ("layers"), "log_prob" ("logprob") or
        "loss_gradient" ("loss": the gradient of the next-token loss over the sample). dtype:
        "float32" (default), "bfloat16", "float16", "float64"; device: "cpu" or "cuda" (default
        any). priority -100..100; time_limit in seconds; return_raw_samples keeps per-sample
        values; fit_effective_depth fits the theory's depth too. pathway: "full" (default) or
        "value_only" (attention's value pathway alone); compare_pathways measures both (the
        result's `pathways`). texts: real text instead, one entry per sample (a string, or a list
        of documents), tokenized by the model's tokenizer and laid out by `layout`:
        "concatenate" (documents joined by `separator`, default the end-of-sequence token;
        `truncate` cuts to L), "fixed_boundaries" (documents begin at `boundaries`) or "needle"
        (`needle` at each of `needle_depths` inside the documents, then `question`, each filler
        also alone as the baseline: the result's `needle_sweep`); boundary_token "eos" or "bos"
        puts that token at each document start (fixed_boundaries) or after each filler document
        (needle), "none" (default) none. recall_depths: associative-recall probes instead
        (RecallInput: `recall_pairs` key=value pairs among filler, default 8, keys of
        `recall_key_letters` letters, default 3, values from `recall_values`, default a-z, then a
        query key; its value is the answer), `recall_probes` per depth from `recall_seed` (default
        0): the result's `recall` (RecallSweep) gives accuracy by depth with its interval beside
        the queried pair's Jacobian share. recall_kind "token_ids" asks single-id keys and values
        (`recall_key_ids`, `recall_value_ids`, `recall_filler_ids`: (first, last) id ranges, last
        excluded; no tokenizer needed), "text" the key=value text; None (default) the task a
        `posbias-train --task recall` checkpoint was trained on, else text (the result's
        `recall.asked` says which). versus: a comparison job, more models measured on the
        same inputs and probes after `model` (registered names in order, e.g. the checkpoints of a
        training run; "init" = `model`'s architecture at seeded initialization, `init_seed`, by
        default the seed a posbias-train checkpoint records); the result's `comparison` pairs each
        with `reference` (default `model`; e.g. "init", so a trained model reads against its
        birth). labels and request_id as in
        the API (a retry with the same request_id returns the same job)."""
        spec = job_service_pb2.JacobianNormSpec(
            model=model, sequence_length=int(length), samples=int(samples or 0),
            method=enum_value(job_service_pb2.JacobianMethod, method, "method"),
            output=enum_value(job_service_pb2.JacobianOutput, output, "output", OUTPUT_ALIASES),
            probes=int(probes or 0), return_raw_samples=return_raw_samples, fit_effective_depth=fit_effective_depth,
            pathway=enum_value(job_service_pb2.JacobianPathway, pathway, "pathway"), compare_pathways=compare_pathways)
        spec.versus.extend(versus or ())
        if init_seed is not None:
            spec.init_seed = int(init_seed)
        if reference is not None:
            spec.reference = reference
        if target is not None:
            spec.target_position = int(target)
        if probe_seed is not None:
            spec.probe_seed = int(probe_seed)
        if probe_distribution is not None:
            spec.probe_distribution = enum_value(job_service_pb2.ProbeDistribution, probe_distribution,
                                                 "probe_distribution")
        if dtype is not None:
            spec.dtype = enum_value(common_pb2.ComputeDtype, dtype, "dtype")
        if recall_depths is not None:
            if texts is not None or tokens is not None or seed is not None or stddev is not None:
                raise ValueError("recall probes take no texts, tokens, seed or stddev")
            recall = spec.input.recall
            recall.depths.extend(float(d) for d in recall_depths)
            recall.probes_per_depth = int(recall_probes)
            recall.pairs = int(recall_pairs)
            recall.key_letters = int(recall_key_letters)
            recall.values = recall_values
            if recall_seed is not None:
                recall.seed = int(recall_seed)
            ranges = {"key_ids": recall_key_ids, "value_ids": recall_value_ids, "filler_ids": recall_filler_ids}
            if recall_kind not in (None, "text", "token_ids"):
                raise ValueError("recall_kind %r: allowed None, \"text\" or \"token_ids\"" % (recall_kind,))
            if recall_kind == "text":
                if any(r is not None for r in ranges.values()):
                    raise ValueError("recall id ranges are for recall_kind \"token_ids\", not \"text\"")
                recall.text = True
            elif recall_kind == "token_ids" or any(r is not None for r in ranges.values()):
                recall.token_ids.SetInParent()
                for name, pair in ranges.items():
                    if pair is not None:
                        first, last = (int(v) for v in pair)
                        getattr(recall.token_ids, name).first = first
                        getattr(recall.token_ids, name).last = last
        elif texts is not None:
            if tokens is not None or seed is not None or stddev is not None:
                raise ValueError("texts take no tokens, seed or stddev")
            text = spec.input.text
            for sample in texts:
                text.samples.add().documents.extend([sample] if isinstance(sample, str) else list(sample))
            text.layout = enum_value(job_service_pb2.TextLayout, layout, "layout")
            text.boundaries.extend(int(b) for b in boundaries or ())
            text.needle = needle or ""
            text.question = question
            text.needle_depths.extend(float(d) for d in needle_depths or ())
            text.separator = separator
            text.truncate = truncate
            text.boundary_token = enum_value(job_service_pb2.TextBoundaryToken, boundary_token, "boundary_token")
        elif tokens is not None:
            if seed is not None or stddev is not None or input not in ("random", "tokens"):
                raise ValueError("given tokens take no seed, stddev or input kind")
            sequences = spec.input.given_tokens.sequences
            for i, ids in enumerate(tokens):
                sequence = sequences.add()
                sequence.token_ids.extend(int(t) for t in ids)
                if next_token_ids is not None and next_token_ids[i] is not None:
                    sequence.next_token_id = int(next_token_ids[i])
        elif input == "random":
            spec.input.random_tokens.SetInParent()
            if seed is not None:
                spec.input.random_tokens.seed = int(seed)
            if stddev is not None:
                raise ValueError("stddev applies to input='gaussian' only")
        elif input == "gaussian":
            spec.input.gaussian_embeddings.SetInParent()
            if seed is not None:
                spec.input.gaussian_embeddings.seed = int(seed)
            if stddev is not None:
                spec.input.gaussian_embeddings.stddev = float(stddev)
        else:
            raise ValueError("input = %r is invalid: allowed %s" % (input, ", ".join(INPUT_KINDS)))
        job_spec = job_service_pb2.JobSpec(jacobian_norm=spec, priority=int(priority))
        if device is not None:
            job_spec.device = 0 if device == "any" else enum_value(common_pb2.DevicePreference, device, "device")
        if time_limit is not None:
            job_spec.time_limit.seconds = int(time_limit)
            job_spec.time_limit.nanos = int(round((time_limit - int(time_limit)) * 1e9))
        return self.submit_job(job_spec, labels=labels, request_id=request_id, timeout=timeout)

    def submit_job(self, spec: job_service_pb2.JobSpec, *, labels: Optional[Mapping[str, str]] = None,
                   request_id: Optional[str] = None, timeout: Any = _DEFAULT) -> Job:
        """Submits a job from a JobSpec message (SubmitJob); submit_jacobian builds one for you."""
        request = job_service_pb2.SubmitJobRequest(spec=spec, labels=dict(labels or {}), request_id=request_id or "")
        return Job(self, self._call(self._jobs.SubmitJob, request, timeout))

    def _get_job_message(self, job_id: str, view: Optional[EnumLike] = None,
                         timeout: Any = _DEFAULT) -> job_service_pb2.Job:
        request = job_service_pb2.GetJobRequest(id=job_id)
        if view is not None:
            request.view = enum_value(job_service_pb2.JobView, view, "view")
        return self._call(self._jobs.GetJob, request, timeout)

    def get_job(self, job_id: str, view: Optional[EnumLike] = None, timeout: Any = _DEFAULT) -> Job:
        """One job (GetJob); view "full" (default: with given token lists) or "basic"."""
        return Job(self, self._get_job_message(job_id, view, timeout))

    def list_jobs(self, *, states: Optional[Union[EnumLike, Iterable[EnumLike]]] = None, model: str = "",
                  label_selector: str = "", view: Optional[EnumLike] = None, page_size: int = 0,
                  timeout: Any = _DEFAULT) -> Iterator[Job]:
        """Every job (ListJobs, all pages: next_page_token is followed), newest first. states: one
        or more of "queued", "running", "cancelling", "succeeded", "failed", "cancelled"; model:
        only jobs on this model; label_selector "k=v,k2=v2". Pages are fetched as the iterator
        advances."""
        request = job_service_pb2.ListJobsRequest(page_size=page_size, model=model, label_selector=label_selector)
        request.states.extend(enum_values(job_service_pb2.JobState, states, "states"))
        if view is not None:
            request.view = enum_value(job_service_pb2.JobView, view, "view")

        def fetch(token: str) -> job_service_pb2.ListJobsResponse:
            request.page_token = token
            return self._call(self._jobs.ListJobs, request, timeout)

        return (Job(self, j) for j in _pages(fetch, "jobs"))

    def _cancel_job_message(self, job_id: str, reason: str = "", timeout: Any = _DEFAULT) -> job_service_pb2.Job:
        return self._call(self._jobs.CancelJob, job_service_pb2.CancelJobRequest(id=job_id, reason=reason), timeout)

    def cancel_job(self, job_id: str, reason: str = "", timeout: Any = _DEFAULT) -> Job:
        """Requests cancellation (CancelJob); returns the job after the transition."""
        return Job(self, self._cancel_job_message(job_id, reason, timeout))

    def delete_job(self, job_id: str, force: bool = False, timeout: Any = _DEFAULT) -> None:
        """Deletes a job and its result (DeleteJob); only finished jobs unless force."""
        self._call(self._jobs.DeleteJob, job_service_pb2.DeleteJobRequest(id=job_id, force=force), timeout)

    def quota(self, timeout: Any = _DEFAULT) -> Dict[str, Any]:
        """Who the server takes you for and your job quotas next to what you use of them now
        (GetQuota): principal, tenant, role ("reader" ... "admin"), queued_jobs and
        max_queued_jobs, running_jobs and max_running_jobs (a max of 0: no quota of your own)."""
        quota = self._call(self._jobs.GetQuota, job_service_pb2.GetQuotaRequest(), timeout)
        return {"principal": quota.principal, "tenant": quota.tenant,
                "role": enum_name(options_pb2.AccessRole, quota.role),
                "queued_jobs": quota.queued_jobs, "max_queued_jobs": quota.max_queued_jobs,
                "running_jobs": quota.running_jobs, "max_running_jobs": quota.max_running_jobs}

    def _watch_messages(self, job_id: str, view: Optional[EnumLike] = None,
                        timeout: Optional[float] = None) -> Iterator[job_service_pb2.Job]:
        request = job_service_pb2.WatchJobRequest(id=job_id)
        if view is not None:
            request.view = enum_value(job_service_pb2.JobView, view, "view")
        return (m.job for m in self._stream(self._jobs.WatchJob, request, timeout))

    def watch(self, job_id: str, view: Optional[EnumLike] = None, timeout: Optional[float] = None) -> Iterator[Job]:
        """Follows a job (WatchJob) until it ends: a Job snapshot per change, the current state
        first. timeout: deadline of the whole stream in seconds (default none)."""
        stream = self._watch_messages(job_id, view, timeout)
        try:
            for message in stream:
                yield Job(self, message)
        finally:
            stream.close()

    watch_job = watch

    def get_job_result(self, job_id: str, *, first_position: Optional[int] = None,
                       last_position: Optional[int] = None, stride: int = 0, page_size: int = 0,
                       omit_layer_profiles: bool = False, omit_theory: bool = False,
                       include_raw_samples: bool = False, include_token_ids: bool = False, first_sample: int = 0,
                       sample_count: int = 0, timeout: Any = _DEFAULT) -> JobResult:
        """The result of a SUCCEEDED job (GetJobResult), every page fetched and joined.

        first_position / last_position / stride select positions (default all 1..T); page_size is
        positions per call (server default 1024). omit_layer_profiles, omit_theory,
        include_raw_samples, include_token_ids, first_sample and sample_count as in the API."""
        request = job_service_pb2.GetJobResultRequest(
            id=job_id, stride=stride, page_size=page_size, omit_layer_profiles=omit_layer_profiles,
            omit_theory=omit_theory, include_raw_samples=include_raw_samples, include_token_ids=include_token_ids,
            first_sample=first_sample, sample_count=sample_count)
        if first_position is not None:
            request.first_position = int(first_position)
        if last_position is not None:
            request.last_position = int(last_position)
        pages = []
        while True:
            page = self._call(self._jobs.GetJobResult, request, timeout)
            pages.append(page)
            if not page.next_page_token:
                break
            request.page_token = page.next_page_token
        return JobResult.from_pages(pages)


__all__ = ["Client", "DEFAULT_ADDRESS", "Error"]
