"""Parquet rows that carry their media: Hub ``Image``/``Audio`` structs and plain binary columns.

The bytes of real files from ``/work/shared/data`` go into the Parquet file; through the
Loader they must give the pixels (and audio samples) the files themselves give, under the same
limits as files (``DecodeOptions.max_bytes`` holds for inline bytes too, a counted skip naming
the row).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from chute import Loader, ParquetSource, Recipe
from chute.media import DecodeOptions, ImageTransform, MediaStage
from chute.media.images import decode_image

pytestmark = [pytest.mark.shared_data]

LF = "llama-factory"
QWEN = "tokenizers/qwen3"


def turns(tag: str) -> list[dict[str, str]]:
    return [
        {"role": "user", "content": f"{tag}What is this?"},
        {"role": "assistant", "content": "A sample."},
    ]


def test_image_structs_and_binary_columns_decode_as_the_files(
    shared_data: Path, tmp_path: Path
) -> None:
    jpgs = [(shared_data / LF / f"mllm_demo_data/{i}.jpg").read_bytes() for i in (1, 2, 3)]
    rows = [
        {"messages": turns("<image>"), "images": [{"bytes": jpgs[0], "path": "gone/1.jpg"}]},
        {
            "messages": turns("<image><image>"),
            "images": [{"bytes": jpgs[1], "path": None}, {"bytes": jpgs[2], "path": None}],
        },
    ]
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "structs.parquet")
    binary = pa.table(
        {"messages": [turns("<image>")], "images": pa.array([jpgs[2]], type=pa.binary())}
    )
    pq.write_table(binary, tmp_path / "binary.parquet")
    recipe = Recipe(
        tokenizer=str(shared_data / QWEN),
        template="qwen3",
        image_tokens=16,
        image_token="<|image_pad|>",
    )
    transform = ImageTransform(size=32, crop=32, tokens_per_image=16)
    want = [
        transform(decode_image(shared_data / LF / f"mllm_demo_data/{i}.jpg")).pixels
        for i in (1, 2, 3)
    ]
    got = []
    for name in ("structs.parquet", "binary.parquet"):
        loader = Loader(
            ParquetSource(tmp_path / name),
            recipe,
            batch_size=1,
            shuffle=False,
            media=MediaStage(transform),
        )
        got += [np.asarray(p) for b in loader for p in b["pixel_values"]]
        assert loader.tally.total == 0
    assert len(got) == 4
    for pixels, i in zip(got, (0, 1, 2, 2), strict=True):
        assert np.array_equal(pixels, np.asarray(want[i]))


def test_inline_images_obey_the_byte_limit(shared_data: Path, tmp_path: Path) -> None:
    jpg = (shared_data / LF / "mllm_demo_data/2.jpg").read_bytes()  # 22,681 bytes
    rows = [{"messages": turns("<image>"), "images": [{"bytes": jpg, "path": None}]}] * 2
    rows.append({"messages": turns(""), "images": []})
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "p.parquet")
    recipe = Recipe(
        tokenizer=str(shared_data / QWEN),
        template="qwen3",
        image_tokens=16,
        image_token="<|image_pad|>",
    )
    stage = MediaStage(
        ImageTransform(size=32, crop=32, tokens_per_image=16),
        decode=DecodeOptions(max_bytes=10_000),
    )
    loader = Loader(ParquetSource(tmp_path / "p.parquet"), recipe, batch_size=1, media=stage)
    assert [int(i) for b in loader for i in b["sample_ids"] if i >= 0] == [2]
    assert loader.tally.counts == {"image_too_large": 2}
    example = loader.tally.examples["image_too_large"][0]
    assert "p.parquet:" in example and "22,681 bytes, more than max_bytes=10,000" in example


def test_audio_structs_load_like_the_file(shared_data: Path, tmp_path: Path) -> None:
    pytest.importorskip("soundfile", reason="audio clips need chute[audio] (soundfile)")
    from chute.media.audio import AudioClips

    wav = shared_data / LF / "mllm_demo_data/2.wav"
    rows = [{"messages": turns("<audio>"), "audios": [{"bytes": wav.read_bytes(), "path": "x"}]}]
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "a.parquet")
    clips = AudioClips(sample_rate=16000, max_seconds=30, tokens_per_second=25)
    recipe = Recipe(
        tokenizer=str(shared_data / QWEN),
        template="qwen3",
        audio_tokens=clips,
        audio_token="<|video_pad|>",
    )
    sample = recipe(ParquetSource(tmp_path / "a.parquet")[0])
    assert sample["audios"][0]["path"].startswith("data:audio/wav;base64,")
    stage = MediaStage(audio=clips).bind(recipe)
    values = stage(sample)["audio_values"][0]
    assert np.array_equal(np.asarray(values), np.asarray(clips(str(wav)).pixels))
