"""Decoding an image fully, safely, into RGB: every failure is a typed ``SampleError``.

``Image.open`` reads only the header: a truncated file opens fine and fails (or, with Pillow's
``LOAD_TRUNCATED_IMAGES``, silently turns grey) when its pixels are decoded. ``decode_image``
therefore decodes every pixel inside the guarded step, and checks what can be checked first:

==========================  ==================================================================
what                        kind
==========================  ==================================================================
no such file, a directory   ``image_missing``
a FIFO, socket or device    ``image_unsupported`` (reading one could hang the worker)
empty, not an image,        ``image_corrupt`` (the format is detected from the bytes, never
truncated, bad data         from the extension: LLaVA-Bench has WEBP and PNG files named .jpg)
more than ``max_pixels``    ``image_too_large`` (checked from the header, before decoding;
or ``max_bytes``            Pillow's ``DecompressionBombError`` also lands here); the byte
                            limit holds for files, tar members (from the index, before
                            reading), ``data:`` URLs and raw bytes alike
==========================  ==================================================================

The result is RGB: EXIF orientation applied (so the size equals ``image_size``'s, which token
counts were computed from), transparency (RGBA, LA, palette with transparency) composited on
``background``, grayscale, palette, CMYK, YCbCr and 16-bit images converted. Animated files
give their first frame.

Example:
    >>> import tempfile, pathlib
    >>> from PIL import Image
    >>> p = pathlib.Path(tempfile.mkdtemp()) / "x.png"
    >>> Image.new("RGBA", (4, 3), (255, 0, 0, 0)).save(p)
    >>> im = decode_image(p)
    >>> im.mode, im.size, im.getpixel((0, 0))
    ('RGB', (4, 3), (255, 255, 255))
"""

from __future__ import annotations

import io
import os
import stat
import warnings
from dataclasses import dataclass
from typing import Any

import numpy as np
from PIL import Image, ImageFile, ImageOps, UnidentifiedImageError

from chute.errors import ConfigError, SampleError
from chute.media.paths import INLINE, is_remote
from chute.media.sizes import _data_url
from chute.sources.tar_members import MemberRef, is_member_ref, read_member

__all__ = ["DEFAULT_MAX_PIXELS", "DecodeOptions", "decode_image", "to_rgb"]

# 64 Mpx (e.g. 8000x8000): about 192 MB as RGB. Pillow's own bomb limit is ~89 Mpx (warning) and
# twice that (error); a training image larger than this is almost surely a mistake or an attack.
DEFAULT_MAX_PIXELS = 64 * 1024 * 1024
DEFAULT_MAX_BYTES = 256 * 1024 * 1024
_EXIF_ORIENTATION = 0x0112
_ROTATIONS = frozenset(range(2, 9))  # 1 is upright; 2-8 flip and/or rotate


