"""Conversions between protobuf values and plain Python ones: enum names, arrays, timestamps."""

from __future__ import annotations

import datetime
from typing import Any, Iterable, Mapping, Optional, Sequence, Union

import numpy as np

EnumLike = Union[str, int]


def _prefixes(enum_type: Any) -> Sequence[str]:
    """The prefixes an enum's value names carry: "JOB_STATE_" for JobState, and its first word
    ("DEVICE_" for DevicePreference's DEVICE_CPU)."""
    unspecified = enum_type.Name(0)
    prefix = unspecified[:-len("UNSPECIFIED")] if unspecified.endswith("UNSPECIFIED") else ""
    first_word = prefix.split("_")[0] + "_" if prefix else ""
    return [p for p in (prefix, first_word) if p]


def enum_name(enum_type: Any, value: int) -> str:
    """A value's short lower-case name: JOB_STATE_SUCCEEDED -> "succeeded", COHERENT ->
    "coherent", 0 -> "unspecified". Values newer than this client come back as their number."""
    try:
        name = enum_type.Name(value)
    except ValueError:
        return str(value)
    for prefix in _prefixes(enum_type):
        if name.startswith(prefix):
            name = name[len(prefix):]
            break
    return name.lower()


def enum_value(enum_type: Any, value: EnumLike, what: str, aliases: Optional[Mapping[str, str]] = None) -> int:
    """An enum value from a short name ("succeeded"), a full name ("JOB_STATE_SUCCEEDED"), an alias
    or a number. Raises ValueError naming `what` and the allowed names."""
    if isinstance(value, bool):
        raise TypeError("%s must be a name or a number, not a bool" % what)
    if isinstance(value, (int, np.integer)):
        return int(value)
    if not isinstance(value, str):
        raise TypeError("%s must be a name or a number, not %s" % (what, type(value).__name__))
    text = value.strip()
    if aliases and text.lower() in aliases:
        text = aliases[text.lower()]
    candidates = [text.upper()] + [p + text.upper() for p in _prefixes(enum_type)]
    for candidate in candidates:
        try:
            number = enum_type.Value(candidate)
        except ValueError:
            continue
        if number != 0:
            return number
    allowed = sorted({enum_name(enum_type, v) for v in enum_type.values() if v != 0} | set(aliases or ()))
    raise ValueError("%s = %r is invalid: allowed %s" % (what, value, ", ".join(allowed)))


def enum_values(enum_type: Any, values: Optional[Union[EnumLike, Iterable[EnumLike]]], what: str,
                aliases: Optional[Mapping[str, str]] = None) -> list:
    """enum_value of each entry; a single name is a list of one; None is the empty list."""
    if values is None:
        return []
    if isinstance(values, (str, int)):
        values = [values]
    return [enum_value(enum_type, v, "%s[%d]" % (what, i), aliases) for i, v in enumerate(values)]


def floats(values: Iterable[float]) -> np.ndarray:
    """A repeated double field as a float64 array (a copy)."""
    return np.array(list(values), dtype=np.float64)


def ints(values: Iterable[int]) -> np.ndarray:
    """A repeated integer field as an int64 array (a copy)."""
    return np.array(list(values), dtype=np.int64)


def timestamp(message: Any, field: str) -> Optional[datetime.datetime]:
    """A google.protobuf.Timestamp field as an aware UTC datetime; None when unset."""
    if not message.HasField(field):
        return None
    value = getattr(message, field)
    return datetime.datetime.fromtimestamp(value.seconds, tz=datetime.timezone.utc) + \
        datetime.timedelta(microseconds=value.nanos // 1000)


def seconds(message: Any, field: str) -> Optional[float]:
    """A google.protobuf.Duration field in seconds; None when unset."""
    if not message.HasField(field):
        return None
    value = getattr(message, field)
    return value.seconds + value.nanos * 1e-9


def optional(message: Any, field: str) -> Any:
    """The value of a proto3 `optional` field, None when it is not set."""
    return getattr(message, field) if message.HasField(field) else None
