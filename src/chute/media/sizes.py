"""Image sizes from headers, and the resize rule of dynamic-resolution models.

Counting an image's tokens must not decode it: ``image_size`` opens the file with Pillow, which
reads only the header, and never calls ``load()``. The result is the size as displayed, i.e.
after the EXIF orientation is applied (a phone photo stored 4000x3000 with orientation 6 is
3000x4000), because that is what a loader that applies ``ImageOps.exif_transpose`` (as
``transformers.image_utils.load_image`` does) will feed the model.

``smart_resize`` and ``qwen2vl_grid`` are the Qwen2-VL / Qwen2.5-VL rule: each side rounded to a
multiple of ``patch_size * merge_size``, the area kept within ``[min_pixels, max_pixels]``; the
image becomes ``(h / patch) * (w / patch)`` patches, merged ``merge_size x merge_size`` into one
token each.

Example:
    >>> smart_resize(300, 168, factor=28, min_pixels=3136, max_pixels=1003520)
    (308, 168)
    >>> qwen2vl_grid(300, 168)  # width 300, height 168: 12 x 22 patches, 66 tokens
    (12, 22)
"""

from __future__ import annotations

import base64
import binascii
import io
import math
import os
from typing import IO

from PIL import Image, UnidentifiedImageError

from chute.errors import SampleError
from chute.sources.tar_members import MemberRef, is_member_ref, open_member

__all__ = ["image_size", "qwen2vl_grid", "smart_resize"]

# EXIF orientations 5-8 rotate by 90 or 270 degrees: width and height swap.
_SWAPS_SIDES = frozenset({5, 6, 7, 8})
_EXIF_ORIENTATION = 0x0112


def image_size(source: str | os.PathLike[str], *, exif_transpose: bool = True) -> tuple[int, int]:
    """``(width, height)`` of an image, read from its header only (no pixel is decoded).

    Args:
        source: a local path, a ``data:image/...;base64,...`` URL, or a tar member reference
            (only the bytes the header takes are read, by byte range).
        exif_transpose: report the size after the EXIF orientation is applied.

    Raises:
        SampleError: ``image_missing`` (no such file), ``url_not_allowed`` (a remote URL,
            which chute does not fetch), ``image_corrupt`` (the header is not an image),
            ``image_too_large`` (larger than Pillow's decompression-bomb limit).

    Example:
        >>> import tempfile, pathlib
        >>> p = pathlib.Path(tempfile.mkdtemp()) / "x.png"
        >>> Image.new("RGB", (40, 30)).save(p)
        >>> image_size(p)
        (40, 30)
    """
    text = os.fspath(source)
    if text.startswith(("http://", "https://", "s3://", "gs://", "ftp://", "hf://")):
        raise SampleError(
            "url_not_allowed",
            f"{text} is a remote URL; chute reads images from local files only: download it "
            f"and point the record (or media_root) at the local copy",
        )
    fp: str | IO[bytes] = _data_url(text) if text.startswith("data:") else text
    if text.startswith("data:"):
        text = text[:40] + "..."  # the name in messages, not the whole image
    elif is_member_ref(text):
        ref = MemberRef.parse(text)
        fp, text = open_member(ref), ref.shown
    try:
        with Image.open(fp) as im:
            width, height = im.size
            if exif_transpose:
                try:
                    orientation = im.getexif().get(_EXIF_ORIENTATION)
                except Exception:  # a broken EXIF block does not make the image unusable
                    orientation = None
                if orientation in _SWAPS_SIDES:
                    width, height = height, width
    except FileNotFoundError:
        raise SampleError("image_missing", f"{text}: no such file") from None
    except IsADirectoryError:
        raise SampleError("image_missing", f"{text}: is a directory, not an image") from None
    except Image.DecompressionBombError as exc:
        raise SampleError("image_too_large", f"{text}: {exc}") from None
    except (UnidentifiedImageError, OSError, SyntaxError, ValueError) as exc:
        raise SampleError(
            "image_corrupt", f"{text}: cannot read an image header ({type(exc).__name__}: {exc})"
        ) from None
    if width <= 0 or height <= 0:
        raise SampleError("image_corrupt", f"{text}: the header says {width}x{height} pixels")
    return width, height


def _data_url(url: str) -> io.BytesIO:
    head, _, payload = url.partition(",")
    if not head.endswith(";base64"):
        raise SampleError("image_corrupt", f"{head[:60]}: only base64 data URLs are images")
    try:
        return io.BytesIO(base64.b64decode(payload, validate=False))
    except (binascii.Error, ValueError) as exc:
        raise SampleError("image_corrupt", f"a data URL is not valid base64 ({exc})") from None


def smart_resize(
    height: int,
    width: int,
    *,
    factor: int = 28,
    min_pixels: int = 56 * 56,
    max_pixels: int = 28 * 28 * 1280,
) -> tuple[int, int]:
    """``(height, width)`` after Qwen2-VL's resize: multiples of ``factor``, area in bounds.

    The same arithmetic as ``transformers``' ``Qwen2VLImageProcessor`` (``smart_resize``).

    Raises:
        SampleError: ``image_unsupported`` when the aspect ratio exceeds 200 (as the model's
            processor refuses it).
    """
    if max(height, width) / min(height, width) > 200:
        raise SampleError(
            "image_unsupported",
            f"aspect ratio {max(height, width) / min(height, width):.0f} of a {width}x{height} "
            f"image is above 200, which Qwen2-VL's image processor refuses",
        )
    h_bar = round(height / factor) * factor
    w_bar = round(width / factor) * factor
    if h_bar * w_bar > max_pixels:
        beta = math.sqrt((height * width) / max_pixels)
        h_bar = max(factor, math.floor(height / beta / factor) * factor)
        w_bar = max(factor, math.floor(width / beta / factor) * factor)
    elif h_bar * w_bar < min_pixels:
        beta = math.sqrt(min_pixels / (height * width))
        h_bar = math.ceil(height * beta / factor) * factor
        w_bar = math.ceil(width * beta / factor) * factor
    return h_bar, w_bar


def qwen2vl_grid(
    width: int,
    height: int,
    *,
    patch_size: int = 14,
    merge_size: int = 2,
    min_pixels: int = 56 * 56,
    max_pixels: int = 28 * 28 * 1280,
) -> tuple[int, int]:
    """``(grid_h, grid_w)`` in patches of an image of ``width x height`` after ``smart_resize``.

    The image then takes ``grid_h * grid_w // merge_size**2`` tokens.

    Example:
        >>> gh, gw = qwen2vl_grid(640, 480)
        >>> gh, gw, gh * gw // 4
        (34, 46, 391)
    """
    h, w = smart_resize(
        height, width, factor=patch_size * merge_size, min_pixels=min_pixels, max_pixels=max_pixels
    )
    return h // patch_size, w // patch_size
