"""`chute demo` in a reduced form: every claim it prints is checked here."""

from __future__ import annotations

from pathlib import Path

import pytest

from chute.demo import run_demo

pytest.importorskip("torch")


@pytest.mark.timeout(300)
def test_demo_claims_hold(tmp_path: Path) -> None:
    lines: list[str] = []
    result = run_demo(tmp_path / "demo", records=600, steps=30, workers=1, echo=lines.append)
    # the planted faults are found by kind, none stops the job
    assert result.rejected == result.planted
    assert set(result.planted) == {
        "bad_json",
        "bad_utf8",
        "bad_role_order",
        "image_placeholder_mismatch",
        "image_missing",
        "image_corrupt",
    }
    assert result.records == 600
    # packing beats random batches; the cache holds every sample the recipe accepts
    assert result.efficiency["packed"] > 0.95 > result.efficiency["random"]
    assert result.cached_samples == 600 - 5  # the corrupt image is only caught when decoded
    # ... which the cache's pixels phase does: every other image is pre-decoded
    assert result.pre_decoded > 0 and result.pre_decode_failures == 1
    assert result.stale_cache_refused
    # the model learns, and the corrupt image is skipped (counted) at training time
    assert result.losses[-1] < 0.8 * result.losses[0]
    assert result.train_rejected.get("image_corrupt", 0) <= 1
    # resume: the rest of the epoch is exactly what the uninterrupted run saw
    assert result.resumed_equal and result.resumed_batches > 0
    text = "\n".join(lines)
    assert "identical to what the uninterrupted run saw" in text
    if result.plot is not None:
        assert Path(result.plot).stat().st_size > 1000


def test_demo_cli_on_your_own_data(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from chute.cli import app
    from chute.demo.data import write_demo_dataset, write_demo_tokenizer

    data, _ = write_demo_dataset(tmp_path / "mine.jsonl", 400)
    tok = write_demo_tokenizer(tmp_path / "tok")
    result = CliRunner().invoke(
        app,
        [
            "demo",
            "--data",
            str(data),
            "--tokenizer",
            str(tok / "tokenizer.json"),
            "--template",  # the demo tokenizer has no chat template of its own
            "chatml",
            "--out",
            str(tmp_path / "run"),
            "--steps",
            "20",
            "--workers",
            "0",
            "--max-length",
            "128",
        ],
    )
    assert result.exit_code == 0, result.output
    assert "identical to what the uninterrupted run saw" in result.output
    # it ends with what to run next, on the same data
    assert "Next, on your own data" in result.output
    # with the recipe flags and the row length it ran with: each gives what the demo showed
    recipe = f"--tokenizer {tok / 'tokenizer.json'} --template chatml"
    assert f"chute validate {data} {recipe} --max-length 128\n" in result.output
    assert f"chute stats {data} {recipe} --max-length 128 --batch-size 8" in result.output


def test_next_steps_say_how_to_reach_chute(monkeypatch: pytest.MonkeyPatch) -> None:
    import shutil

    from chute.cli.demo_cmd import next_steps

    monkeypatch.setattr(shutil, "which", lambda name: None)  # as after make demo: not on PATH
    text = next_steps(Path("mine.jsonl"), "tok/")
    assert "source .venv/bin/activate" in text and ".venv/bin/chute" in text
    assert "chute stats mine.jsonl --tokenizer tok/ --max-length 4096 --batch-size 8" in text
    monkeypatch.setattr(shutil, "which", lambda name: "/usr/local/bin/chute")
    assert "activate" not in next_steps(None, None)


def test_training_leaves_the_workers_their_cores(monkeypatch: pytest.MonkeyPatch) -> None:
    """Torch's threads and the DataLoader workers do not fight over the same cores."""
    import torch

    from chute.demo import run

    before = torch.get_num_threads()
    monkeypatch.setattr(run, "_usable_cpus", lambda: 4)
    torch.set_num_threads(4)
    try:
        with run._training_threads(workers=2):
            assert torch.get_num_threads() == 2
        with run._training_threads(workers=8):
            assert torch.get_num_threads() == 1
        assert torch.get_num_threads() == 4  # restored
    finally:
        torch.set_num_threads(before)


def test_tiny_model_takes_dynamic_resolution_patches() -> None:
    """Qwen2-VL's (patches, 1176) pixels become one feature per image token, as counted."""
    import numpy as np
    import torch
    from PIL import Image

    from chute.demo.model import TinyVLM
    from chute.media import DynamicResolution

    out = DynamicResolution()(Image.new("RGB", (300, 168), "red"))  # 264 patches, 66 tokens
    torch.manual_seed(0)
    model = TinyVLM(vocab_size=50, image_token_id=7, max_length=80, merge_size=2)
    features = model.image_features(torch.from_numpy(np.asarray(out.pixels)))
    assert tuple(features.shape) == (out.num_features, 96)
    ids = torch.tensor([[1] + [7] * out.num_features + [2, 3]])
    batch = {
        "input_ids": ids,
        "labels": ids,
        "position_ids": torch.arange(ids.shape[1])[None],
        "pixel_values": torch.from_numpy(np.asarray(out.pixels)),
        "image_grid_thw": torch.tensor([out.grid_thw]),
    }
    with_image = model(batch)
    text_only = model({k: v for k, v in batch.items() if k != "pixel_values"})
    assert not torch.allclose(with_image, text_only)  # the image features took the slots
    # Qwen-VL batches carry (4, rows, width) positions: row 0 is the 1-D text positions
    mrope = torch.stack([batch["position_ids"], *[torch.zeros_like(batch["position_ids"])] * 3])
    assert torch.allclose(model({**batch, "position_ids": mrope}), with_image)


@pytest.mark.shared_data
@pytest.mark.timeout(300)
@pytest.mark.parametrize("image_tokens", [None, "qwen2-vl"])
def test_demo_cli_on_qwen_vl_data(
    tmp_path: Path, shared_data: Path, image_tokens: str | None
) -> None:
    """LLaMA-Factory's multimodal demo with Qwen3's tokenizer: dynamic resolution trains."""
    from typer.testing import CliRunner

    from chute.cli import app

    args = [
        "demo",
        "--data",
        str(shared_data / "llama-factory" / "mllm_demo.json"),
        "--tokenizer",
        str(shared_data / "tokenizers" / "qwen3"),
        "--out",
        str(tmp_path / "run"),
        "--steps",
        "6",
        "--workers",
        "0",
    ]
    if image_tokens:
        args += ["--image-tokens", image_tokens]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "identical to what the uninterrupted run saw" in result.output
