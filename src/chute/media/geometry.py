"""Boxes and points in the text that follow the pixels: resize, crop, flip.

Grounding data writes coordinates in its text, each model family its own way. ``Geometry``
knows four conventions, finds their coordinates in a sample's text and rewrites them for the
image the model sees (the transform's resize, pad and crop, then an ``Augment`` draw's crop and
flip):

==============  ==========================================================  ===================
convention      what the text holds (read)                                  written
==============  ==========================================================  ===================
``qwen2-vl``    ``<|box_start|>(x1,y1),(x2,y2)<|box_end|>`` (and Qwen-VL's  the same, 0-1000 of
                ``<box>...</box>``), integers 0-1000 of the image           the model's image
``qwen2.5-vl``  ``"bbox_2d": [x1, y1, x2, y2]``, ``"point_2d": [x, y]``:     absolute pixels of
                absolute pixels of the original image (as collected)        the resized image
``qwen3-vl``    ``"bbox_2d": [x1, y1, x2, y2]``, ``"point_2d": [x, y]``:     the same, 0-1000 of
                integers 0-1000 of the image (Qwen3-VL's relative grid)     the model's image
``normalized``  ``[x1, y1, x2, y2]`` of numbers in [0, 1] of the image      the same, as many
                                                                            decimals as read
``llava``       ``[x1, y1, x2, y2]`` in [0, 1] of the image padded to a     the same
                square (LLaVA-1.5's grounding data; the image pasted at
                ``(side - w) // 2``, as LLaVA's ``expand2square`` does)
==============  ==========================================================  ===================

Under ``normalized`` and ``llava`` four bracketed numbers are a box when they read as fractions
of an image (``Geometry._is_coordinates``); such a box with a number outside [0, 1] is
``box_invalid``. Coordinates move only where the convention's frame does (``Geometry.moves``): a
relative convention under a plain resize (or ``llava`` under LLaVA-1.5's pad to a square and
resize) keeps its numbers, and its text is left exactly as written.

A box that leaves the image after a crop is clipped to it (``outside="clip"``) or rejects the
sample (``outside="reject"``); a box (or point) with nothing left inside is always a counted
reject, ``box_outside``: never a coordinate that no longer points at its object. Corners are
rounded outwards (floor the first, ceil the second), so a rewritten box still encloses what the
original enclosed. With several images in a sample, which one a box refers to is not written
down: such a sample is rejected (``box_ambiguous``) when its boxes would have to move.

Example:
    >>> g = Geometry("qwen2-vl")
    >>> flip = ImageMap.of((100, 50), ImageDraw((50, 100), flip=True))
    >>> g.rewrite("<|box_start|>(100,200),(300,400)<|box_end|>", [flip])
    '<|box_start|>(700,200),(900,400)<|box_end|>'
"""

from __future__ import annotations

import dataclasses
import functools
import math
import re
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from chute.errors import ConfigError, SampleError
from chute.media.augment import ImageDraw
from chute.media.sizes import smart_resize
from chute.media.tokens import DynamicImageTokens
from chute.media.transforms import DynamicResolution, ImageTransform

__all__ = ["CONVENTIONS", "Geometry", "ImageMap", "prepared_map"]

CONVENTIONS = ("qwen2-vl", "qwen2.5-vl", "qwen3-vl", "normalized", "llava", "none")
# conventions whose numbers are a fraction of the image (0-1000 or 0-1), not its pixels
_GRID = {"qwen2-vl": 1000.0, "qwen3-vl": 1000.0, "normalized": 1.0, "llava": 1.0}
OUTSIDE = ("clip", "reject")

