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
