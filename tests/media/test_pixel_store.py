"""The pre-decoded pixel store: same model inputs as decoding, no JPEG read, stale files missed."""

from __future__ import annotations

import os
import pickle
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from chute.errors import ConfigError
from chute.media import (
    DynamicResolution,
    ImageTransform,
    MediaStage,
    PixelStore,
    build_pixel_store,
    decode_image,
)


@pytest.fixture
def images(tmp_path: Path) -> list[str]:
    rng = np.random.default_rng(0)
    out = []
    for i, size in enumerate([(300, 168), (640, 480), (90, 120), (333, 500)]):
        path = tmp_path / "img" / f"{i}.jpg"
        path.parent.mkdir(exist_ok=True)
        Image.fromarray(rng.integers(0, 255, (size[1], size[0], 3), dtype=np.uint8)).save(path)
        out.append(str(path))
    (tmp_path / "img" / "bad.jpg").write_text("no image")
    return [*out, str(tmp_path / "img" / "bad.jpg")]


@pytest.mark.parametrize("transform", [ImageTransform(size=64, crop=64), DynamicResolution()])
@pytest.mark.parametrize("workers", [1, 2])
def test_store_gives_the_same_inputs_as_decoding(
    images: list[str], tmp_path: Path, transform, workers: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    report = build_pixel_store(images * 2, transform, tmp_path / "px", workers=workers, per_task=2)
    assert report.images == 4 and report.failures == {"image_corrupt": 1}
    store = pickle.loads(pickle.dumps(PixelStore(tmp_path / "px", transform)))
    assert len(store) == 4 and store.get(images[-1]) is None and store.get("/nope.jpg") is None
    for path in images[:4]:
        want = transform(decode_image(path))
        stored = store.get(path)
        assert stored is not None and stored.dtype == np.uint8
        got = transform.finish(stored)
        assert np.array_equal(got.pixels, want.pixels) and got.grid_thw == want.grid_thw
    # The stage reads the store and decodes nothing.
    want = transform(decode_image(images[0]))
    stage = MediaStage(transform, store=store)
    monkeypatch.setattr("chute.media.stage.decode_image", _no_decode)
    sample = {"input_ids": np.zeros(1, np.int32), "images": [{"path": images[0], "span": [0, 0]}]}
    if isinstance(transform, DynamicResolution):
        sample["input_ids"] = np.zeros(66, np.int32)
        sample["images"][0]["span"] = [0, 66]
    else:
        sample["images"][0]["span"] = [0, 1]
    assert np.array_equal(stage(sample)["pixel_values"][0], want.pixels)


def _no_decode(*args, **kwargs):  # type: ignore[no-untyped-def]
    raise AssertionError("the stage decoded an image the store holds")


def test_changed_file_is_a_miss_and_other_transform_is_refused(
    images: list[str], tmp_path: Path
) -> None:
    t = ImageTransform(size=32, crop=32)
    build_pixel_store(images[:2], t, tmp_path / "px", workers=1)
    store = PixelStore(tmp_path / "px", t)
    assert store.get(images[0]) is not None
    st = os.stat(images[0])
    os.utime(images[0], ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))  # touched: maybe changed
    assert store.get(images[0]) is None and store.get(images[1]) is not None
    with pytest.raises(
        ConfigError,
        match=r"another transform \(crop: store 32, transform 48; size: store 32, transform 48\)",
    ):
        PixelStore(tmp_path / "px", ImageTransform(size=48, crop=48))
    with pytest.raises(ConfigError, match="no complete pixel store"):
        PixelStore(tmp_path / "nothing")
    with pytest.raises(ConfigError, match="ProcessorTransform has none"):
        from chute.media import ProcessorTransform

        MediaStage(ProcessorTransform(lambda im: np.zeros(3)), store=store)