_INT = r"\s*(\d+)\s*"
_NUM = r"\s*(-?\d+(?:\.\d+)?)\s*"
_DEC = r"\s*(-?(?:\d+(?:\.\d+)?|\.\d+))\s*"
_PATTERNS: dict[str, list[tuple[re.Pattern[str], int]]] = {
    # (pattern, coordinates) ; group 1 and the last group are kept around the numbers
    "qwen2-vl": [
        (re.compile(rf"(<\|box_start\|>|<box>)\({_INT},{_INT}\)\s*,\s*\({_INT},{_INT}\)"), 4),
    ],
    "qwen2.5-vl": [
        (re.compile(rf"(\"bbox_2d\"\s*:\s*)\[{_NUM},{_NUM},{_NUM},{_NUM}\]"), 4),
        (re.compile(rf"(\"point_2d\"\s*:\s*)\[{_NUM},{_NUM}\]"), 2),
    ],
    "normalized": [(re.compile(rf"()\[{_DEC},{_DEC},{_DEC},{_DEC}\]"), 4)],
}
_PATTERNS["qwen3-vl"] = [
    (re.compile(rf"(\"bbox_2d\"\s*:\s*)\[{_INT},{_INT},{_INT},{_INT}\]"), 4),
    (re.compile(rf"(\"point_2d\"\s*:\s*)\[{_INT},{_INT}\]"), 2),
]
_PATTERNS["llava"] = _PATTERNS["normalized"]
_PATTERNS["none"] = []  # the text holds no coordinates (crops and flips need no rewrite)


