"""Image augmentation that is a pure function of (seed, epoch, sample id): resumes exactly.

Every random choice for an image (the crop, the flip, the colour factors, the seed of a user's
torch transform) comes from a generator seeded by ``(seed, epoch, sample id, image index,
component)`` through numpy's ``SeedSequence``, never from the worker, the rank or the order in
which samples arrive. A run resumed exactly or elastically (another world size, other workers)
therefore draws the same crops for the same samples as the uninterrupted run.

Augmentation runs on the *prepared* pixels (the transform's geometry step: resized, uint8
``(H, W, 3)``), after the pre-decoded pixel store and before ``finish`` (normalise, patches)::

    store hit / decode + transform.prepare ──► uint8 (H, W, 3)   (the store keeps this, clean)
        ──► Augment.apply: random resized crop (back to H x W), flip, colour jitter, user's
        ──► transform.finish ──► pixels, grid_thw       (same H x W: the token count holds)

The crop is resized back to the prepared size, so an augmented image makes exactly the tokens
the recipe counted from the header. Its geometry is known before any pixel is decoded (the
prepared size follows from the header), so the recipe rewrites boxes in the text with the same
draw (``chute.media.geometry``).

Example:
    >>> aug = Augment(crop=RandomResizedCrop(scale=(0.5, 1.0)), flip=0.5)
    >>> a = aug.draw(seed=0, epoch=1, sample_id=7, image=0, height=224, width=224)
    >>> b = aug.draw(seed=0, epoch=1, sample_id=7, image=0, height=224, width=224)
    >>> a == b
    True
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Any

import numpy as np
from PIL import Image

from chute.errors import ConfigError
from chute.media.transforms import RESAMPLE

__all__ = [
    "Augment",
    "ColorJitter",
    "ImageDraw",
    "RandomResizedCrop",
    "SampleDraw",
    "TorchTransform",
    "sample_rng",
]

_MASK = (1 << 64) - 1
# Component numbers in the seed: each part draws from its own stream, so adding colour jitter
# to a recipe does not change the crops it drew before.
_CROP, _FLIP, _JITTER, _USER = 0, 1, 2, 3
LEFT_RIGHT = ("skip", "reject")


def sample_rng(seed: int, epoch: int, sample_id: int, image: int = 0, part: int = 0) -> Any:
    """The generator of one image's draws: a stable hash of the five integers.

    Example:
        >>> int(sample_rng(0, 0, 5).integers(1000)) == int(sample_rng(0, 0, 5).integers(1000))
        True
    """
    words = [int(seed) & _MASK, int(epoch), int(sample_id), int(image), int(part)]
    return np.random.default_rng(np.random.SeedSequence(words))


def _range(value: Any, name: str, low: float = 0.0, high: float = math.inf) -> tuple[float, float]:
    try:
        a, b = (float(v) for v in value)
    except (TypeError, ValueError):
        raise ConfigError(f"expected a (min, max) pair, got {value!r}", param=name) from None
    if not low <= a <= b <= high:
        raise ConfigError(f"expected {low} <= min <= max <= {high}, got {value!r}", param=name)
    return a, b


@dataclasses.dataclass(frozen=True)
class RandomResizedCrop:
    """torchvision's random resized crop, resized back to the prepared size.

    Args:
        scale: the crop's area as a fraction of the image's, drawn uniformly.
        ratio: the crop's aspect ratio (width / height), drawn log-uniformly.
        resample: Pillow filter for resizing the crop back (``bilinear``, as torchvision).

    Example:
        >>> RandomResizedCrop(scale=(0.5, 1.0)).params(sample_rng(0, 0, 0), 100, 200)
        (3, 23, 94, 113)
    """

    scale: tuple[float, float] = (0.08, 1.0)
    ratio: tuple[float, float] = (3 / 4, 4 / 3)
    resample: str = "bilinear"

    def __post_init__(self) -> None:
        scale = _range(self.scale, "scale", 0.0, 1.0)
        if scale[1] <= 0:
            raise ConfigError(
                f"the largest area must be above 0, got {self.scale!r}", param="scale"
            )
        object.__setattr__(self, "scale", scale)
        ratio = _range(self.ratio, "ratio")
        if ratio[0] <= 0:
            raise ConfigError(f"ratios must be above 0, got {self.ratio!r}", param="ratio")
        object.__setattr__(self, "ratio", ratio)
        if self.resample not in RESAMPLE:
            raise ConfigError(
                f"expected one of {', '.join(RESAMPLE)}, got {self.resample!r}", param="resample"
            )

    def params(self, rng: Any, height: int, width: int) -> tuple[int, int, int, int]:
        """``(top, left, crop_height, crop_width)``: torchvision's ``get_params`` algorithm."""
        area = height * width
        log_ratio = (math.log(self.ratio[0]), math.log(self.ratio[1]))
        for _ in range(10):
            target = area * float(rng.uniform(*self.scale))
            aspect = math.exp(float(rng.uniform(*log_ratio)))
            w = round(math.sqrt(target * aspect))
            h = round(math.sqrt(target / aspect))
            if 0 < w <= width and 0 < h <= height:
                top = int(rng.integers(0, height - h + 1))
                left = int(rng.integers(0, width - w + 1))
                return top, left, h, w
        # ten misses: the largest centred crop within the ratio bounds (torchvision's fallback)
        in_ratio = width / height
        if in_ratio < self.ratio[0]:
            w, h = width, round(width / self.ratio[0])
        elif in_ratio > self.ratio[1]:
            h, w = height, round(height * self.ratio[1])
        else:
            w, h = width, height
        return (height - h) // 2, (width - w) // 2, h, w


