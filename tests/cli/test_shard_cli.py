"""``chute shard``: JSONL + images into tar shards that read back as the same records.

Real LLaVA-Bench and LLaMA-Factory ``mllm_demo`` records with their images are sharded; read
back through ``TarSource`` they give the same sample ids, the same tokens and the same decoded
pixels as the loose files. A crash leaves no shard under a final name.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import orjson
import pytest
from typer.testing import CliRunner

from chute import DynamicResolution, Recipe, TarSource, open_source
from chute.cli import app
from chute.errors import ConfigError
from chute.media import MediaStage
from chute.recipe.shards import parse_size, write_shards

runner = CliRunner()
LF = "llama-factory"
QWEN = "tokenizers/qwen3"


def llava_jsonl(shared_data: Path, folder: Path) -> Path:
    """LLaVA-Bench questions as LLaVA records; images relative to the JSONL's folder."""
    bench = shared_data / "llava/llava_bench_in_the_wild"
    shutil.copytree(bench / "images", folder / "images")
    lines = []
    for raw in (bench / "questions.jsonl").read_bytes().splitlines()[:12]:
        q = orjson.loads(raw)
        lines.append(
            orjson.dumps(
                {
                    "id": q["id"],
                    "image": f"images/{q['image']}",
                    "conversations": [
                        {"from": "human", "value": "<image>\n" + q["text"]},
                        {"from": "gpt", "value": "An answer."},
                    ],
                }
            )
        )
    path = folder / "llava.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n")
    return path


def assert_same_samples(loose: object, shards: object, shared_data: Path) -> None:
    stage = MediaStage(DynamicResolution(max_pixels=150_000))
    recipe = Recipe(
        tokenizer=str(shared_data / QWEN), template="qwen3", image_tokens=stage.image.rule()
    )
    bound = stage.bind(recipe)
    assert len(shards) == len(loose)  # type: ignore[arg-type]
    for a_rec, b_rec in zip(loose, shards, strict=True):  # type: ignore[call-overload]
        assert a_rec.index == b_rec.index
        a, b = recipe(a_rec), recipe(b_rec)
        assert np.array_equal(a["input_ids"], b["input_ids"])
        assert np.array_equal(a["labels"], b["labels"])
        assert all(ref["path"].startswith("tar:") for ref in b["images"])
        pa, pb = bound(a)["pixel_values"], bound(b)["pixel_values"]
        assert len(pa) == len(pb) > 0
        assert all(np.array_equal(x, y) for x, y in zip(pa, pb, strict=True))


@pytest.mark.shared_data
def test_llava_round_trip_through_the_command(shared_data: Path, tmp_path: Path) -> None:
    data = llava_jsonl(shared_data, tmp_path / "data")
    out = tmp_path / "shards"
    result = runner.invoke(
        app, ["shard", str(data), "--out", str(out), "--shard-size", "2MB", "--json"]
    )
    assert result.exit_code == 0, result.output
    summary = orjson.loads(result.stdout)
    assert summary["samples"] == 12 and summary["media"] == 12 and summary["skipped"] == 0
    names = [s["name"] for s in summary["shards"]]
    assert len(names) > 1 and names[0] == "train-000000.tar"
    assert sorted(p.name for p in out.iterdir()) == names  # no temporary file left
    assert all(s["bytes"] <= 2_000_000 or s["samples"] == 1 for s in summary["shards"])
    shards = open_source(str(out / "train-*.tar"))
    assert isinstance(shards, TarSource)
    assert_same_samples(open_source(str(data)), shards, shared_data)
    # the other commands read shards too
    inspect = runner.invoke(app, ["index", str(out / "train-*.tar"), "--json"])
    assert inspect.exit_code == 0 and orjson.loads(inspect.stdout)["records"] == 12


@pytest.mark.shared_data
def test_mllm_demo_round_trip(shared_data: Path, tmp_path: Path) -> None:
    """ShareGPT-style messages with an ``images`` list (several images in one record)."""
    report = write_shards(open_source(str(shared_data / LF / "mllm_demo.json")), tmp_path / "s")
    assert report.samples == 6 and report.tally.total == 0 and len(report.shards) == 1
    shards = TarSource(tmp_path / "s/train-000000.tar")
    assert shards[0].data["images"][0].startswith("tar:")
    assert_same_samples(open_source(str(shared_data / LF / "mllm_demo.json")), shards, shared_data)


def test_missing_image_is_skipped_and_counted(tmp_path: Path) -> None:
    data = tmp_path / "d.jsonl"
    data.write_text('{"text": "a caption", "images": ["gone.jpg"]}\n{"text": "plain text"}\n')
    result = runner.invoke(app, ["shard", str(data), "--out", str(tmp_path / "o"), "--json"])
    assert result.exit_code == 1
    summary = orjson.loads(result.stdout)
    assert summary["samples"] == 1 and summary["rejects"]["by_reason"] == {"image_missing": 1}
    back = TarSource(tmp_path / "o/train-000000.tar")
    # the key keeps the record's index in its source; a skipped record leaves a gap there
    assert [r.key for r in back] == ["000000001"] and back[0].data == {"text": "plain text"}


