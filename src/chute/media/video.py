"""Video (optional extra, ``pip install 'chute[video]'``): frames sampled with PyAV.

``VideoFrames`` is both the recipe's token rule for videos (``Recipe(video_tokens=frames)``,
which reads only the container's header) and the media stage's loader (``MediaStage(video=
frames)``): the same object counts and loads, so the counts agree. Frames are sampled at a rate
(``fps``, as Qwen does) or a fixed count (``num_frames``); the arithmetic is
``chute.media.video_rules``::

    header: total frames T, frame rate r, size W x H
    n frames: fps * T / r within [min_frames, max_frames] (the rule's rounding), or num_frames
    frame k = round(linspace(0, T - 1, n))[k]   ──► RGB ──► resized ──► (n, h, w, 3)
      ImageTransform:      (n, 3, H, W),  n * tokens_per_image tokens
      DynamicResolution:   patches, grid (ceil(n / temporal_patch), h / patch, w / patch),
                           t * h * w / merge**2 tokens; second_per_grid_t = temporal_patch * T
                           / (n * r); each group's time = mean of its first and last frame's

``rule`` picks the frame count and size rule of a reference: ``qwen-vl-utils`` (Qwen2-VL and
Qwen2.5-VL's preprocessing: per-frame pixel bounds, a total budget, even frame counts),
``qwen3-vl`` (``transformers``' ``Qwen3VLVideoProcessor``: pixel bounds for the whole clip), or
``None`` (a fixed count, each frame sized like an image by the transform). ``VideoFrames.preset``
gives each model family's defaults, and ``chute.media.video_spec.video_tokens_rule`` reads the
short form of the command line and configs (``fps``, ``fps=1,max_frames=64``, ``frames=8``).

Limits: ``max_seconds`` (duration) and ``max_pixels`` (per frame) give ``video_too_large``; a
missing file ``video_missing``; a file PyAV cannot open, without a video stream, or without
decodable frames ``video_corrupt``; a header without the frame count or rate that sampling at a
rate needs, or frames the rule refuses (one frame, an aspect ratio above 200),
``video_unsupported``. A stream that ends before the frames its header promised repeats its last
decoded frame, so the frame count, and so the token count, stays exact.

Example:
    >>> frames = VideoFrames.preset("qwen2.5-vl")  # 2 frames a second, Qwen's pixel budget
    >>> frames.fps, frames.rule, frames.transform.patch_size
    (2.0, 'qwen-vl-utils', 14)
    >>> VideoFrames.preset("qwen3-vl", fps=1.0, max_frames=64).transform.patch_size
    16
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from typing import Any

import numpy as np

from chute.errors import ConfigError, MissingDependency, SampleError
from chute.media import video_rules as rules
from chute.media.images import to_rgb
from chute.media.transforms import RESAMPLE, DynamicResolution, ImageFeatures, ImageTransform

__all__ = ["PRESETS", "VideoFrames", "VideoInfo", "VideoSampling", "probe_video"]


def _av() -> Any:
    try:
        import av
    except ImportError:
        raise MissingDependency("reading videos needs PyAV: pip install 'chute[video]'") from None
    return av


@dataclass(frozen=True)
class VideoInfo:
    """What a container's header says: frame size, duration in seconds, frame rate, frames.

    ``frames`` is the stream's frame count (estimated from duration and rate where the
    container does not store it; 0 where neither is known).
    """

    width: int
    height: int
    duration: float
    fps: float
    frames: int = 0


def _open(path: str) -> Any:
    if not os.path.exists(path):
        raise SampleError("video_missing", f"{path}: no such file")
    if os.path.isdir(path):
        raise SampleError("video_missing", f"{path}: is a directory, not a video")
    if not os.path.isfile(path):
        raise SampleError("video_corrupt", f"{path}: not a regular file")
    av = _av()
    try:
        return av.open(path)
    except Exception as exc:
        raise SampleError(
            "video_corrupt", f"{path}: cannot open as a video ({type(exc).__name__}: {exc})"
        ) from None


def _info(path: str, container: Any) -> VideoInfo:
    if not container.streams.video:
        raise SampleError("video_corrupt", f"{path}: no video stream")
    stream = container.streams.video[0]
    width, height = int(stream.codec_context.width), int(stream.codec_context.height)
    fps = float(stream.average_rate or 0)
    if width <= 0 or height <= 0:
        raise SampleError("video_corrupt", f"{path}: the header says {width}x{height}")
    frames = int(stream.frames or 0)
    if stream.duration is not None and stream.time_base is not None:
        duration = float(stream.duration * stream.time_base)
    elif (tagged := _tagged_duration(stream)) is not None:
        duration = tagged  # Matroska / WebM: the track's own DURATION tag
    elif len(container.streams) > 1 or container.duration is None:
        # the container's duration is its longest stream's (an audio track outlasting the
        # video gave frames that do not exist): the video's packets, counted (no decoding)
        frames, duration = _counted(path, stream.index)
    else:
        duration = container.duration / 1_000_000
    if frames <= 0 and duration > 0 and fps > 0:
        frames = round(duration * fps)
    return VideoInfo(width, height, duration, fps, frames)


def _tagged_duration(stream: Any) -> float | None:
    """A stream's ``DURATION`` tag (``HH:MM:SS.nnnnnnnnn``, as Matroska muxers write it)."""
    text = next((v for k, v in dict(stream.metadata).items() if k.upper() == "DURATION"), None)
    try:
        hours, minutes, seconds = str(text).split(":")
        value = int(hours) * 3600 + int(minutes) * 60 + float(seconds)
    except (ValueError, TypeError):
        return None
    return value if value > 0 else None