@dataclasses.dataclass(frozen=True)
class ColorJitter:
    """Brightness, contrast, saturation and hue, in a drawn order (torchvision's PIL arithmetic).

    Each of ``brightness``, ``contrast``, ``saturation`` gives a factor drawn from ``[max(0,
    1 - v), 1 + v]``; ``hue`` a shift drawn from ``[-hue, hue]`` (at most 0.5 of a turn).

    Example:
        >>> ColorJitter(brightness=0.2).factors(sample_rng(0, 0, 0))[1][0] != 1.0
        True
    """

    brightness: float = 0.0
    contrast: float = 0.0
    saturation: float = 0.0
    hue: float = 0.0

    def __post_init__(self) -> None:
        for name in ("brightness", "contrast", "saturation", "hue"):
            v = getattr(self, name)
            top = 0.5 if name == "hue" else math.inf
            if isinstance(v, bool) or not isinstance(v, int | float) or not 0 <= v <= top:
                raise ConfigError(f"expected a number in [0, {top}], got {v!r}", param=name)

    def factors(self, rng: Any) -> tuple[tuple[int, ...], tuple[float, float, float, float]]:
        """``(order, (brightness, contrast, saturation, hue))``; every value is always drawn."""
        order = tuple(int(i) for i in rng.permutation(4))
        b, c, s = (float(rng.uniform(max(0.0, 1 - v), 1 + v)) for v in self._bcs())
        h = float(rng.uniform(-self.hue, self.hue))
        return order, (b, c, s, h)

    def _bcs(self) -> tuple[float, float, float]:
        return (self.brightness, self.contrast, self.saturation)


def _jitter(image: Image.Image, order: tuple[int, ...], f: tuple[float, ...]) -> Image.Image:
    # imported here: ImageEnhance brings ImageFilter (about 18 ms), which every recipe would
    # pay at import through the media geometry, images or not
    from PIL import ImageEnhance

    for i in order:
        if i == 3:
            if f[3] != 0.0:
                hsv = np.array(image.convert("HSV"), dtype=np.uint8)
                # uint8 hue wraps around, as torchvision's PIL adjust_hue
                hsv[..., 0] = (hsv[..., 0].astype(np.int16) + int(f[3] * 255)) % 256
                image = Image.fromarray(hsv, "HSV").convert("RGB")
        elif f[i] != 1.0:
            enhance = (ImageEnhance.Brightness, ImageEnhance.Contrast, ImageEnhance.Color)[i]
            image = enhance(image).enhance(f[i])
    return image


