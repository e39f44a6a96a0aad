"""chute validate --media-root: every media failure is a rejected record with its kind."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import orjson
import pytest
from PIL import Image
from typer.testing import CliRunner

from chute import JsonlSource, Recipe
from chute.cli import app
from chute.media.check import MediaCheck
from chute.recipe.validate import validate_source
from recipe_helpers import tiny_tokenizer

runner = CliRunner()


@pytest.fixture
def llava(tmp_path: Path) -> tuple[Path, Path]:
    """A LLaVA-format file over a media root with good, truncated, missing and unsafe images."""
    root = tmp_path / "media"
    root.mkdir()
    rng = np.random.default_rng(1)
    Image.fromarray(rng.integers(0, 255, (60, 80, 3), dtype=np.uint8)).save(root / "ok.jpg")
    full = (root / "ok.jpg").read_bytes()
    (root / "cut.jpg").write_bytes(full[: len(full) // 2])
    (root / "fake.jpg").write_text("hello")
    (tmp_path / "outside.jpg").write_bytes(full)
    images = [
        "ok.jpg",
        "cut.jpg",
        "gone.jpg",
        "../outside.jpg",
        "http://x/y.jpg",
        "fake.jpg",
        "ok.jpg",
    ]
    rows = [
        {
            "id": str(i),
            "image": name,
            "conversations": [
                {"from": "human", "value": "<image>\nDescribe."},
                {"from": "gpt", "value": "A picture."},
            ],
        }
        for i, name in enumerate(images)
    ]
    data = tmp_path / "data" / "llava.jsonl"
    data.parent.mkdir()
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    tok = tmp_path / "tok"
    tok.mkdir()
    (tok / "tokenizer.json").write_text(tiny_tokenizer().rust.to_str())
    (tok / "tokenizer_config.json").write_text(json.dumps({"eos_token": "</s>"}))
    return data, tok


EXPECTED = {
    "image_corrupt": 2,  # truncated, not an image
    "image_missing": 1,
    "unsafe_path": 1,
    "url_not_allowed": 1,
}


def test_validate_json_counts_every_media_failure(llava: tuple[Path, Path]) -> None:
    data, tok = llava
    root = data.parent.parent / "media"
    args = ["validate", str(data), "--format", "llava", "--tokenizer", str(tok)]
    args += ["--template", "chatml", "--media-root", str(root), "--json", "--workers", "2"]
    args += ["--max-bad-fraction", "1"]  # 5 of 7 planted: counting them is the point here
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    out = orjson.loads(result.stdout)
    assert (out["records"], out["valid"], out["rejected"]) == (7, 2, 5)
    assert out["by_reason"] == EXPECTED
    assert out["examples"]["image_corrupt"][0].startswith(f"{data}:2: image_corrupt")
    assert "media decoded" in out["check"]
    # --no-decode: paths and headers only (image tokens "auto" is Qwen2-VL's rule for this
    # vocabulary, so headers are read): the non-image is caught, the truncated file passes.
    result = runner.invoke(app, [*args, "--no-decode"])
    out = orjson.loads(result.stdout)
    assert out["by_reason"] == {**EXPECTED, "image_corrupt": 1}


def test_media_check_remembers_per_file_but_locates_each_record(llava: tuple[Path, Path]) -> None:
    data, _ = llava
    root = data.parent.parent / "media"
    rows = data.read_text().splitlines()
    twice = data.with_name("twice.jsonl")
    twice.write_text("\n".join([rows[1], rows[1]]) + "\n")  # the truncated image, twice
    recipe = Recipe(tokenizer=tiny_tokenizer(), template="chatml", image_tokens=4, media_root=root)
    report = validate_source(JsonlSource(twice), MediaCheck(recipe), workers=1)
    assert report.tally.counts == {"image_corrupt": 2}
    assert [e.split(": ")[0] for e in report.tally.examples["image_corrupt"]] == [
        f"{twice}:1",
        f"{twice}:2",
    ]


@pytest.mark.shared_data
def test_validate_real_llava_and_qwen_data(shared_data: Path) -> None:
    tok = shared_data / "tokenizers/qwen3"
    pretrain = shared_data / "fastervlm/blip_laion_cc_200_test_samples.json"
    args = ["validate", str(pretrain), "--format", "llava", "--tokenizer", str(tok)]
    result = runner.invoke(app, [*args, "--media-root", str(shared_data / "fastervlm"), "--json"])
    assert result.exit_code == 1, result.output  # every image missing: the Loader would stop
    out = orjson.loads(result.stdout)
    assert out["rejected"] == 200 and out["by_reason"] == {"image_missing": 200}  # not shipped
    assert out["over_budget"] is True
    demo = shared_data / "qwen3-vl/demo/single_images.json"
    args = ["validate", str(demo), "--format", "llava", "--tokenizer", str(tok)]
    result = runner.invoke(app, [*args, "--media-root", str(shared_data / "qwen3-vl"), "--json"])
    out = orjson.loads(result.stdout)
    assert (out["valid"], out["rejected"]) == (3, 0)
    readme = shared_data / "qwen-vl/qwen_vl_readme_example.json"
    args = ["validate", str(readme), "--format", "qwen_vl", "--tokenizer", str(tok)]
    result = runner.invoke(app, [*args, "--media-root", str(shared_data / "qwen-vl"), "--json"])
    out = orjson.loads(result.stdout)
    assert out["by_reason"] == {"image_missing": 1, "url_not_allowed": 1} and out["valid"] == 1