def _counted(path: str, index: int) -> tuple[int, float]:
    """``(frames, seconds)`` of stream ``index`` from its packets' timestamps.

    In a container of its own: the caller's stays at its start for decoding (a raw stream
    cannot seek back).
    """
    container = _open(path)
    try:
        stream = container.streams[index]
        frames, end = 0, None
        for packet in container.demux(stream):
            if packet.pts is None or packet.size == 0:
                continue
            frames += 1
            stop = packet.pts + (packet.duration or 0)
            end = stop if end is None or stop > end else end
        base, start = stream.time_base, stream.start_time or 0
    finally:
        container.close()
    if end is None or base is None:
        return frames, 0.0
    return frames, float((end - start) * base)


def probe_video(path: str) -> VideoInfo:
    """``VideoInfo`` from the container's header (no frame is decoded).

    Raises:
        SampleError: ``video_missing``, ``video_corrupt``.
    """
    container = _open(path)
    try:
        return _info(path, container)
    finally:
        container.close()


@dataclass(frozen=True)
class VideoSampling:
    """One video's sampling, decided from its header: which frames, their size, their times.

    Attributes:
        n: frames sampled.
        indices: their indices in the stream (``None``: the header has no frame count; they
            are then spread over the frames decoded).
        size: ``(height, width)`` each frame is resized to (``None``: an ``ImageTransform``'s
            own size).
        second_per_grid_t: seconds per temporal group (``None`` where unknown).
        timestamps: each temporal group's time in seconds (``None`` where unknown).
    """

    n: int
    indices: np.ndarray | None
    size: tuple[int, int] | None
    second_per_grid_t: float | None
    timestamps: list[float] | None


_POSITIVE_INTS = (
    "min_frames",
    "max_frames",
    "frame_min_pixels",
    "frame_max_pixels",
    "total_pixels",
    "video_min_pixels",
    "video_max_pixels",
)
_RULE_FIELDS = {
    "qwen-vl-utils": ("frame_min_pixels", "frame_max_pixels", "total_pixels"),
    "qwen3-vl": ("video_min_pixels", "video_max_pixels"),
}