@dataclasses.dataclass(frozen=True)
class TorchTransform:
    """A user's pixel transform (any torchvision v2 transform) made deterministic per sample.

    torchvision's transforms draw from torch's global generator. chute runs ``fn`` under
    ``torch.random.fork_rng()`` with the global generator seeded from the sample's own seed, so
    the same sample gets the same draw in any worker, after any resume, and the training loop's
    generator is left untouched. ``fn`` takes and returns a uint8 ``(3, H, W)`` tensor of the
    same size (``pass_generator=True``: ``fn(tensor, generator)`` with a seeded
    ``torch.Generator`` instead). Use it for what changes pixel values (colour, blur, noise):
    a geometric transform here would move the pixels without the boxes in the text, so crops
    and flips go through chute's own (``RandomResizedCrop``, ``Augment.flip``).

    Example:
        >>> from torchvision.transforms import v2  # doctest: +SKIP
        >>> Augment(transform=TorchTransform(v2.RandomGrayscale(p=0.2)))  # doctest: +SKIP
    """

    fn: Callable[..., Any]
    pass_generator: bool = False

    def __post_init__(self) -> None:
        if not callable(self.fn):
            raise ConfigError(f"expected a callable, got {type(self.fn).__name__}", param="fn")

    def __call__(self, pixels: np.ndarray, seed: int) -> np.ndarray:
        import torch

        x = torch.from_numpy(np.ascontiguousarray(pixels.transpose(2, 0, 1)))
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            if self.pass_generator:
                out = self.fn(x, torch.Generator().manual_seed(seed))
            else:
                out = self.fn(x)
        if not isinstance(out, torch.Tensor) or out.dtype != torch.uint8 or out.shape != x.shape:
            got = (
                f"{out.dtype} {tuple(out.shape)}"
                if isinstance(out, torch.Tensor)
                else type(out).__name__
            )
            raise ConfigError(
                f"the augmentation transform returned {got}; it must return a uint8 tensor of "
                f"the shape it was given, {tuple(x.shape)} (chute normalises afterwards; crops "
                f"belong to RandomResizedCrop, which keeps boxes in the text aligned)",
                param="transform",
            )
        return np.ascontiguousarray(out.numpy().transpose(1, 2, 0))

    def fingerprint(self) -> str:
        return repr(self.fn)


