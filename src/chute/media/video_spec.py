"""The short form of ``video_tokens`` (command line, configs): ``fps``, ``fps=1,max_frames=64``.

``--video-tokens`` and ``recipe.video_tokens`` take a token count per video, or how to sample
frames, resolved against the recipe's image-token family (``VideoFrames.preset``), so the patch
size, pixel bounds and frame rule follow the model::

    64                       64 tokens per video (no file is read)
    fps                      the family's rate (Qwen: 2 frames a second, 4 to 768 frames)
    fps=1,max_frames=64      1 frame a second, at most 64 frames
    frames=8                 8 frames spread over each video
    {fps: 1, max_frames: 64} the same as a mapping (a config)

Keys are ``VideoFrames``' numeric fields (``frames`` for ``num_frames``).

Example:
    >>> video_tokens_rule("64")
    64
    >>> video_tokens_rule("fps=1,max_frames=64", family="qwen3-vl").transform.patch_size
    16
    >>> video_tokens_rule("frames=8", family="qwen2-vl").num_frames
    8
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from chute._internal.spelling import spell_value
from chute.errors import ConfigError
from chute.media.video import PRESETS, VideoFrames

__all__ = ["video_tokens_rule"]

# The short form's keys: VideoFrames' numeric fields (``frames`` for ``num_frames``).
_SPEC_KEYS: dict[str, type] = {
    "fps": float,
    "frames": int,
    "num_frames": int,
    "min_frames": int,
    "max_frames": int,
    "frame_min_pixels": int,
    "frame_max_pixels": int,
    "total_pixels": int,
    "video_min_pixels": int,
    "video_max_pixels": int,
    "max_seconds": float,
    "max_pixels": int,
}


def video_tokens_rule(value: Any, family: str | None = None) -> Any:
    """``Recipe(video_tokens=value)`` as a count, a ``VideoFrames``, or ``None``.

    ``value`` is ``None``, a token count (``64``, ``"64"``), a ``VideoFrames`` (or any rule with
    ``count_tokens``), a mapping of ``VideoFrames`` fields, or the short form: comma-separated
    ``key=value`` items of those fields, ``fps`` alone for the family's rate, ``frames`` for
    ``num_frames``::

        fps                      2 frames a second (the family's default rate and bounds)
        fps=1,max_frames=64      1 a second, at most 64 frames
        frames=8                 8 frames spread over the video

    A mapping or short form starts from the ``family``'s preset (``VideoFrames.preset``), so
    its patch size, pixel bounds and frame rule match the image tokens; without a family it
    fills ``VideoFrames``' own defaults.

    Raises:
        ConfigError: naming ``video_tokens``, the value and the expected form.

    Example:
        >>> video_tokens_rule(None) is None
        True
    """
    if value is None or callable(getattr(value, "count_tokens", None)):
        return value
    if isinstance(value, bool):
        raise ConfigError(
            f"expected a token count, a VideoFrames or its short form, got {spell_value(value)}",
            param="video_tokens",
        )
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value)
    if isinstance(value, int):
        if value < 1:
            raise ConfigError(
                f"expected a positive number of tokens, got {spell_value(value)}",
                param="video_tokens",
            )
        return value
    if isinstance(value, str):
        value = _parse_short_form(value)
    if not isinstance(value, Mapping):
        raise ConfigError(
            f"expected a token count, a VideoFrames, a mapping of its fields or a short form "
            f"such as fps=2, got {type(value).__name__}",
            param="video_tokens",
        )
    fields = dict(value)
    unknown = sorted(k for k in fields if k not in _SPEC_KEYS and k not in ("rule", "transform"))
    if unknown:
        raise ConfigError(
            f"unknown key(s) {', '.join(map(repr, unknown))}; the keys are "
            f"{', '.join(_SPEC_KEYS)} and rule (fields of VideoFrames)",
            param="video_tokens",
        )
    if fields.get("fps") is not None and (
        fields.get("frames") is not None or fields.get("num_frames") is not None
    ):
        raise ConfigError(
            f"{spell_value(value)} sets both fps and a frame count; a video is sampled at a "
            f"rate or a fixed count: keep one",
            param="video_tokens",
        )
    if family in PRESETS:
        return VideoFrames.preset(str(family), **fields)
    if "frames" in fields:
        fields["num_frames"] = fields.pop("frames")
    try:
        return VideoFrames(**fields)
    except TypeError as exc:
        raise ConfigError(f"{exc} (fields of VideoFrames)", param="video_tokens") from None


def _parse_short_form(text: str) -> dict[str, Any]:
    fields: dict[str, Any] = {}
    for item in (p.strip() for p in text.split(",")):
        key, eq, raw = (s.strip() for s in item.partition("="))
        if not eq:
            if key == "fps":
                fields["fps"] = None  # the family's rate; marks sampling at a rate
                continue
            raise ConfigError(
                f"{item!r} in {text!r} is not key=value; write e.g. fps, fps=1,max_frames=64 "
                f"or frames=8 (or a token count: 64)",
                param="video_tokens",
            )
        kind = _SPEC_KEYS.get(key)
        if kind is None:
            raise ConfigError(
                f"unknown key {key!r} in {text!r}; the keys are {', '.join(_SPEC_KEYS)} "
                f"(fields of VideoFrames)",
                param="video_tokens",
            )
        try:
            fields[key] = kind(raw)
        except ValueError:
            raise ConfigError(
                f"{key}={raw!r} in {text!r}: expected {'an integer' if kind is int else 'a number'}",
                param="video_tokens",
            ) from None
    if "fps" in fields and fields["fps"] is None:
        del fields["fps"]
        if fields.get("frames") is not None or fields.get("num_frames") is not None:
            raise ConfigError(
                f"{text!r} sets both fps and a frame count; keep one", param="video_tokens"
            )
    return fields
