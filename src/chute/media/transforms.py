"""Image transforms without torchvision: Pillow for geometry, numpy for arithmetic.

Every transform works in two steps, so a pre-decoded store can keep the first one's output:

1. ``prepare(image) -> uint8 array (H, W, 3)``: the geometry (resize, crop or pad), in Pillow;
2. ``finish(pixels) -> ImageFeatures``: rescale, normalise, channels first (and for dynamic
   resolution, cut into patches), in numpy float32.

``ImageTransform`` is the fixed-size CLIP / SigLIP pipeline (LLaVA)::

    decoded RGB ──pad_to_square?──► resize (shorter side = size, or exactly (h, w)) ──►
    center crop ──► x * rescale ──► (x - mean) / std ──► (3, H, W) float32

``DynamicResolution`` is Qwen2-VL's: each image resized to multiples of ``patch_size *
merge_size`` within ``[min_pixels, max_pixels]`` (``smart_resize``, the same function the recipe
counts tokens with), normalised, repeated ``temporal_patch_size`` times and flattened into
``(grid_t * grid_h * grid_w, 3 * temporal_patch_size * patch_size**2)`` patches, with
``grid_thw`` and ``grid_t * grid_h * grid_w // merge_size**2`` tokens, exactly what
``transformers``' Qwen2-VL image processor returns.

Example:
    >>> from PIL import Image
    >>> t = ImageTransform(size=336, crop=336, normalize="clip")
    >>> t(Image.new("RGB", (640, 480))).pixels.shape
    (3, 336, 336)
    >>> d = DynamicResolution()
    >>> out = d(Image.new("RGB", (300, 168)))
    >>> out.pixels.shape, out.grid_thw, out.num_features
    ((264, 1176), (1, 12, 22), 66)
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
from PIL import Image

from chute.errors import ConfigError
from chute.media.sizes import smart_resize
from chute.media.tokens import DynamicImageTokens

__all__ = [
    "NORMALIZE_PRESETS",
    "DynamicResolution",
    "ImageFeatures",
    "ImageTransform",
    "normalize_chw",
]

CLIP_MEAN = (0.48145466, 0.4578275, 0.40821073)
CLIP_STD = (0.26862954, 0.26130258, 0.27577711)
NORMALIZE_PRESETS: dict[str, tuple[tuple[float, ...], tuple[float, ...]]] = {
    "clip": (CLIP_MEAN, CLIP_STD),  # OpenAI CLIP, LLaVA, Qwen2-VL / Qwen2.5-VL
    "siglip": ((0.5, 0.5, 0.5), (0.5, 0.5, 0.5)),  # SigLIP, Qwen3-VL
    "imagenet": ((0.485, 0.456, 0.406), (0.229, 0.224, 0.225)),
}
RESAMPLE = {
    "nearest": Image.Resampling.NEAREST,
    "bilinear": Image.Resampling.BILINEAR,
    "bicubic": Image.Resampling.BICUBIC,
    "lanczos": Image.Resampling.LANCZOS,
}


@dataclass(slots=True)
class ImageFeatures:
    """One image, ready for the model.

    Attributes:
        pixels: ``(3, H, W)`` (fixed size) or ``(num_patches, patch_dim)`` (dynamic), float32.
        grid_thw: ``(t, h, w)`` in patches for dynamic resolution, else ``None``.
        num_features: image tokens the vision tower makes of it (``None``: not known here).
    """

    pixels: np.ndarray
    grid_thw: tuple[int, int, int] | None = None
    num_features: int | None = None


def _normalization(value: Any) -> tuple[np.ndarray, np.ndarray] | None:
    if value is None:
        return None
    if isinstance(value, str):
        if value not in NORMALIZE_PRESETS:
            raise ConfigError(
                f"unknown preset {value!r}; use one of "
                f"{', '.join(NORMALIZE_PRESETS)}, a (mean, std) pair, or None",
                param="normalize",
            )
        value = NORMALIZE_PRESETS[value]
    try:
        mean, std = (np.asarray(v, dtype=np.float32).reshape(-1) for v in value)
    except (TypeError, ValueError):
        raise ConfigError(
            f"expected a preset name or (mean, std) with 3 values each, got {value!r}",
            param="normalize",
        ) from None
    if mean.shape != (3,) or std.shape != (3,) or (std <= 0).any():
        raise ConfigError(
            f"mean and std need 3 values each and std > 0, got {value!r}", param="normalize"
        )
    return mean, std


def normalize_chw(
    pixels: np.ndarray, rescale: float, norm: tuple[np.ndarray, np.ndarray] | None
) -> np.ndarray:
    """uint8 ``(..., H, W, 3)`` -> float32 ``(..., 3, H, W)``: ``(x * rescale - mean) / std``.

    Computed as ``x * (rescale / std) - mean / std`` in float32 (one multiply-add per value);
    it differs from the two-step float64 arithmetic of ``transformers`` by at most a few float32
    ulps (|diff| < 1e-5 for CLIP's constants).
    """
    x = np.moveaxis(pixels, -1, -3).astype(np.float32)
    if norm is None:
        if rescale != 1.0:
            x *= np.float32(rescale)
        return x
    mean, std = norm
    scale = (np.float32(rescale) / std).reshape(3, 1, 1)
    shift = (mean / std).reshape(3, 1, 1)
    x *= scale
    x -= shift
    return x


def _check_rescale(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
        raise ConfigError(
            f"expected a positive number such as 1/255, got {value!r}", param="rescale"
        )
    return float(value)


def _check_resample(value: Any) -> Image.Resampling:
    if value not in RESAMPLE:
        raise ConfigError(f"expected one of {', '.join(RESAMPLE)}, got {value!r}", param="resample")
    return RESAMPLE[value]


def _pair(value: Any, name: str) -> tuple[int, int] | int:
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return value
    if (
        isinstance(value, tuple | list)
        and len(value) == 2
        and all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in value)
    ):
        return (int(value[0]), int(value[1]))
    raise ConfigError(
        f"{name}: expected a positive int or a (height, width) pair of positive ints, got {value!r}"
    )


@dataclass(frozen=True)
class ImageTransform:
    """Fixed-size images: resize, center crop, rescale, normalise to ``(3, H, W)`` float32.

    Args:
        size: an int resizes the shorter side to it (the longer one keeps the aspect ratio,
            rounded down, as ``transformers``' CLIP processor); ``(height, width)`` resizes to
            exactly that.
        crop: center crop to this (an int is a square); ``None`` keeps the resized image, which
            must then be ``(height, width)``-sized so every image has one shape.
        resample: ``bicubic`` (CLIP, SigLIP), ``bilinear``, ``lanczos`` or ``nearest``; Pillow
            antialiases when downscaling.
        pad_to_square: first pad the image to a square with the mean colour, centred (LLaVA-1.5's
            ``image_aspect_ratio="pad"``).
        rescale: factor from uint8 values (``1/255``).
        normalize: ``clip``, ``siglip``, ``imagenet``, ``(mean, std)`` or ``None``.
        tokens_per_image: image features the vision tower makes of one image (LLaVA-1.5: 576);
            checked against the image tokens in ``input_ids``. ``None``: the recipe's fixed count.

    Example:
        >>> from PIL import Image
        >>> ImageTransform(size=(224, 224), crop=None)(Image.new("RGB", (50, 80))).pixels.shape
        (3, 224, 224)
    """

    size: int | tuple[int, int] = 336
    crop: int | tuple[int, int] | None = 336
    resample: str = "bicubic"
    pad_to_square: bool = False
    rescale: float = 1 / 255
    normalize: Any = "clip"
    tokens_per_image: int | None = None
    kind: str = field(default="fixed", init=False)

    def __post_init__(self) -> None:
        size = _pair(self.size, "size")
        crop = None if self.crop is None else _pair(self.crop, "crop")
        if crop is None and isinstance(size, int):
            raise ConfigError(
                f"None with size={size} (shorter side) gives images of different shapes "
                f"that cannot be stacked; pass crop={size} or size=({size}, {size})",
                param="crop",
            )
        _check_resample(self.resample)
        _check_rescale(self.rescale)
        _normalization(self.normalize)
        t = self.tokens_per_image
        if t is not None and (isinstance(t, bool) or not isinstance(t, int) or t < 1):
            raise ConfigError(
                f"expected a positive int or None, got {t!r}", param="tokens_per_image"
            )
        object.__setattr__(self, "size", size)
        object.__setattr__(self, "crop", crop)

    @property
    def output_size(self) -> tuple[int, int]:
        """``(height, width)`` of every output image."""
        target = self.crop if self.crop is not None else self.size
        return (target, target) if isinstance(target, int) else target

    def prepare(self, image: Image.Image) -> np.ndarray:
        """The geometry: an RGB image -> uint8 ``(H, W, 3)`` of ``output_size``."""
        if self.pad_to_square and image.width != image.height:
            norm = _normalization(self.normalize)
            mean = norm[0] if norm is not None else np.zeros(3, dtype=np.float32)
            fill = tuple(int(m * 255) for m in mean)
            side = max(image.size)
            square = Image.new("RGB", (side, side), fill)
            square.paste(image, ((side - image.width) // 2, (side - image.height) // 2))
            image = square
        resample = RESAMPLE[self.resample]
        if isinstance(self.size, int):
            w, h = image.size
            short, long = (w, h) if w <= h else (h, w)
            new_long = int(self.size * long / short)
            new_w, new_h = (self.size, new_long) if w <= h else (new_long, self.size)
        else:
            new_h, new_w = self.size
        if (new_w, new_h) != image.size:
            image = image.resize((new_w, new_h), resample=resample)
        arr = np.asarray(image, dtype=np.uint8)
        if self.crop is not None:
            crop = (self.crop, self.crop) if isinstance(self.crop, int) else self.crop
            arr = _center_crop(arr, *crop)
        return np.ascontiguousarray(arr)

    def finish(self, pixels: np.ndarray) -> ImageFeatures:
        """Rescale and normalise prepared pixels into ``(3, H, W)`` float32."""
        out = normalize_chw(pixels, self.rescale, _normalization(self.normalize))
        return ImageFeatures(out, None, self.tokens_per_image)

    def __call__(self, image: Image.Image) -> ImageFeatures:
        return self.finish(self.prepare(image))

    def fingerprint(self) -> dict[str, Any]:
        """What shapes the prepared pixels (a pre-decoded store keys on it)."""
        return {
            "kind": "fixed",
            "size": list(self.size) if not isinstance(self.size, int) else self.size,
            "crop": list(self.crop) if isinstance(self.crop, tuple) else self.crop,
            "resample": self.resample,
            "pad_to_square": self.pad_to_square,
            "fill": _fill_json(self.normalize) if self.pad_to_square else None,
        }


def _fill_json(normalize: Any) -> list[float] | None:
    norm = _normalization(normalize)
    return None if norm is None else [float(m) for m in norm[0]]


def _center_crop(arr: np.ndarray, crop_h: int, crop_w: int) -> np.ndarray:
    """``transformers``' center crop: offsets rounded down; zero padding where it is larger."""
    h, w = arr.shape[:2]
    if h < crop_h or w < crop_w:
        big = np.zeros((max(h, crop_h), max(w, crop_w), 3), dtype=arr.dtype)
        top, left = (big.shape[0] - h) // 2, (big.shape[1] - w) // 2
        big[top : top + h, left : left + w] = arr
        arr, h, w = big, big.shape[0], big.shape[1]
    top, left = (h - crop_h) // 2, (w - crop_w) // 2
    return arr[top : top + crop_h, left : left + crop_w]


@dataclass(frozen=True)
class DynamicResolution:
    """Qwen2-VL / Qwen2.5-VL / Qwen3-VL dynamic resolution: patches and ``grid_thw``.

    Args:
        patch_size: vision patch side (Qwen2/2.5-VL: 14, Qwen3-VL: 16).
        merge_size: patches merged per side into one token (2).
        temporal_patch_size: frames per temporal patch (2; an image is repeated to fill it).
        min_pixels: smallest resized area (``56 * 56``).
        max_pixels: largest resized area (``28 * 28 * 1280``).
        resample: Pillow filter (``bicubic``, as the Qwen processors).
        rescale: factor from uint8 values.
        normalize: ``clip`` (Qwen2/2.5-VL), ``siglip`` (Qwen3-VL), ``(mean, std)`` or ``None``.

    The token count of an image equals ``DynamicImageTokens`` with the same four size fields,
    which is what the recipe counted; ``rule()`` returns that rule.
    """

    patch_size: int = 14
    merge_size: int = 2
    temporal_patch_size: int = 2
    min_pixels: int = 56 * 56
    max_pixels: int = 28 * 28 * 1280
    resample: str = "bicubic"
    rescale: float = 1 / 255
    normalize: Any = "clip"
    kind: str = field(default="dynamic", init=False)

    def __post_init__(self) -> None:
        self.rule()  # validates the size fields
        t = self.temporal_patch_size
        if isinstance(t, bool) or not isinstance(t, int) or t < 1:
            raise ConfigError(f"expected a positive int, got {t!r}", param="temporal_patch_size")
        _check_resample(self.resample)
        _check_rescale(self.rescale)
        _normalization(self.normalize)

    def rule(self, family: str | None = None) -> DynamicImageTokens:
        """The recipe's token rule that counts exactly what this transform produces.

        ``family``: the model family of the batches' positions (``qwen2-vl``, ``qwen2.5-vl``,
        ``qwen3-vl``; see ``DynamicImageTokens``).
        """
        return DynamicImageTokens(
            patch_size=self.patch_size,
            merge_size=self.merge_size,
            min_pixels=self.min_pixels,
            max_pixels=self.max_pixels,
            family=family,
        )

    def target_size(self, width: int, height: int) -> tuple[int, int]:
        """``(height, width)`` an image of ``width x height`` is resized to."""
        return smart_resize(
            height,
            width,
            factor=self.patch_size * self.merge_size,
            min_pixels=self.min_pixels,
            max_pixels=self.max_pixels,
        )

    def prepare(self, image: Image.Image) -> np.ndarray:
        """The geometry: an RGB image -> uint8 ``(H, W, 3)``, sides multiples of the factor."""
        h, w = self.target_size(image.width, image.height)
        if (w, h) != image.size:
            image = image.resize((w, h), resample=RESAMPLE[self.resample])
        return np.ascontiguousarray(np.asarray(image, dtype=np.uint8))

    def finish(self, pixels: np.ndarray) -> ImageFeatures:
        """Prepared pixels (``(H, W, 3)``, or ``(T, H, W, 3)`` video frames) -> patches."""
        frames = pixels[None] if pixels.ndim == 3 else pixels
        x = normalize_chw(frames, self.rescale, _normalization(self.normalize))  # (T, C, H, W)
        tp, p, m = self.temporal_patch_size, self.patch_size, self.merge_size
        if x.shape[0] % tp:
            pad = np.repeat(x[-1:], tp - x.shape[0] % tp, axis=0)
            x = np.concatenate([x, pad], axis=0)
        t, c, h, w = x.shape
        if h % (p * m) or w % (p * m):
            raise ConfigError(
                f"DynamicResolution.finish: pixels of {w}x{h} are not multiples of patch_size * "
                f"merge_size = {p * m}; pass pixels made by prepare()"
            )
        gt, gh, gw = t // tp, h // p, w // p
        x = x.reshape(gt, tp, c, gh // m, m, p, gw // m, m, p)
        x = x.transpose(0, 3, 6, 4, 7, 2, 1, 5, 8)
        patches = np.ascontiguousarray(x).reshape(gt * gh * gw, c * tp * p * p)
        return ImageFeatures(patches, (gt, gh, gw), gt * gh * gw // (m * m))

    def __call__(self, image: Image.Image) -> ImageFeatures:
        return self.finish(self.prepare(image))

    def fingerprint(self) -> dict[str, Any]:
        """What shapes the prepared pixels (a pre-decoded store keys on it)."""
        fields = asdict(self)
        return {
            "kind": "dynamic",
            **{k: fields[k] for k in ("patch_size", "merge_size", "min_pixels", "max_pixels")},
            "resample": self.resample,
        }
