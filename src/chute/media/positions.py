r"""3-D rotary positions (mRoPE) of Qwen2-VL, Qwen2.5-VL and Qwen3-VL samples, from their media.

These models give every token three positions: time, height and width. A text token has the
same number in all three; the tokens of an image or a video take their place in its grid. The
model computes them itself (``get_rope_index`` in ``transformers``) only when it is given no
``position_ids`` and the batch is not packed; a packed row needs them from the data loader,
restarting per sample, or every image token gets a text position (silently: the loss still
falls). ``MRopePositions`` computes one sample's positions as the model does, from the sample's
media entries (each with its token ``span`` and ``grid_thw``), so they are the same whether the
sample comes from the recipe or from a token cache::

    tokens   : t  t  [image 2x2 after merging]  t  t       (4 text, 4 image tokens)
    time     : 0  1   2  2  2  2                4  5
    height   : 0  1   2  2  3  3                4  5
    width    : 0  1   2  3  2  3                4  5
               text resumes at 2 + max(grid_h, grid_w) = 4

Per family (the ``family`` of ``Recipe(image_tokens="qwen2-vl" | "qwen2.5-vl" | "qwen3-vl")``):

* ``qwen2-vl``: a video's temporal groups step time by 1.
* ``qwen2.5-vl``: by ``tokens_per_second * second_per_grid_t`` (the video entry's seconds per
  temporal group; 1.0 where unknown, as the model assumes), truncated to an integer in float32.
* ``qwen3-vl``: each temporal group of a video is its own block (the text holds a timestamp
  before each), with time 0 inside it; the entry's ``frame_spans`` give the blocks.

After any vision block the text resumes at ``start + max(grid_h, grid_w) / merge``, as the
pinned ``transformers`` computes it.

Example:
    >>> import numpy as np
    >>> rule = MRopePositions("qwen2-vl")
    >>> sample = {"input_ids": np.zeros(8), "images": [{"span": [2, 6], "grid_thw": [1, 4, 4]}]}
    >>> rule.positions(sample).tolist()
    [[0, 1, 2, 2, 2, 2, 4, 5], [0, 1, 2, 2, 3, 3, 4, 5], [0, 1, 2, 3, 2, 3, 4, 5]]
    >>> rule.token_types(sample).tolist()
    [0, 0, 1, 1, 1, 1, 0, 0]
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from chute.errors import ConfigError, SampleError
from chute.media.tokens import MROPE_FAMILIES

__all__ = ["MRopePositions", "first_family", "positions_rule"]

TEXT, IMAGE, VIDEO = 0, 1, 2
_MISMATCH = {IMAGE: "image_token_mismatch", VIDEO: "video_token_mismatch"}

# One vision block: (start, end, grid_t, grid_h, grid_w, time step, kind)
_Block = tuple[int, int, int, int, int, float, int]


@dataclass(frozen=True)
class MRopePositions:
    """One model family's rule for the 3-D positions of a sample.

    Args:
        family: ``qwen2-vl``, ``qwen2.5-vl`` or ``qwen3-vl``.
        spatial_merge_size: patches merged per side into one token (``vision_config.
            spatial_merge_size``: 2 in every released model).
        tokens_per_second: Qwen2.5-VL's ``vision_config.tokens_per_second`` (2 in the released
            checkpoints; ``transformers``' config class defaults to 4: set it to your
            config's value).
    """

    family: str
    spatial_merge_size: int = 2
    tokens_per_second: float = 2.0

    def __post_init__(self) -> None:
        if self.family not in MROPE_FAMILIES:
            raise ConfigError(
                f"expected one of {', '.join(MROPE_FAMILIES)}, got {self.family!r}",
                param="family",
            )
        merge = self.spatial_merge_size
        if isinstance(merge, bool) or not isinstance(merge, int) or merge < 1:
            raise ConfigError(
                f"expected a positive integer, got {merge!r}", param="spatial_merge_size"
            )
        tps = self.tokens_per_second
        if isinstance(tps, bool) or not isinstance(tps, int | float) or tps <= 0:
            raise ConfigError(
                f"expected a positive number, got {tps!r} (the model config's "
                f"vision_config.tokens_per_second)",
                param="tokens_per_second",
            )

    def positions(self, sample: Mapping[str, Any], key: str = "input_ids") -> np.ndarray:
        """``(3, length)`` int64 positions of ``sample[key]`` (time, height, width rows).

        Raises:
            SampleError: ``image_token_mismatch`` / ``video_token_mismatch`` when a media span
                does not hold its grid's tokens (a sample made by another rule).
        """
        return self.layout(sample, key)[0]

    def token_types(self, sample: Mapping[str, Any], key: str = "input_ids") -> np.ndarray:
        """``(length,)`` int32 modality of each token: 0 text, 1 image, 2 video.

        What ``transformers``' Qwen-VL processors return as ``mm_token_type_ids``.
        """
        return self.layout(sample, key)[1]

    def layout(
        self, sample: Mapping[str, Any], key: str = "input_ids"
    ) -> tuple[np.ndarray, np.ndarray]:
        """``(positions, token_types)`` of the sample in one pass (see the two methods)."""
        n = len(sample[key])
        blocks = self._blocks(sample, n)
        index = np.arange(n, dtype=np.int64)
        types = np.zeros(n, dtype=np.int32)
        if not blocks:
            return np.tile(index, (3, 1)), types
        out = np.empty((3, n), dtype=np.int64)
        cursor, shift = 0, 0  # next token to place; text positions lag tokens by ``shift``
        for start, end, t, h, w, step, kind in blocks:
            out[:, cursor:start] = index[cursor:start] - shift
            out[:, start:end] = _grid_positions(t, h, w, step) + (start - shift)
            types[start:end] = kind
            # the text after the block resumes at its start + max(h, w)
            shift += end - start - max(h, w)
            cursor = end
        out[:, cursor:] = index[cursor:] - shift
        return out, types

    def _blocks(self, sample: Mapping[str, Any], n: int) -> list[_Block]:
        """The sample's vision blocks in token order, each checked against its grid."""
        merge = self.spatial_merge_size
        blocks: list[_Block] = []
        for item in sample.get("images") or ():
            t, h, w = _grid(item, IMAGE)
            blocks.append((*_span(item["span"]), t, h // merge, w // merge, 1.0, IMAGE))
        for item in sample.get("videos") or ():
            t, h, w = _grid(item, VIDEO)
            if self.family == "qwen3-vl":
                # each temporal group is a block of its own, after its timestamp text
                frames = item.get("frame_spans") or ([item["span"]] if t == 1 else None)
                if frames is None or len(frames) != t:
                    raise SampleError(
                        _MISMATCH[VIDEO],
                        f"a Qwen3-VL video of {t} temporal groups needs one span per group "
                        f"(frame_spans), got {frames!r}: was the sample made by another rule?",
                    )
                blocks.extend(
                    (*_span(span), 1, h // merge, w // merge, 1.0, VIDEO) for span in frames
                )
                continue
            step = 1.0
            if self.family == "qwen2.5-vl":
                seconds = item.get("second_per_grid_t")
                step = float(self.tokens_per_second) * float(
                    np.float32(1.0 if seconds is None else seconds)
                )
            blocks.append((*_span(item["span"]), t, h // merge, w // merge, step, VIDEO))
        blocks.sort()
        cursor = 0
        for start, end, t, h, w, _, kind in blocks:
            if start < cursor or end > n or end - start != t * h * w:
                raise SampleError(
                    _MISMATCH[kind],
                    f"a media span [{start}, {end}) does not hold its grid of {t}x{h}x{w} "
                    f"tokens inside {n} tokens after the previous one (ends at {cursor}): was "
                    f"the sample made by another image-token rule?",
                )
            cursor = end
        return blocks


@functools.lru_cache(maxsize=4096)
def _grid_positions(t: int, h: int, w: int, step: float) -> np.ndarray:
    """``(3, t*h*w)`` positions of a ``t x h x w`` block that starts at 0 (kept per shape).

    The model: ``(arange(t) * step)`` in float32, truncated; heights and widths count by 1.
    """
    times = (np.arange(t, dtype=np.float32) * np.float32(step)).astype(np.int64)
    grid = np.empty((3, t, h, w), dtype=np.int64)
    grid[0] = times[:, None, None]
    grid[1] = np.arange(h, dtype=np.int64)[None, :, None]
    grid[2] = np.arange(w, dtype=np.int64)[None, None, :]
    grid.setflags(write=False)
    return grid.reshape(3, -1)


def _grid(item: Mapping[str, Any], kind: int) -> tuple[int, int, int]:
    grid = item.get("grid_thw")
    if grid is None or len(grid) != 3:
        raise SampleError(
            _MISMATCH[kind],
            f"a media entry without a (t, h, w) grid ({item.get('source', item)!r}): mRoPE "
            f"positions need the dynamic image-token rule of the model family",
        )
    t, h, w = (int(x) for x in grid)
    return t, h, w


def _span(span: Sequence[int]) -> tuple[int, int]:
    return int(span[0]), int(span[1])


def first_family(labels: Sequence[str], image_rules: Sequence[Any]) -> int | None:
    """Which of a mixture's image rules decides the run's positions: the first naming a family.

    The media stage and the rotary positions serve every dataset's rows, while each dataset
    counts its images itself: one naming a Qwen-VL family (``qwen2-vl``) decides over text
    datasets left at ``auto`` (the same counts, no family). ``None``: no rule names one.

    Raises:
        ConfigError: two rules naming different families (one run trains one model).

    Example:
        >>> from chute.media.tokens import image_tokens_rule
        >>> first_family(["text", "images"], [None, image_tokens_rule("qwen2-vl")])
        1
    """
    named = [
        (label, rule.family)
        for label, rule in zip(labels, image_rules, strict=True)
        if getattr(rule, "family", None)
    ]
    if len({family for _, family in named}) > 1:
        shown = ", ".join(f"{label}: {family}" for label, family in named)
        raise ConfigError(
            f"the datasets' image_tokens name different model families ({shown}): one run "
            f"trains one model, whose positions every batch follows; name one family (and "
            f"rebuild the caches made with another)",
            param="image_tokens",
        )
    if not named:
        return None
    return next(i for i, rule in enumerate(image_rules) if getattr(rule, "family", None))


def positions_rule(image_rule: Any) -> MRopePositions | None:
    """The positions rule of a recipe's image-token rule: its family's, or ``None`` (1-D).

    Example:
        >>> from chute.media.tokens import image_tokens_rule
        >>> positions_rule(image_tokens_rule("qwen2.5-vl")).family
        'qwen2.5-vl'
        >>> positions_rule(image_tokens_rule(576)) is None
        True
    """
    family = getattr(image_rule, "family", None)
    if family is None:
        return None
    return MRopePositions(family, spatial_merge_size=int(image_rule.merge_size))