@dataclasses.dataclass(frozen=True)
class ImageDraw:
    """What was drawn for one image: the crop in prepared pixels, the flip, colour, user seed.

    ``size`` is the prepared (and output) ``(height, width)``; ``crop`` ``(top, left, height,
    width)`` or ``None``.
    """

    size: tuple[int, int]
    crop: tuple[int, int, int, int] | None = None
    flip: bool = False
    jitter: tuple[tuple[int, ...], tuple[float, float, float, float]] | None = None
    user_seed: int | None = None

    @property
    def geometric(self) -> bool:
        """Whether pixels move (a crop or a flip): boxes in the text must follow."""
        return self.crop is not None or self.flip

    def map_points(self, x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Prepared-image coordinates (pixel edges: 0 .. width) -> the augmented image's."""
        h, w = self.size
        if self.crop is not None:
            top, left, ch, cw = self.crop
            x = (x - left) * (w / cw)
            y = (y - top) * (h / ch)
        if self.flip:
            x = w - x
        return x, y


@dataclasses.dataclass(frozen=True)
class Augment:
    """Random resized crop, horizontal flip, colour jitter and a user transform, per sample.

    Args:
        crop: a ``RandomResizedCrop`` (``None``: no crop).
        flip: probability of a horizontal flip.
        jitter: a ``ColorJitter`` (``None``: none).
        transform: a ``TorchTransform`` (or a callable, wrapped in one): any torchvision v2
            pixel transform, run last.
        left_right: what a flip does to a sample whose text says left or right (a flip would
            make it false): ``skip`` the flip for that sample (default), or ``reject`` the sample
            (counted as ``flip_left_right``).
        seed: the augmentation's seed; ``None``: the Loader's ``seed``.

    Example:
        >>> aug = Augment(flip=1.0)
        >>> pixels = np.arange(12, dtype=np.uint8).reshape(1, 4, 3)
        >>> aug.apply(pixels, aug.draw(0, 0, 0, 0, 1, 4))[0, 0].tolist()
        [9, 10, 11]
    """

    crop: RandomResizedCrop | None = None
    flip: float = 0.0
    jitter: ColorJitter | None = None
    transform: Any = None
    left_right: str = "skip"
    seed: int | None = None

    def __post_init__(self) -> None:
        if self.crop is not None and not isinstance(self.crop, RandomResizedCrop):
            raise ConfigError(
                f"expected a RandomResizedCrop, got {type(self.crop).__name__}", param="crop"
            )
        if self.jitter is not None and not isinstance(self.jitter, ColorJitter):
            raise ConfigError(
                f"expected a ColorJitter, got {type(self.jitter).__name__}", param="jitter"
            )
        p = self.flip
        if isinstance(p, bool) or not isinstance(p, int | float) or not 0 <= p <= 1:
            raise ConfigError(f"expected a probability in [0, 1], got {p!r}", param="flip")
        if self.transform is not None and not isinstance(self.transform, TorchTransform):
            object.__setattr__(self, "transform", TorchTransform(self.transform))
        if self.left_right not in LEFT_RIGHT:
            raise ConfigError(
                f"expected one of {', '.join(LEFT_RIGHT)}, got {self.left_right!r}",
                param="left_right",
            )
        if self.seed is not None and (
            isinstance(self.seed, bool) or not isinstance(self.seed, int)
        ):
            raise ConfigError(f"expected an int or None, got {self.seed!r}", param="seed")

    @property
    def geometric(self) -> bool:
        """Whether it can move pixels (crop or flip), so text coordinates must follow."""
        return self.crop is not None or self.flip > 0

    def draw(
        self,
        seed: int,
        epoch: int,
        sample_id: int,
        image: int,
        height: int,
        width: int,
        flip_allowed: bool = True,
    ) -> ImageDraw:
        """The draw of image ``image`` of sample ``sample_id`` in ``epoch`` (prepared size)."""
        if self.seed is not None:
            seed = self.seed
        key = (seed, epoch, sample_id, image)
        crop = None
        if self.crop is not None:
            crop = self.crop.params(sample_rng(*key, _CROP), height, width)
            if crop == (0, 0, height, width):
                crop = None  # the whole image: nothing moves
        flip = False
        if self.flip > 0:
            # drawn whatever the text says, so the guard changes no other draw
            flip = bool(sample_rng(*key, _FLIP).random() < self.flip) and flip_allowed
        jitter = None if self.jitter is None else self.jitter.factors(sample_rng(*key, _JITTER))
        user = None
        if self.transform is not None:
            user = int(sample_rng(*key, _USER).integers(0, 2**63 - 1))
        return ImageDraw((height, width), crop, flip, jitter, user)

    def apply(self, pixels: np.ndarray, draw: ImageDraw) -> np.ndarray:
        """Prepared uint8 ``(H, W, 3)`` pixels -> augmented ones of the same shape."""
        h, w = pixels.shape[:2]
        if (h, w) != draw.size:
            raise ConfigError(
                f"an augmentation drawn for {draw.size[1]}x{draw.size[0]} pixels was given "
                f"{w}x{h}; the pixel store and the recipe disagree on the prepared size"
            )
        image: Image.Image | None = None
        if draw.crop is not None and self.crop is not None:
            top, left, ch, cw = draw.crop
            image = Image.fromarray(pixels).resize(
                (w, h), RESAMPLE[self.crop.resample], box=(left, top, left + cw, top + ch)
            )
        if draw.flip:
            image = (image or Image.fromarray(pixels)).transpose(Image.Transpose.FLIP_LEFT_RIGHT)
        if draw.jitter is not None:
            image = _jitter(image or Image.fromarray(pixels), *draw.jitter)
        out = pixels if image is None else np.asarray(image, dtype=np.uint8)
        if draw.user_seed is not None:
            out = self.transform(out, draw.user_seed)
        return np.ascontiguousarray(out)

    def fingerprint(self) -> dict[str, Any]:
        """What shapes the augmented pixels (JSON-able)."""
        out = dataclasses.asdict(self)
        out["transform"] = None if self.transform is None else self.transform.fingerprint()
        return out


@dataclasses.dataclass(frozen=True)
class SampleDraw:
    """One sample's key to its augmentation: what the Loader gives the recipe and the stage.

    The recipe rewrites coordinates in the text with ``image(i, h, w)`` and the media stage
    moves pixels with the same call, so text and pixels agree without sharing any state.
    ``transform`` is the media stage's image transform: where prepared sizes come from.
    """

    augment: Augment
    seed: int
    epoch: int
    sample_id: int
    transform: Any = None

    def image(self, index: int, height: int, width: int, flip_allowed: bool = True) -> ImageDraw:
        """The draw of the sample's image ``index``, whose prepared size is ``height x width``."""
        return self.augment.draw(
            self.seed, self.epoch, self.sample_id, index, height, width, flip_allowed
        )