@dataclass(frozen=True)
class VideoFrames:
    """Sampled, transformed frames of a video; also the recipe's video token rule.

    Args:
        num_frames: a fixed number of frames per video (default 8 when ``fps`` is not set).
        transform: ``ImageTransform`` (each frame a fixed-size image; needs
            ``tokens_per_image``) or ``DynamicResolution`` (frames grouped by its
            ``temporal_patch_size``; default Qwen2-VL's).
        max_seconds: refuse longer videos (``video_too_large``).
        max_pixels: refuse larger frames (``video_too_large``).
        fps: sample this many frames per second of video instead (Qwen: 2).
        min_frames: with ``fps``, at least this many frames (Qwen: 4).
        max_frames: with ``fps``, at most this many frames (Qwen: 768).
        rule: the reference whose frame count and frame size rule apply: ``qwen-vl-utils``
            (the default with ``fps``), ``qwen3-vl`` (``transformers``' Qwen3-VL video
            processor), or ``None`` (the default with ``num_frames``: each frame sized by the
            transform like an image).
        frame_min_pixels: ``qwen-vl-utils``: a frame's smallest area (default 128 tokens' worth,
            ``128 * (patch_size * merge_size)**2``).
        frame_max_pixels: ``qwen-vl-utils``: a further cap on a frame's area (default none: 768
            tokens' worth, less when ``total_pixels`` is shared by many frames).
        total_pixels: ``qwen-vl-utils``: the video's budget (default ``128000 * 0.9`` tokens'
            worth): a frame gets at most ``total_pixels / frames * 2``.
        video_min_pixels: ``qwen3-vl``: the least ``frames * height * width`` of the clip (the
            processor's ``size["shortest_edge"]``, default 131,072).
        video_max_pixels: ``qwen3-vl``: the most (``size["longest_edge"]``, default 786,432).

    Example:
        >>> VideoFrames(fps=1.0, max_frames=64).rule
        'qwen-vl-utils'
        >>> VideoFrames(num_frames=4).fps is None
        True
    """

    num_frames: int | None = None
    transform: Any = None
    max_seconds: float = 600.0
    max_pixels: int = 4096 * 4096
    fps: float | None = None
    min_frames: int = 4
    max_frames: int = 768
    rule: str | None = None
    frame_min_pixels: int | None = None
    frame_max_pixels: int | None = None
    total_pixels: int | None = None
    video_min_pixels: int | None = None
    video_max_pixels: int | None = None

    def __post_init__(self) -> None:
        n, fps = self.num_frames, self.fps
        if n is not None and fps is not None:
            raise ConfigError(
                f"num_frames={n} and fps={fps} are both set; a video is sampled at a rate or "
                f"a fixed count: pass one of them",
                param="fps",
            )
        if n is None and fps is None:
            object.__setattr__(self, "num_frames", n := 8)
        if n is not None and (isinstance(n, bool) or not isinstance(n, int) or n < 1):
            raise ConfigError(f"expected a positive int, got {n!r}", param="num_frames")
        if fps is not None:
            if isinstance(fps, bool) or not isinstance(fps, int | float) or not 0 < fps < math.inf:
                raise ConfigError(
                    f"expected a positive number of frames per second (Qwen: 2), got {fps!r}",
                    param="fps",
                )
            object.__setattr__(self, "fps", float(fps))
            if self.rule is None:
                object.__setattr__(self, "rule", "qwen-vl-utils")
        self._check_numbers()
        self._check_transform()

    def _check_numbers(self) -> None:
        for name in _POSITIVE_INTS:
            v = getattr(self, name)
            if v is None and name not in ("min_frames", "max_frames"):
                continue
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ConfigError(f"expected a positive int, got {v!r}", param=name)
        if self.min_frames > self.max_frames:
            raise ConfigError(
                f"min_frames={self.min_frames} is more than max_frames={self.max_frames}; "
                f"make min_frames <= max_frames",
                param="min_frames",
            )
        if self.rule is not None and self.rule not in rules.RULES:
            raise ConfigError(
                f"expected one of {', '.join(rules.RULES)} or None, got {self.rule!r}",
                param="rule",
            )
        for rule, names in _RULE_FIELDS.items():
            for name in names:
                if getattr(self, name) is not None and self.rule != rule:
                    raise ConfigError(
                        f"{name} bounds frames under the {rule} rule, but rule={self.rule!r}; "
                        f"pass rule={rule!r}, or leave {name} out",
                        param=name,
                    )
        low, high = self.frame_min_pixels, self.frame_max_pixels
        if low is not None and high is not None and high < low:
            raise ConfigError(
                f"frame_max_pixels={high} is less than frame_min_pixels={low}",
                param="frame_max_pixels",
            )
        low, high = self.video_min_pixels, self.video_max_pixels
        if low is not None and high is not None and high < low:
            raise ConfigError(
                f"video_max_pixels={high} is less than video_min_pixels={low}",
                param="video_max_pixels",
            )

    def _check_transform(self) -> None:
        t = self.transform
        if t is None:
            object.__setattr__(self, "transform", t := DynamicResolution())
        elif isinstance(t, ImageTransform):
            if t.tokens_per_image is None:
                raise ConfigError(
                    "a video's token count is num_frames * tokens_per_image; pass "
                    "ImageTransform(..., tokens_per_image=N)",
                    param="transform",
                )
        elif not isinstance(t, DynamicResolution):
            raise ConfigError(
                f"expected ImageTransform or DynamicResolution, got {type(t).__name__}",
                param="transform",
            )
        tp = getattr(t, "temporal_patch_size", 1)
        n = self.num_frames
        if self.rule == "qwen3-vl" and n is not None and n < tp:
            raise ConfigError(
                f"num_frames={n} is less than the temporal patch ({tp}), which the Qwen3-VL "
                f"video processor refuses; pass num_frames >= {tp}",
                param="num_frames",
            )
        if self.rule == "qwen-vl-utils" and n == 1:
            raise ConfigError(
                "num_frames=1 rounds to 0 frames under qwen-vl-utils' rule (even counts); pass "
                "num_frames >= 2",
                param="num_frames",
            )

    @classmethod
    def preset(cls, family: str, **fields: Any) -> VideoFrames:
        """A model family's video sampling, with ``fields`` replaced.

        ``qwen2-vl`` / ``qwen2.5-vl``: 2 frames a second (4 to 768), qwen-vl-utils' pixel
        budget, 14-pixel patches, CLIP normalisation. ``qwen3-vl``: 2 frames a second (4 to
        768), ``transformers``' Qwen3-VL video processor's defaults (clip of 131,072 to 786,432
        pixels), 16-pixel patches, SigLIP normalisation. ``frames`` is short for ``num_frames``
        (a fixed count then replaces the rate).

        Raises:
            ConfigError: an unknown family or field.

        Example:
            >>> VideoFrames.preset("qwen3-vl", frames=8).num_frames
            8
        """
        if family not in PRESETS:
            raise ConfigError(
                f"unknown family {family!r}; use one of {', '.join(PRESETS)}", param="family"
            )
        fields = dict(fields)
        if "frames" in fields:
            fields["num_frames"] = fields.pop("frames")
        base = dict(PRESETS[family])
        if fields.get("num_frames") is not None:
            base["fps"] = None
        elif fields.get("fps") is not None:
            base["num_frames"] = None
        try:
            return cls(**{**base, **fields})
        except TypeError as exc:
            raise ConfigError(f"{exc} (fields of VideoFrames)", param="video_tokens") from None

    # -- sampling (both) -------------------------------------------------------------------------

    @property
    def _dynamic(self) -> bool:
        return isinstance(self.transform, DynamicResolution)

    def _sampling(self, path: str, info: VideoInfo) -> VideoSampling:
        try:
            return self._sample(info)
        except SampleError as exc:  # the rules' messages, about this file
            raise SampleError(exc.kind, f"{path}: {exc.message}") from None

    def _sample(self, info: VideoInfo) -> VideoSampling:
        total, rate = info.frames, info.fps
        if self.fps is not None:
            if total < 1 or rate <= 0:
                raise SampleError(
                    "video_unsupported",
                    f"the header gives {total} frames at {rate} frames a second; sampling at "
                    f"fps={self.fps} needs both (use num_frames for such files)",
                )
            n = rules.frames_at_rate(
                str(self.rule),
                total=total,
                video_fps=rate,
                fps=self.fps,
                min_frames=self.min_frames,
                max_frames=self.max_frames,
            )
        else:
            n = rules.fixed_frames(self.rule, int(self.num_frames or 0), total or None)
        indices = rules.frame_indices(total, n) if total > 0 else None
        t = self.transform
        if not self._dynamic:
            return VideoSampling(n, indices, None, None, None)
        size = self._size(info, n)
        tp = t.temporal_patch_size
        seconds = times = None
        if indices is not None and rate > 0:
            seconds = rules.seconds_per_group(n, total, rate, tp)
            times = rules.group_times(indices.tolist(), rate, tp)
        return VideoSampling(n, indices, size, seconds, times)

    def _size(self, info: VideoInfo, n: int) -> tuple[int, int]:
        t = self.transform
        factor = t.patch_size * t.merge_size
        if self.rule == "qwen-vl-utils":
            unit = factor * factor
            return rules.frame_size(
                info.height,
                info.width,
                n=n,
                factor=factor,
                frame_min_pixels=self.frame_min_pixels or 128 * unit,
                frame_max_pixels=self.frame_max_pixels,
                total_pixels=self.total_pixels or 128000 * unit * 0.9,
                frame_cap=768 * unit,
            )
        if self.rule == "qwen3-vl":
            return rules.clip_size(
                info.height,
                info.width,
                n=n,
                factor=factor,
                temporal_patch_size=t.temporal_patch_size,
                video_min_pixels=self.video_min_pixels or 128 * 32 * 32,
                video_max_pixels=self.video_max_pixels or 32 * 32 * 768,
            )
        return t.target_size(info.width, info.height)

    def sampling(self, path: str) -> VideoSampling:
        """Which frames of ``path`` are sampled, their size and times (from the header alone).

        Raises:
            SampleError: the header's kinds (``video_missing``, ``video_corrupt``,
                ``video_too_large``, ``video_unsupported``).
        """
        return self._sampling(path, self._checked(path, probe_video(path)))

    # -- counting (the recipe) -----------------------------------------------------------------

    def count_tokens(self, path: str) -> tuple[int, dict[str, Any]]:
        """``(tokens, info for the sample's video reference)`` from the header alone.

        The info holds ``size`` ``[w, h]`` and, with ``DynamicResolution``, ``grid_thw``,
        ``second_per_grid_t`` (seconds per temporal group) and ``timestamps`` (each group's
        time in seconds); the last two are ``None`` where the header has no frame count.
        """
        info = self._checked(path, probe_video(path))
        s = self._sampling(path, info)
        t = self.transform
        if not self._dynamic:
            return s.n * int(t.tokens_per_image), {"size": [info.width, info.height]}
        h, w = s.size or (0, 0)
        grid = (math.ceil(s.n / t.temporal_patch_size), h // t.patch_size, w // t.patch_size)
        tokens = grid[0] * grid[1] * grid[2] // (t.merge_size * t.merge_size)
        return tokens, {
            "size": [info.width, info.height],
            "grid_thw": list(grid),
            "second_per_grid_t": s.second_per_grid_t,
            "timestamps": s.timestamps,
        }

    def _checked(self, path: str, info: VideoInfo) -> VideoInfo:
        if info.duration > self.max_seconds:
            raise SampleError(
                "video_too_large",
                f"{path}: {info.duration:.1f} s, longer than max_seconds={self.max_seconds}",
            )
        if info.width * info.height > self.max_pixels:
            raise SampleError(
                "video_too_large",
                f"{path}: frames of {info.width}x{info.height}, more than max_pixels="
                f"{self.max_pixels:,}",
            )
        return info

    # -- loading (the media stage) --------------------------------------------------------------

    def __call__(self, path: str) -> ImageFeatures:
        """The sampled, transformed frames of ``path``."""
        container = _open(path)
        try:
            info = self._checked(path, _info(path, container))
            s = self._sampling(path, info)
            frames = _decode(path, container, s)
        finally:
            container.close()
        t = self.transform
        if not self._dynamic:
            prepared = np.stack([t.prepare(to_rgb(f)) for f in frames])
            pixels = np.stack([t.finish(p).pixels for p in prepared])
            return ImageFeatures(pixels, None, s.n * int(t.tokens_per_image))
        h, w = s.size or (0, 0)
        resample = RESAMPLE[t.resample]
        out = np.empty((len(frames), h, w, 3), dtype=np.uint8)
        for k, frame in enumerate(frames):
            image = to_rgb(frame)
            if image.size != (w, h):
                image = image.resize((w, h), resample=resample)
            out[k] = np.asarray(image, dtype=np.uint8)
        return t.finish(out)

    def fingerprint(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "num_frames": self.num_frames,
            "transform": self.transform.fingerprint(),
            "max_seconds": self.max_seconds,
            "max_pixels": self.max_pixels,
        }
        if self.fps is not None or self.rule is not None:  # a fixed count keeps its old keys
            for name in ("fps", "min_frames", "max_frames", "rule", *_POSITIVE_INTS[2:]):
                out[name] = getattr(self, name)
            if self._dynamic:
                out["temporal_patch_size"] = self.transform.temporal_patch_size
        return out


def _decode(path: str, container: Any, s: VideoSampling) -> list[Any]:
    """The sampled frames as PIL images (decoded in order; the stream read up to the last)."""
    n = s.n
    seen: list[Any] = []
    wanted: dict[int, Any] = {}
    last = None
    end = int(s.indices[-1]) if s.indices is not None else -1
    targets = set(s.indices.tolist()) if s.indices is not None else set()
    try:
        for i, frame in enumerate(container.decode(video=0)):
            if s.indices is None:  # no frame count in the header: keep every frame, pick later
                seen.append(frame.to_image())
                continue
            if i in targets:
                wanted[i] = frame.to_image()
            last = frame
            if i >= end:
                break
    except Exception as exc:
        raise SampleError(
            "video_corrupt", f"{path}: decoding failed ({type(exc).__name__}: {exc})"
        ) from None
    if s.indices is None:
        if not seen:
            raise SampleError("video_corrupt", f"{path}: no decodable frame")
        return [seen[i] for i in rules.frame_indices(len(seen), n)]
    if last is None:
        raise SampleError("video_corrupt", f"{path}: no decodable frame")
    picked = [wanted.get(i) for i in s.indices.tolist()]
    if any(image is None for image in picked):  # the stream ended before its header said
        fill = last.to_image()
        picked = [fill if image is None else image for image in picked]
    return picked


# Each model family's sampling (VideoFrames.preset): its processor's defaults.
PRESETS: dict[str, dict[str, Any]] = {
    "qwen2-vl": {
        "fps": 2.0,
        "min_frames": 4,
        "max_frames": 768,
        "rule": "qwen-vl-utils",
        "transform": DynamicResolution(),
    },
    "qwen3-vl": {
        "fps": 2.0,
        "min_frames": 4,
        "max_frames": 768,
        "rule": "qwen3-vl",
        "transform": DynamicResolution(
            patch_size=16, min_pixels=65536, max_pixels=16777216, normalize="siglip"
        ),
    },
}
PRESETS["qwen2.5-vl"] = PRESETS["qwen2-vl"]