@dataclasses.dataclass(frozen=True)
class ImageMap:
    """Where a point of the original image lands in the image the model sees.

    ``original``: ``(width, height)`` of the file; ``scale``/``offset``: the transform's
    per-axis affine map to prepared pixels (``x * sx + ox``); ``draw``: the augmentation's crop
    and flip on top (``None``: none).
    """

    original: tuple[int, int]
    scale: tuple[float, float] = (1.0, 1.0)
    offset: tuple[float, float] = (0.0, 0.0)
    prepared: tuple[int, int] | None = None  # (height, width); None: the original's
    draw: ImageDraw | None = None

    @classmethod
    def of(cls, original: tuple[int, int], draw: ImageDraw | None = None) -> ImageMap:
        """No resize (prepared = original), then ``draw``."""
        return cls(original, draw=draw)

    @property
    def size(self) -> tuple[int, int]:
        """``(height, width)`` of the image the model sees."""
        if self.prepared is not None:
            return self.prepared
        return (self.original[1], self.original[0])

    @property
    def moves(self) -> bool:
        """Whether any coordinate changes (resize, crop or flip)."""
        h, w = self.size
        return (
            (w, h) != self.original
            or self.offset != (0.0, 0.0)
            or (self.draw is not None and self.draw.geometric)
        )

    def forward(self, x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Original pixel coordinates -> the model's image's."""
        x = x * self.scale[0] + self.offset[0]
        y = y * self.scale[1] + self.offset[1]
        if self.draw is not None:
            x, y = self.draw.map_points(x, y)
        return x, y


def _is_anyres(transform: Any) -> bool:
    """Whether ``transform`` is LLaVA-NeXT / OneVision tiles (an ``AnyresTransform``).

    Asked by its ``kind``: ``chute.media.tiles`` is a media stage, which a text recipe (and so
    this module) must not import.
    """
    return getattr(transform, "kind", None) == "anyres"


def prepared_map(transform: Any, width: int, height: int) -> ImageMap:
    """The map of ``transform.prepare`` for an image of ``width x height`` (no augmentation).

    ``transform``: a ``DynamicResolution`` or ``DynamicImageTokens`` (a resize to the rule's
    size), an ``ImageTransform`` (pad to square, resize, centre crop) or an ``AnyresTransform``
    (LLaVA-NeXT / OneVision tiles: no single pixel frame, so the original's size; only
    coordinates relative to the image follow it, ``Geometry.check_transform``).

    Example:
        >>> prepared_map(DynamicResolution(), 300, 168).size
        (168, 308)
    """
    if isinstance(transform, DynamicResolution | DynamicImageTokens):
        h, w = smart_resize(
            height,
            width,
            factor=transform.patch_size * transform.merge_size,
            min_pixels=transform.min_pixels,
            max_pixels=transform.max_pixels,
        )
        return ImageMap((width, height), (w / width, h / height), (0.0, 0.0), (h, w))
    if isinstance(transform, ImageTransform):
        ox = oy = 0.0
        w, h = width, height
        if transform.pad_to_square and w != h:
            side = max(w, h)
            ox, oy = float((side - w) // 2), float((side - h) // 2)
            w = h = side
        if isinstance(transform.size, int):
            short, long = (w, h) if w <= h else (h, w)
            new_long = int(transform.size * long / short)
            nw, nh = (transform.size, new_long) if w <= h else (new_long, transform.size)
        else:
            nh, nw = transform.size
        sx, sy = nw / w, nh / h
        ox, oy = ox * sx, oy * sy
        if transform.crop is not None:
            ch, cw = transform.output_size
            # _center_crop: pad to the crop's size where smaller, then take the centre
            bw, bh = max(nw, cw), max(nh, ch)
            ox += (bw - nw) // 2 - (bw - cw) // 2
            oy += (bh - nh) // 2 - (bh - ch) // 2
            nh, nw = ch, cw
        return ImageMap((width, height), (sx, sy), (ox, oy), (nh, nw))
    if _is_anyres(transform):
        if not transform.tiled:  # an image of a multi-image OneVision sample: one padded square
            side, out = max(width, height), transform.rule.image_size
            ox, oy = float((side - width) // 2), float((side - height) // 2)
            k = out / side
            return ImageMap((width, height), (k, k), (ox * k, oy * k), (out, out))
        # every view keeps the image's proportions (the base resized to a square, the tiles of
        # it resized and padded): a fraction of the image stays one; no pixel frame is shared
        return ImageMap((width, height))
    raise ConfigError(
        f"coordinates in the text cannot follow a {type(transform).__name__}: its geometry is "
        f"not known; use DynamicResolution or ImageTransform, or leave geometry unset",
        param="geometry",
    )


@dataclasses.dataclass(frozen=True)
class Geometry:
    """A convention of coordinates in the text, and what to do with a box that leaves the image.

    Args:
        convention: ``qwen2-vl``, ``qwen2.5-vl``, ``normalized`` or ``llava`` (the table above),
            or ``none``: the text holds no coordinates (an explicit claim, which lets the
            Loader crop and flip).
        outside: ``clip`` a box that leaves the image to it (default) or ``reject`` the sample;
            one with nothing left inside is always rejected (``box_outside``).

    Example:
        >>> Geometry("normalized").rewrite("[0.1, 0.2, 0.5, 0.6]", [ImageMap.of((10, 10))])
        '[0.1, 0.2, 0.5, 0.6]'
    """

    convention: str
    outside: str = "clip"

    def __post_init__(self) -> None:
        if self.convention not in CONVENTIONS:
            raise ConfigError(
                f"expected one of {', '.join(CONVENTIONS)}, got {self.convention!r}",
                param="geometry",
            )
        if self.outside not in OUTSIDE:
            raise ConfigError(
                f"expected one of {', '.join(OUTSIDE)}, got {self.outside!r}", param="outside"
            )

    @classmethod
    def of(cls, value: GeometryOption) -> Geometry | None:
        """``None``, a ``Geometry``, a convention name, or a mapping of the fields."""
        if value is None or isinstance(value, Geometry):
            return value
        if isinstance(value, str):
            return cls(value)
        if isinstance(value, Mapping):
            return cls(**value)
        raise ConfigError(
            f"expected a convention name ({', '.join(CONVENTIONS)}) or a Geometry, "
            f"got {type(value).__name__}",
            param="geometry",
        )

    def check_transform(self, transform: Any) -> None:
        """Refuse a transform this convention's coordinates cannot follow.

        LLaVA-NeXT / OneVision tiles (``AnyresTransform``) show the image in several views of
        its own proportions and none in one pixel frame: coordinates relative to the image
        (``qwen2-vl``, ``qwen3-vl``, ``normalized``) stay true there; pixels (``qwen2.5-vl``)
        and LLaVA-1.5's padded square (``llava``) do not.
        """
        refused = ("qwen2.5-vl", "llava") if getattr(transform, "tiled", True) else ("qwen2.5-vl",)
        if _is_anyres(transform) and self.convention in refused:
            raise ConfigError(
                f"{self.convention} coordinates cannot follow LLaVA-NeXT / OneVision tiles: "
                f"they show the image in several views, none of them the frame the numbers "
                f"are of; write the boxes relative to the image (geometry qwen2-vl, qwen3-vl "
                f"or normalized)",
                param="geometry",
            )

    def fingerprint(self) -> dict[str, Any]:
        # rules: 2 (Qwen3-VL's grid; relative boxes under a plain resize left as written;
        # LLaVA's floor-offset square; fractions outside [0, 1] invalid): caches and lengths
        # of the earlier rules' texts are not reused
        return {"convention": self.convention, "outside": self.outside, "rules": 2}

    def find(self, text: str) -> bool:
        """Whether ``text`` holds coordinates of this convention."""
        return any(True for _ in self._matches(text))

    def _matches(self, text: str) -> Any:
        """``(match, coordinates)`` of every coordinate group of this convention in ``text``."""
        for pattern, n in _PATTERNS[self.convention]:
            for match in pattern.finditer(text):
                if self._is_coordinates(match, n):
                    yield match, n

    def _is_coordinates(self, match: re.Match[str], n: int) -> bool:
        """Whether a bracketed run of numbers is a box.

        For ``normalized`` and ``llava``, four numbers that read as fractions of an image: two
        or more with a decimal point in [0, 1] and none beyond 10 (a slip past 1 is then a
        ``box_invalid`` box; ``[12.5, 30.0, 45.2, 60.1]``, ``[3.14, 2.71, 1.41, 1.73]`` and
        ``[1, 2, 3, 4]`` are text), or 0s and 1s in a box's order (``[0, 0, 1, 1]``; a one-hot
        ``[0, 1, 0, 0]`` is text). Other conventions' patterns are boxes.
        """
        if self.convention not in ("normalized", "llava"):
            return True
        raw = [match.group(i + 2) for i in range(n)]
        vals = [float(v) for v in raw]
        if all(v in ("0", "1") for v in raw):
            return vals[0] <= vals[2] and vals[1] <= vals[3]
        fractions = sum(1 for v, x in zip(raw, vals, strict=True) if "." in v and 0 <= x <= 1)
        return fractions >= 2 and all(abs(x) <= 10 for x in vals)

    def moves(self, image: ImageMap) -> bool:
        """Whether the text's numbers change for ``image`` (its resize, pad, crop or flip).

        Seen in this convention's frame: a relative one keeps its numbers under a plain resize.

        Example:
            >>> resize = ImageMap((100, 50), (2.0, 2.0), (0.0, 0.0), (100, 200))
            >>> Geometry("qwen2-vl").moves(resize), Geometry("qwen2.5-vl").moves(resize)
            (False, True)
        """
        if self.convention not in _GRID:
            return image.moves
        corners = np.array([0.0, _GRID[self.convention]])
        x, y = self._to_pixels(corners, corners, image)
        fx, fy = image.forward(x, y)
        wx, wy = self.to_grid(fx, fy, image)
        return not (np.allclose(wx, corners, atol=1e-9) and np.allclose(wy, corners, atol=1e-9))

    def rewrite(
        self,
        text: str,
        maps: Sequence[ImageMap],
        widest: bool = False,
        canonical: bool = False,
    ) -> str:
        """``text`` with every coordinate moved through its image's map.

        ``widest``: write every coordinate at the widest form any draw could give (``1000``
        for ``qwen2-vl``, the image's longest prepared side for ``qwen2.5-vl``, ``0.99..`` with
        as many decimals as written for ``normalized`` and ``llava``): the text of the
        lengths pass under augmentation, never shorter than an augmented sample's. Numbers
        are still checked (``box_invalid``); nothing is moved, so nothing is outside.
        ``canonical``: a sample's coordinates written in the convention's own form even where
        its map moves nothing (a draw without a crop or flip): a form as written
        (``[10.125, ...]``, spaces) can be longer than the widest one, and a packed row planned
        from the widest lengths would be cut.

        Raises:
            SampleError: ``box_outside`` (a box or point left the image), ``box_ambiguous``
                (coordinates that must move in a sample of several images), ``box_invalid``
                (numbers out of the convention's range, a box with its corners swapped).
        """
        if not maps or not self.find(text):
            return text
        if widest:
            for pattern, n in _PATTERNS[self.convention]:
                text = pattern.sub(functools.partial(self._widest, n=n, maps=maps), text)
            return text
        if not canonical and not any(self.moves(m) for m in maps):
            for match, n in self._matches(text):  # still checked: an invalid box is one
                self._image_for(match, n, maps)
            return text
        # several images: boxes that must move, or ones under crops and flips, where each
        # image has its own draw every epoch (rejected whatever this epoch's draw, not some
        # epochs only)
        if len(maps) > 1:
            raise SampleError(
                "box_ambiguous",
                f"the text holds {self.convention} coordinates and the sample {len(maps)} "
                f"images: which image a box refers to is not written, so it cannot follow "
                f"the pixels",
            )
        image = maps[0]
        for pattern, n in _PATTERNS[self.convention]:
            text = pattern.sub(functools.partial(self._move, n=n, image=image), text)
        return text

    def _image_for(self, match: re.Match[str], n: int, maps: Sequence[ImageMap]) -> ImageMap:
        """The first image the coordinates are valid for (``box_invalid`` where none is)."""
        vals = np.array([float(match.group(i + 2)) for i in range(n)])
        for image in maps:
            try:
                self._read(vals[0::2], vals[1::2], image, match.group(0))
                return image
            except SampleError:
                if image is maps[-1]:
                    raise
        raise AssertionError("no maps")  # rewrite() returns before, without maps

    # -- one match ---------------------------------------------------------------------------

    def _widest(self, match: re.Match[str], n: int, maps: Sequence[ImageMap]) -> str:
        if not self._is_coordinates(match, n):
            return match.group(0)
        raw = [match.group(i + 2) for i in range(n)]
        self._image_for(match, n, maps)  # invalid for every image it could refer to
        c = self.convention
        if c == "qwen2-vl":
            return match.group(1) + ",".join(["(1000,1000)"] * (n // 2))
        if c in ("qwen2.5-vl", "qwen3-vl"):
            side = "1000" if c == "qwen3-vl" else str(max(max(m.size) for m in maps))
            return match.group(1) + "[" + ", ".join([side] * n) + "]"
        digits = max(2, max(len(v.split(".")[1]) if "." in v else 0 for v in raw))
        return match.group(1) + "[" + ", ".join(["0." + "9" * digits] * n) + "]"

    def _move(self, match: re.Match[str], n: int, image: ImageMap) -> str:
        if not self._is_coordinates(match, n):
            return match.group(0)
        raw = [match.group(i + 2) for i in range(n)]
        vals = np.array([float(v) for v in raw])
        x, y = self._read(vals[0::2], vals[1::2], image, match.group(0))
        fx, fy = image.forward(x, y)
        h, w = image.size
        if n == 4:
            fx, fy = np.sort(fx), np.sort(fy)  # a flip swaps the corners
            if fx[1] <= 0 or fy[1] <= 0 or fx[0] >= w or fy[0] >= h:
                raise _outside(match.group(0), "box")
            off = fx[0] < 0 or fy[0] < 0 or fx[1] > w or fy[1] > h
            if off and self.outside == "reject":
                raise _outside(match.group(0), "box", clipped=False)
            fx, fy = np.clip(fx, 0, w), np.clip(fy, 0, h)
        elif not (0 <= fx[0] <= w and 0 <= fy[0] <= h):
            raise _outside(match.group(0), "point")
        return match.group(1) + self._write(fx, fy, image, raw, n)

    def _read(
        self, x: np.ndarray, y: np.ndarray, image: ImageMap, found: str
    ) -> tuple[np.ndarray, np.ndarray]:
        """The text's numbers -> original pixel coordinates."""
        w0, h0 = image.original
        c = self.convention
        if len(x) == 2 and (x[0] > x[1] or y[0] > y[1]):
            raise SampleError("box_invalid", f"{found}: the first corner is not the top left")
        top = _GRID.get(c)
        if top is not None:
            if (x < 0).any() or (y < 0).any() or (x > top).any() or (y > top).any():
                span = "0-1000" if top == 1000 else "0-1"
                raise SampleError("box_invalid", f"{found}: {c} coordinates are {span}")
        elif (x < 0).any() or (y < 0).any() or (x > w0).any() or (y > h0).any():
            raise SampleError("box_invalid", f"{found}: outside the {w0}x{h0} image it refers to")
        return self._to_pixels(x, y, image)

    def _to_pixels(
        self, x: np.ndarray, y: np.ndarray, image: ImageMap
    ) -> tuple[np.ndarray, np.ndarray]:
        """The convention's numbers -> pixels of the original image (no checks)."""
        w0, h0 = image.original
        c = self.convention
        if c == "llava":  # of the image padded to a square, pasted at (side - w) // 2
            side = max(w0, h0)
            return x * side - (side - w0) // 2, y * side - (side - h0) // 2
        if c in _GRID:
            return x / _GRID[c] * w0, y / _GRID[c] * h0
        return x, y

    def to_grid(
        self, fx: np.ndarray, fy: np.ndarray, image: ImageMap
    ) -> tuple[np.ndarray, np.ndarray]:
        """Pixels of ``image`` -> a relative convention's numbers (not rounded).

        Example:
            >>> Geometry("llava").to_grid(np.array([0.0]), np.array([0.0]), ImageMap.of((100, 50)))
            (array([0.]), array([0.25]))
        """
        h, w = image.size
        c = self.convention
        if c == "llava":
            side = max(w, h)
            return (fx + (side - w) // 2) / side, (fy + (side - h) // 2) / side
        return fx / w * _GRID[c], fy / h * _GRID[c]

    def _write(
        self, fx: np.ndarray, fy: np.ndarray, image: ImageMap, raw: list[str], n: int
    ) -> str:
        """Pixels of the model's image -> the convention's text (corners rounded outwards)."""
        c = self.convention
        if c == "qwen2.5-vl":  # pixels
            return _listed(_outward(fx, n), _outward(fy, n), str)
        gx, gy = self.to_grid(fx, fy, image)
        if c in ("qwen2-vl", "qwen3-vl"):  # integers 0-1000
            xs, ys = _outward(gx, n), _outward(gy, n)
            return (
                f"({xs[0]},{ys[0]}),({xs[1]},{ys[1]})" if c == "qwen2-vl" else _listed(xs, ys, str)
            )
        # fractions, with as many decimals as written (at least 2)
        digits = max(2, max(len(v.split(".")[1]) if "." in v else 0 for v in raw))
        step = 10.0**digits
        xs, ys = _outward(gx * step, n), _outward(gy * step, n)
        return _listed(xs, ys, lambda v: _decimal(v / step, digits))


def _listed(xs: list[int], ys: list[int], shown: Any) -> str:
    """``[x1, y1, x2, y2]`` (or ``[x, y]``), each number written by ``shown``."""
    return "[" + ", ".join(shown(v) for pair in zip(xs, ys, strict=True) for v in pair) + "]"


def _decimal(value: float, digits: int) -> str:
    """``value`` with at most ``digits`` decimals and at least one (0.5, not 0.500)."""
    text = f"{value:.{digits}f}".rstrip("0")
    return text + "0" if text.endswith(".") else text


def _outward(values: np.ndarray, n: int) -> list[int]:
    """Integers that keep the box around its object: floor the first corner, ceil the second.

    A tolerance of 1e-6 keeps an unmoved coordinate (1000 * v / 1000) exactly where it was.
    """
    if n == 2:
        return [math.floor(float(values[0]) + 0.5)]
    return [math.floor(float(values[0]) + 1e-6), math.ceil(float(values[1]) - 1e-6)]


def _outside(found: str, what: str, clipped: bool = True) -> SampleError:
    why = "nothing of it is left in the image" if clipped else "it leaves the image"
    return SampleError(
        "box_outside",
        f"{found}: after the crop {why} (outside={'clip' if clipped else 'reject'}); the "
        f"sample is skipped rather than train on a {what} that points elsewhere",
    )


# What ``Recipe(geometry=...)`` takes (see ``Geometry.of``).
GeometryOption = Geometry | str | Mapping[str, str] | None
