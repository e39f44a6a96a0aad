"""Video (optional extra, ``pip install 'chute[video]'``): frames sampled uniformly with PyAV.

``VideoFrames`` is both the recipe's token rule for videos (``Recipe(video_tokens=frames)``,
which reads only the container's header) and the media stage's loader (``MediaStage(video=
frames)``): the same object counts and loads, so the counts agree::

    duration D, num_frames N:  frame k is the first frame at or after (k + 0.5) * D / N
    each frame ──► RGB ──► transform.prepare ──► (N, H, W, 3) ──► transform.finish
      ImageTransform:      (N, 3, H, W),  N * tokens_per_image tokens
      DynamicResolution:   patches, grid (ceil(N / temporal_patch), h, w), t * h * w / merge**2

Limits: ``max_seconds`` (duration) and ``max_pixels`` (per frame) give ``video_too_large``; a
missing file ``video_missing``; a file PyAV cannot open, without a video stream, or without
decodable frames ``video_corrupt``. A stream that ends early repeats its last sampled frame so
the frame count, and so the token count, stays exact.

Example:
    >>> frames = VideoFrames(num_frames=8, transform=ImageTransform(size=224, crop=224,
    ...                      tokens_per_image=64))  # doctest: +SKIP
    >>> recipe = Recipe(..., video_tokens=frames)  # doctest: +SKIP
    >>> stage = MediaStage(image=..., video=frames)  # doctest: +SKIP
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from typing import Any

import numpy as np

from chute.errors import ConfigError, MissingDependency, SampleError
from chute.media.images import to_rgb
from chute.media.transforms import DynamicResolution, ImageFeatures, ImageTransform

__all__ = ["VideoFrames", "VideoInfo", "probe_video"]


def _av() -> Any:
    try:
        import av
    except ImportError:
        raise MissingDependency("reading videos needs PyAV: pip install 'chute[video]'") from None
    return av


@dataclass(frozen=True)
class VideoInfo:
    """What a container's header says: frame size, duration in seconds, frame rate."""

    width: int
    height: int
    duration: float
    fps: float


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
    if stream.duration is not None and stream.time_base is not None:
        duration = float(stream.duration * stream.time_base)
    elif container.duration is not None:
        duration = container.duration / 1_000_000
    else:
        duration = 0.0
    fps = float(stream.average_rate or 0)
    if width <= 0 or height <= 0:
        raise SampleError("video_corrupt", f"{path}: the header says {width}x{height}")
    return VideoInfo(width, height, duration, fps)


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
class VideoFrames:
    """Uniformly sampled frames of a video, transformed; also the recipe's video token rule.

    Args:
        num_frames: frames per video.
        transform: ``ImageTransform`` (each frame a fixed-size image; needs
            ``tokens_per_image``) or ``DynamicResolution`` (frames grouped by its
            ``temporal_patch_size``).
        max_seconds: refuse longer videos (``video_too_large``).
        max_pixels: refuse larger frames (``video_too_large``).
    """

    num_frames: int = 8
    transform: Any = None
    max_seconds: float = 600.0
    max_pixels: int = 4096 * 4096

    def __post_init__(self) -> None:
        n = self.num_frames
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise ConfigError(f"expected a positive int, got {n!r}", param="num_frames")
        t = self.transform
        if t is None:
            object.__setattr__(self, "transform", DynamicResolution())
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

    # -- counting (the recipe) -----------------------------------------------------------------

    def count_tokens(self, path: str) -> tuple[int, dict[str, Any]]:
        """``(tokens, info for the sample's video reference)`` from the header alone."""
        info = self._checked(path, probe_video(path))
        t = self.transform
        if isinstance(t, ImageTransform):
            if t.tokens_per_image is None:
                raise ConfigError(
                    "VideoFrames: the frame transform counts no tokens; give its "
                    "ImageTransform tokens_per_image= (e.g. 576), or use DynamicResolution"
                )
            return self.num_frames * t.tokens_per_image, {"size": [info.width, info.height]}
        h, w = t.target_size(info.width, info.height)
        grid = (
            math.ceil(self.num_frames / t.temporal_patch_size),
            h // t.patch_size,
            w // t.patch_size,
        )
        tokens = grid[0] * grid[1] * grid[2] // (t.merge_size * t.merge_size)
        return tokens, {"size": [info.width, info.height], "grid_thw": list(grid)}

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
            frames = self._sample(path, container, info)
        finally:
            container.close()
        t = self.transform
        prepared = np.stack([t.prepare(to_rgb(f)) for f in frames])
        if isinstance(t, DynamicResolution):
            return t.finish(prepared)
        pixels = np.stack([t.finish(p).pixels for p in prepared])
        return ImageFeatures(pixels, None, self.num_frames * int(t.tokens_per_image))

    def _sample(self, path: str, container: Any, info: VideoInfo) -> list[Any]:
        n = self.num_frames
        duration = info.duration if info.duration > 0 else None
        targets = [(k + 0.5) * duration / n for k in range(n)] if duration else None
        picked: list[Any] = []
        seen: list[Any] = []
        last = None
        try:
            for frame in container.decode(video=0):
                if targets is None:  # no duration in the header: keep every frame, pick later
                    seen.append(frame.to_image())
                    continue
                time = float(frame.time) if frame.time is not None else 0.0
                if len(picked) < n and time >= targets[len(picked)]:
                    image = frame.to_image()
                    while len(picked) < n and time >= targets[len(picked)]:
                        picked.append(image)
                if len(picked) == n:
                    break
                last = frame
        except Exception as exc:
            raise SampleError(
                "video_corrupt", f"{path}: decoding failed ({type(exc).__name__}: {exc})"
            ) from None
        if targets is not None and len(picked) < n and last is not None:
            picked.append(last.to_image())  # the stream ended before the remaining targets
        if targets is None:
            if not seen:
                raise SampleError("video_corrupt", f"{path}: no decodable frame")
            idx = np.linspace(0, len(seen) - 1, n).round().astype(int)
            return [seen[i] for i in idx]
        if not picked:
            raise SampleError("video_corrupt", f"{path}: no decodable frame")
        while len(picked) < n:  # the stream ended early: repeat the last frame
            picked.append(picked[-1])
        return picked[:n]

    def fingerprint(self) -> dict[str, Any]:
        return {
            "num_frames": self.num_frames,
            "transform": self.transform.fingerprint(),
            "max_seconds": self.max_seconds,
            "max_pixels": self.max_pixels,
        }