def test_an_answer_that_reads_like_a_media_path_stays_text(tmp_path: Path) -> None:
    from PIL import Image

    (tmp_path / "imgs").mkdir()
    Image.new("RGB", (8, 8)).save(tmp_path / "imgs/cat.jpg")
    record = {
        "messages": [
            {"role": "user", "content": "<image>Which file is this?"},
            {"role": "assistant", "content": "imgs/cat.jpg"},
        ],
        "images": ["imgs/cat.jpg"],
    }
    data = tmp_path / "d.jsonl"
    data.write_bytes(orjson.dumps(record) + b"\n")
    write_shards(open_source(str(data)), tmp_path / "o")
    back = TarSource(tmp_path / "o/train-000000.tar")[0].data
    assert back["messages"][1]["content"] == "imgs/cat.jpg"  # the answer, as written
    assert back["images"][0].startswith("tar:")  # the reference, the shard's member


def test_a_failed_run_leaves_no_shard(tmp_path: Path) -> None:
    data = tmp_path / "d.jsonl"
    data.write_text("".join(f'{{"text": "doc {i}"}}\n' for i in range(50)))

    class Boom:
        def __iter__(self):  # type: ignore[no-untyped-def]
            for k, record in enumerate(open_source(str(data))):
                if k == 30:
                    raise KeyboardInterrupt
                yield record

    with pytest.raises(KeyboardInterrupt):
        write_shards(Boom(), tmp_path / "o", shard_size=2048)
    left = sorted(p.name for p in (tmp_path / "o").iterdir())
    assert left and all(n.startswith("train-") and n.endswith(".tar") for n in left)
    for name in left:  # every shard under a final name is whole
        assert len(TarSource(tmp_path / "o" / name)) > 0
    with pytest.raises(ConfigError, match="already holds train-"):
        write_shards(open_source(str(data)), tmp_path / "o")


def test_shard_sizes() -> None:
    assert parse_size("256MB") == 256_000_000 and parse_size("1.5GiB") == 1536 << 20
    with pytest.raises(ConfigError, match="shard_size: expected a size such as 256MB"):
        parse_size("big")


@pytest.mark.shared_data
def test_parquet_image_bytes_become_members(shared_data: Path, tmp_path: Path) -> None:
    """Hub ``Image`` structs with bytes: the bytes become a member, the struct its name."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    jpg = shared_data / LF / "mllm_demo_data/3.jpg"
    rows = [
        {
            "messages": [
                {"role": "user", "content": "<image>Who?"},
                {"role": "assistant", "content": "A player."},
            ],
            "images": [{"bytes": jpg.read_bytes(), "path": "lost/3.jpg"}],
        }
    ]
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "p.parquet")
    report = write_shards(open_source(str(tmp_path / "p.parquet")), tmp_path / "s")
    assert report.samples == 1 and report.media == 1
    back = TarSource(tmp_path / "s/train-000000.tar")
    (ref,) = back[0].data["images"]
    assert ref.startswith("tar:") and back[0].data["messages"] == rows[0]["messages"]
    from chute.media.images import decode_image

    assert np.array_equal(np.asarray(decode_image(ref)), np.asarray(decode_image(jpg)))


@pytest.mark.shared_data
def test_validate_and_inspect_read_shards(shared_data: Path, tmp_path: Path) -> None:
    """A corrupt image member is a counted reject naming ``shard.tar:key`` in ``chute validate``."""
    from tar_helpers import write_shard

    jpg = (shared_data / LF / "mllm_demo_data/1.jpg").read_bytes()
    record = orjson.dumps({"text": "A football player.", "images": ["jpg"]})
    write_shard(
        tmp_path / "train-000000.tar",
        [("good", {"json": record, "jpg": jpg}), ("bad", {"json": record, "jpg": jpg[:3000]})],
    )
    tok = str(shared_data / QWEN)
    args = ["--tokenizer", tok, "--template", "qwen3", "--image-tokens", "qwen2-vl"]
    result = runner.invoke(app, ["validate", str(tmp_path / "train-*.tar"), *args, "--json"])
    summary = orjson.loads(result.stdout)
    assert result.exit_code == 1 and summary["valid"] == 1
    assert summary["by_reason"] == {"image_corrupt": 1}
    assert "train-000000.tar:bad.jpg" in summary["examples"]["image_corrupt"][0]
    shown = runner.invoke(app, ["inspect", str(tmp_path / "train-000000.tar"), *args])
    assert shown.exit_code == 0 and "train-000000.tar:good" in shown.stdout
    assert "A football player." in shown.stdout


@pytest.mark.shared_data
def test_content_parts_with_a_value_round_trip(shared_data: Path, tmp_path: Path) -> None:
    """LLaMA-Factory v1's parts, ``{"type": "image_url", "value": PATH}``: ``value`` is a text
    key elsewhere, and the shard left the reference unwritten (read back, no image)."""
    import shutil

    (tmp_path / "data/mllm_demo_data").mkdir(parents=True)
    for name in ("1.jpg", "2.jpg"):  # the images the first two records name
        shutil.copy(shared_data / LF / "mllm_demo_data" / name, tmp_path / "data/mllm_demo_data")
    data = tmp_path / "v1.jsonl"
    lines = (shared_data / LF / "v1_multimodal_demo.jsonl").read_text().splitlines()[:2]
    data.write_text("".join(line + "\n" for line in lines))
    write_shards(open_source(str(data)), tmp_path / "o")
    back = open_source(str(tmp_path / "o/train-*.tar"))
    assert_same_samples(open_source(str(data)), back, shared_data)
    text = back[0].data["messages"][0]["content"][1]
    assert text == {"type": "text", "value": "Who are they?"}
