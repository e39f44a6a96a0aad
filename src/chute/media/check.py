"""``MediaCheck``: the recipe, then every media reference decoded fully (for ``chute validate``).

The recipe already refuses unsafe paths, URLs and missing files, and reads headers for dynamic
token counts; a truncated JPEG passes all of that. ``MediaCheck`` decodes every image (and
probes every video and audio clip, where those extras are installed) so ``chute validate``
reports every media failure as a rejected record, with its kind and ``path:line``.

Each process remembers what it found per file (path, size, mtime), so a dataset that shows one
image in many records decodes it once.

Example:
    >>> check = MediaCheck(recipe)  # doctest: +SKIP
    >>> report = validate_source(source, check)  # doctest: +SKIP
"""

from __future__ import annotations

import os
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

from chute.errors import SampleError
from chute.media.images import DecodeOptions, decode_image
from chute.media.inline import is_inline, local_copy
from chute.media.paths import INLINE, is_remote

__all__ = ["MediaCheck"]


class MediaCheck:
    """A picklable check: ``recipe(record)``, then each image decoded and each clip probed.

    Args:
        recipe: a ``Recipe`` (or any ``record -> sample`` callable whose samples list
            ``images`` / ``videos`` / ``audios`` with resolved ``path``).
        decode: decoding limits (``DecodeOptions``).
        video: a ``VideoFrames`` to read each video's frames with (default: probe the header
            when PyAV is installed).
        audio: an ``AudioClips`` to read each clip with (default: probe the header when
            soundfile is installed).
        memo: files remembered per process.
    """

    def __init__(
        self,
        recipe: Any,
        decode: DecodeOptions | None = None,
        *,
        video: Any = None,
        audio: Any = None,
        memo: int = 100_000,
    ):
        self.recipe = recipe
        self.decode = decode or DecodeOptions()
        self.video = video
        self.audio = audio
        self.memo = memo
        self._seen: OrderedDict[tuple[Any, ...], tuple[str, str] | None] = OrderedDict()

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_seen"] = OrderedDict()
        return state

    def __call__(self, record: Any) -> Any:
        return self._media(self.recipe(record))

    def batch(self, records: Sequence[Any]) -> list[Any]:
        """Each record's sample, or the error that rejects it (the recipe's or its media's).

        The recipe's ``batch`` where it has one (``SampleCheck``), then each sample's media.
        """
        inner = getattr(self.recipe, "batch", None)
        if not callable(inner):
            return [self._one(record) for record in records]
        out: list[Any] = []
        for result in inner(records):
            if not isinstance(result, BaseException):
                try:
                    result = self._media(result)
                except Exception as exc:  # located and judged by the caller
                    result = exc
            out.append(result)
        return out

    def _one(self, record: Any) -> Any:
        try:
            return self(record)
        except Exception as exc:
            return exc

    def _media(self, sample: Any) -> Any:
        for ref in sample.get("images") or ():
            self._once("image", ref["path"], lambda p: decode_image(p, self.decode))
        for ref in sample.get("videos") or ():
            self._once("video", ref["path"], self._video)
        for ref in sample.get("audios") or ():
            self._once("audio", ref["path"], self._audio)
        return sample

    def _video(self, path: str) -> None:
        path = local_copy(path, "video") if is_inline(path) else path  # decoders read files
        if self.video is not None:
            self.video(path)
            return
        try:
            from chute.media.video import probe_video
        except ImportError:
            return
        probe_video(path)

    def _audio(self, path: str) -> None:
        path = local_copy(path, "audio") if is_inline(path) else path
        if self.audio is not None:
            self.audio(path)
            return
        try:
            from chute.media.audio import probe_audio
        except ImportError:
            return
        probe_audio(path)

    def _once(self, kind: str, path: str, load: Any) -> None:
        if path.startswith(INLINE) or is_remote(path):
            key: tuple[Any, ...] = (kind, path)
        else:
            try:
                st = os.stat(path)
                key = (kind, path, st.st_size, st.st_mtime_ns)
            except OSError:
                key = (kind, path)
        if key in self._seen:
            found = self._seen[key]
        else:
            try:
                load(path)
                found = None
            except SampleError as exc:
                found = (exc.kind, exc.message)
            self._seen[key] = found
            if len(self._seen) > self.memo:
                self._seen.popitem(last=False)
        if found is not None:
            raise SampleError(*found)  # a fresh error: each record gets its own location

    def __repr__(self) -> str:
        return f"MediaCheck({self.recipe!r}, decode images fully)"