@dataclass(frozen=True)
class DecodeOptions:
    """Limits and conversions of ``decode_image``.

    Args:
        max_pixels: refuse images with more pixels (``image_too_large``), from the header.
        max_bytes: refuse files larger than this (``image_too_large``), from ``stat``.
        background: RGB colour transparent pixels are composited on (white by default).
        exif_transpose: apply the EXIF orientation (as ``image_size`` assumes).
    """

    max_pixels: int = DEFAULT_MAX_PIXELS
    max_bytes: int = DEFAULT_MAX_BYTES
    background: tuple[int, int, int] = (255, 255, 255)
    exif_transpose: bool = True

    def __post_init__(self) -> None:
        for name in ("max_pixels", "max_bytes"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(f"{name}: expected a positive integer, got {value!r}")
        bg = self.background
        if (
            not isinstance(bg, tuple | list)
            or len(bg) != 3
            or not all(isinstance(c, int) and 0 <= c <= 255 for c in bg)
        ):
            raise ConfigError(
                f"expected an RGB triple of ints 0..255 such as (255, 255, 255), got {bg!r}",
                param="background",
            )
        object.__setattr__(self, "background", tuple(bg))


def decode_image(
    source: str | os.PathLike[str] | bytes, options: DecodeOptions | None = None
) -> Image.Image:
    """The fully decoded RGB image of a local path, a ``data:`` URL, a tar member or raw bytes.

    Raises:
        SampleError: ``image_missing``, ``image_corrupt``, ``image_too_large``,
            ``image_unsupported``, ``url_not_allowed`` (a URL: chute fetches nothing).
        ConfigError: Pillow's ``LOAD_TRUNCATED_IMAGES`` is on in this process, which would make
            truncated images load silently.
    """
    opts = options or DecodeOptions()
    if ImageFile.LOAD_TRUNCATED_IMAGES:
        raise ConfigError(
            "PIL.ImageFile.LOAD_TRUNCATED_IMAGES is True in this process (some training code "
            "sets it), so truncated images would decode silently as grey; set it back to False "
            "and let chute skip and count them"
        )
    name, fp = _open(source, opts)
    try:
        with warnings.catch_warnings():
            # The pixel limit is ours (max_pixels, checked below from the header); Pillow's
            # warning would only repeat it. Its DecompressionBombError still lands below.
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            try:
                im = Image.open(fp)
            except Image.DecompressionBombError as exc:
                raise SampleError("image_too_large", f"{name}: {exc}") from None
            except UnidentifiedImageError:
                raise SampleError(
                    "image_corrupt", f"{name}: not an image Pillow can identify"
                ) from None
            except Exception as exc:
                raise SampleError(
                    "image_corrupt",
                    f"{name}: cannot read an image header ({type(exc).__name__}: {exc})",
                ) from None
            width, height = im.size
            if width <= 0 or height <= 0:
                raise SampleError("image_corrupt", f"{name}: the header says {width}x{height}")
            if width * height > opts.max_pixels:
                raise SampleError(
                    "image_too_large",
                    f"{name}: {width}x{height} = {width * height:,} pixels, more than "
                    f"max_pixels={opts.max_pixels:,} (raise max_pixels if such images are "
                    f"intended)",
                )
            try:
                im.load()  # every pixel: truncation and bad data show up here
                out = to_rgb(im, opts)
            except SampleError:
                raise
            except MemoryError:
                raise SampleError(
                    "image_too_large", f"{name}: out of memory decoding {width}x{height}"
                ) from None
            except Exception as exc:
                raise SampleError(
                    "image_corrupt",
                    f"{name}: decoding failed ({type(exc).__name__}: {exc}); the file is "
                    f"truncated or damaged",
                ) from None
    finally:
        if not isinstance(fp, io.BytesIO):
            fp.close()
    return out


def _open(source: Any, opts: DecodeOptions) -> tuple[str, Any]:
    """``(name for messages, binary file object)``; checks the file before Pillow sees it."""
    if isinstance(source, bytes | bytearray | memoryview):
        data = bytes(source)
        if not data:
            raise SampleError("image_corrupt", "<bytes>: empty")
        _check_bytes("<bytes>", len(data), opts)
        return "<bytes>", io.BytesIO(data)
    text = os.fspath(source)
    if text.startswith(INLINE):
        # base64 holds 3 bytes per 4 characters: refuse a huge one before decoding it
        _check_bytes(text[:40] + "...", len(text.partition(",")[2].rstrip("=")) * 3 // 4, opts)
        buf = _data_url(text)
        if not buf.getbuffer().nbytes:
            raise SampleError("image_corrupt", f"{text[:40]}...: an empty data URL")
        return text[:40] + "...", buf
    if is_member_ref(text):
        ref = MemberRef.parse(text)
        if ref.size == 0:
            raise SampleError("image_corrupt", f"{ref.shown}: the member is empty")
        return ref.shown, io.BytesIO(read_member(ref, max_bytes=opts.max_bytes))
    if is_remote(text):
        raise SampleError(
            "url_not_allowed",
            f"{text} is a URL; chute never fetches (pass fetch= to the media stage to read URLs "
            f"yourself, or download the file)",
        )
    try:
        st = os.stat(text)
    except FileNotFoundError:
        raise SampleError("image_missing", f"{text}: no such file") from None
    except OSError as exc:
        raise SampleError("image_missing", f"{text}: cannot stat ({exc.strerror})") from None
    if stat.S_ISDIR(st.st_mode):
        raise SampleError("image_missing", f"{text}: is a directory, not an image")
    if not stat.S_ISREG(st.st_mode):
        raise SampleError(
            "image_unsupported", f"{text}: not a regular file (a FIFO, socket or device)"
        )
    if st.st_size == 0:
        raise SampleError("image_corrupt", f"{text}: the file is empty")
    if st.st_size > opts.max_bytes:
        raise SampleError(
            "image_too_large",
            f"{text}: {st.st_size:,} bytes, more than max_bytes={opts.max_bytes:,}",
        )
    try:
        return text, open(text, "rb")
    except OSError as exc:
        raise SampleError("image_missing", f"{text}: cannot open ({exc.strerror})") from None


def _check_bytes(name: str, size: int, opts: DecodeOptions) -> None:
    if size > opts.max_bytes:
        raise SampleError(
            "image_too_large", f"{name}: {size:,} bytes, more than max_bytes={opts.max_bytes:,}"
        )


def to_rgb(im: Image.Image, options: DecodeOptions | None = None) -> Image.Image:
    """``im`` (loaded) as an RGB image: EXIF orientation, transparency and modes handled."""
    opts = options or DecodeOptions()
    if opts.exif_transpose:
        try:
            orientation = im.getexif().get(_EXIF_ORIENTATION)
        except Exception:  # a broken EXIF block: image_size ignores it too (no rotation)
            orientation = None
        if orientation in _ROTATIONS:
            im = ImageOps.exif_transpose(im)
    mode = im.mode
    if mode == "RGB":
        return im
    if mode == "P":
        im = im.convert("RGBA" if "transparency" in im.info else "RGB")
        mode = im.mode
    elif mode in ("PA", "LA", "La", "RGBa"):
        im = im.convert("RGBA")
        mode = "RGBA"
    elif mode.startswith("I;16") or mode in ("I", "F"):
        im = Image.fromarray(_to_uint8(np.asarray(im), mode), "L")
        mode = "L"
    if mode == "RGBA":
        base = Image.new("RGB", im.size, opts.background)
        base.paste(im, mask=im.getchannel("A"))
        return base
    return im.convert("RGB")


def _to_uint8(arr: np.ndarray, mode: str) -> np.ndarray:
    """16-bit and 32-bit grayscale to 8 bits (Pillow's convert clips values above 255 instead)."""
    if mode.startswith("I;16"):
        return (arr.astype(np.uint32) >> 8).astype(np.uint8)
    top = float(arr.max()) if arr.size else 0.0
    if top <= 255:
        return np.clip(arr, 0, 255).astype(np.uint8)
    scale = 255.0 / (65535.0 if top <= 65535 else top)
    return np.clip(arr.astype(np.float64) * scale, 0, 255).astype(np.uint8)
