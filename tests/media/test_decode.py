"""Full, guarded decoding: every broken file is a typed SampleError; modes become RGB."""

from __future__ import annotations

import os
import struct
import zlib
from pathlib import Path

import numpy as np
import pytest
from PIL import Image, ImageFile

from chute.errors import ConfigError, SampleError
from chute.media import DecodeOptions, decode_image, image_size


def png_declaring(path: Path, width: int, height: int) -> Path:
    """A ~70-byte PNG whose header declares ``width x height`` (a decompression bomb's shape)."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return (
            struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
        )

    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    body = chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(b"\0" * 16)) + chunk(b"IEND", b"")
    path.write_bytes(b"\x89PNG\r\n\x1a\n" + body)
    return path


def test_truncated_png_and_jpeg_are_corrupt(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    noise = Image.fromarray(rng.integers(0, 255, (200, 300, 3), dtype=np.uint8))
    for fmt, ext in (("PNG", "png"), ("JPEG", "jpg")):
        full = tmp_path / f"full.{ext}"
        noise.save(full, fmt)
        cut = tmp_path / f"cut.{ext}"
        cut.write_bytes(full.read_bytes()[: full.stat().st_size // 2])  # head -c
        assert image_size(cut) == (300, 200)  # the header alone looks fine
        with pytest.raises(
            SampleError, match=r"image_corrupt: .*cut\.\w+: decoding failed .*truncated"
        ):
            decode_image(cut)
        assert decode_image(full).size == (300, 200)


def test_missing_empty_directory_fifo_garbage(tmp_path: Path) -> None:
    with pytest.raises(SampleError, match="image_missing: .*nope.png: no such file"):
        decode_image(tmp_path / "nope.png")
    with pytest.raises(SampleError, match="image_missing: .*is a directory"):
        decode_image(tmp_path)
    (tmp_path / "empty.jpg").write_bytes(b"")
    with pytest.raises(SampleError, match="image_corrupt: .*empty.jpg: the file is empty"):
        decode_image(tmp_path / "empty.jpg")
    (tmp_path / "text.jpg").write_text("not an image at all")
    with pytest.raises(SampleError, match="image_corrupt: .*text.jpg: not an image Pillow"):
        decode_image(tmp_path / "text.jpg")
    os.mkfifo(tmp_path / "pipe.png")  # opening it for reading would block forever
    with pytest.raises(SampleError, match="image_unsupported: .*not a regular file"):
        decode_image(tmp_path / "pipe.png")
    with pytest.raises(SampleError, match="url_not_allowed"):
        decode_image("https://example.com/a.png")
    with pytest.raises(SampleError, match="image_corrupt: <bytes>: empty"):
        decode_image(b"")


def test_decompression_bombs_are_too_large(tmp_path: Path) -> None:
    huge = png_declaring(tmp_path / "huge.png", 100_000, 100_000)  # 10 Gpx, 60 bytes
    assert huge.stat().st_size < 100
    with pytest.raises(SampleError, match="image_too_large: .*huge.png"):
        decode_image(huge)
    medium = png_declaring(tmp_path / "medium.png", 9000, 9000)  # 81 Mpx: under Pillow's error
    with pytest.raises(SampleError, match=r"image_too_large: .*9000x9000 = 81,000,000 pixels"):
        decode_image(medium)
    small = tmp_path / "small.png"
    Image.new("RGB", (100, 100)).save(small)
    with pytest.raises(SampleError, match="more than max_pixels=5,000"):
        decode_image(small, DecodeOptions(max_pixels=5000))
    with pytest.raises(SampleError, match="image_too_large: .*bytes, more than max_bytes=10"):
        decode_image(small, DecodeOptions(max_bytes=10))


def test_load_truncated_images_on_is_a_config_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    Image.new("RGB", (4, 4)).save(tmp_path / "a.png")
    monkeypatch.setattr(ImageFile, "LOAD_TRUNCATED_IMAGES", True)
    with pytest.raises(ConfigError, match="LOAD_TRUNCATED_IMAGES is True"):
        decode_image(tmp_path / "a.png")


def test_modes_become_rgb(tmp_path: Path) -> None:
    rgba = Image.new("RGBA", (2, 1), (10, 20, 30, 255))
    rgba.putpixel((1, 0), (10, 20, 30, 0))  # fully transparent
    rgba.save(tmp_path / "rgba.png")
    im = decode_image(tmp_path / "rgba.png", DecodeOptions(background=(0, 0, 255)))
    assert im.mode == "RGB" and im.getpixel((0, 0)) == (10, 20, 30)
    assert im.getpixel((1, 0)) == (0, 0, 255)  # composited on the background
    Image.new("L", (3, 3), 77).save(tmp_path / "gray.png")
    assert decode_image(tmp_path / "gray.png").getpixel((0, 0)) == (77, 77, 77)
    pal = Image.new("P", (2, 2), 1)
    pal.putpalette([0, 0, 0, 200, 100, 50] + [0] * 762)
    pal.info["transparency"] = 0
    pal.save(tmp_path / "pal.png", transparency=0)
    assert decode_image(tmp_path / "pal.png").getpixel((0, 0)) == (200, 100, 50)
    Image.new("CMYK", (2, 2), (0, 255, 255, 0)).save(tmp_path / "cmyk.jpg")
    r, g, b = decode_image(tmp_path / "cmyk.jpg").getpixel((0, 0))
    assert r > 200 and g < 50 and b < 50
    deep = Image.fromarray(np.full((2, 2), 40000, dtype=np.uint16))
    deep.save(tmp_path / "deep.png")
    assert decode_image(tmp_path / "deep.png").getpixel((0, 0)) == (156, 156, 156)  # 40000 >> 8
    with pytest.raises(ConfigError, match="background: expected an RGB triple"):
        DecodeOptions(background=(0, 0))


def test_exif_rotation_matches_the_header_size(tmp_path: Path) -> None:
    exif = Image.Exif()
    exif[0x0112] = 6
    Image.new("RGB", (40, 30)).save(tmp_path / "phone.jpg", exif=exif)
    assert (
        decode_image(tmp_path / "phone.jpg").size == image_size(tmp_path / "phone.jpg") == (30, 40)
    )


@pytest.mark.shared_data
def test_real_images_with_wrong_extensions(shared_data: Path) -> None:
    bench = shared_data / "llava/llava_bench_in_the_wild/images"
    for name, fmt in (("001.jpg", "WEBP"), ("023.jpg", "WEBP"), ("014.jpg", "PNG")):
        with Image.open(bench / name) as raw:
            assert raw.format == fmt  # detected by content, not by the extension
        im = decode_image(bench / name)
        assert im.mode == "RGB" and im.size == image_size(bench / name)
    with Image.open(bench / "014.jpg") as raw:
        assert raw.mode == "RGBA"
    for name in ("camera.png", "horse.png"):  # grayscale, RGBA
        assert decode_image(shared_data / "images/skimage" / name).mode == "RGB"
    chelsea = shared_data / "images/skimage/chelsea.png"
    assert decode_image(chelsea).size == (451, 300)


@pytest.mark.shared_data
def test_truncated_real_files(shared_data: Path, tmp_path: Path) -> None:
    """SOURCES.md's recipes: ``head -c`` of real files."""
    cases = [
        ("images/skimage/chelsea.png", 60000, "decoding failed"),
        ("images/skimage/rocket.jpg", 30000, "decoding failed"),
        ("images/skimage/rocket.jpg", 100, "cannot read an image header"),
    ]
    for rel, n, message in cases:
        cut = tmp_path / f"cut_{n}_{Path(rel).name}"
        cut.write_bytes((shared_data / rel).read_bytes()[:n])
        with pytest.raises(SampleError, match=f"image_corrupt: .*{message}"):
            decode_image(cut)
