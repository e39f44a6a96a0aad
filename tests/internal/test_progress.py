"""Progress of long steps: a bar on a terminal, log lines elsewhere, a summary, rank 0 only.

The reporter (``chute._internal.progress``) is what the lengths pass (the Loader's, for
grouped/budget/packed plans), validation, preprocessing, indexing and the pixel store use.
"""

from __future__ import annotations

import io
import logging
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from cache_helpers import config, write_alpaca, write_tokenizer
from chute import JsonlSource, preprocess
from chute._internal import progress as progress_module
from chute._internal.progress import Progress, progress, silenced
from chute.lengths import lengths_of
from chute.media import ImageTransform
from chute.media.store import build_pixel_store
from chute.recipe.validate import validate_source


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_terminal_gets_a_bar_and_a_log_gets_lines_and_a_summary(
    caplog: pytest.LogCaptureFixture,
) -> None:
    screen = _Terminal()
    with Progress(100, "lengths", enabled=True, stream=screen, quiet_below=0) as bar:
        bar.update(60)
    assert "lengths:" in screen.getvalue() and "/100 [" in screen.getvalue()  # a tqdm bar

    with (
        caplog.at_level(logging.INFO, logger="chute.progress"),
        Progress(100, "lengths", enabled=True, stream=io.StringIO(), every=0, quiet_below=0) as bar,
    ):
        bar.update(25)
        bar.update(75)
    lines = [r.getMessage() for r in caplog.records]
    assert lines[0].startswith("lengths: 25 / 100 rec (25%)") and "ETA" in lines[0]
    assert lines[-1].startswith("lengths: 100 rec in ")  # the summary


def test_quick_steps_and_other_ranks_and_silenced_blocks_report_nothing(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    with caplog.at_level(logging.INFO, logger="chute.progress"):
        with Progress(10, "quick", enabled=True, stream=io.StringIO(), every=0) as bar:
            bar.update(10)  # under a second: no summary
        monkeypatch.setenv("RANK", "1")
        monkeypatch.setenv("WORLD_SIZE", "2")
        assert not Progress(10, "rank 1", stream=io.StringIO()).shown
        monkeypatch.setenv("RANK", "0")
        assert Progress(10, "rank 0", stream=io.StringIO()).shown
        with silenced():
            assert not Progress(10, "quiet", stream=io.StringIO()).shown
    assert [r.getMessage() for r in caplog.records if "quick" in r.getMessage()][1:] == []


def test_long_steps_report_through_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    made: list[tuple[str, int | None]] = []
    real = progress_module.Progress

    class Recording(real):  # type: ignore[misc, valid-type]
        def __init__(self, total: int | None, desc: str, **kwargs: object) -> None:
            made.append((desc, total))
            super().__init__(total, desc, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(progress_module, "Progress", Recording)
    tok = write_tokenizer(tmp_path / "tok")
    data = write_alpaca(tmp_path / "d.jsonl", 50)
    source = JsonlSource(data)
    validate_source(source, workers=1)
    from chute import Recipe

    lengths_of(source, Recipe(tokenizer=str(tok), template="chatml"), workers=1)
    preprocess(config(data, tok), out=tmp_path / "cache")
    Image.new("RGB", (8, 8)).save(tmp_path / "a.png")
    build_pixel_store([str(tmp_path / "a.png")], ImageTransform(size=4), tmp_path / "px", workers=1)
    assert {desc for desc, _ in made} >= {"validate", "lengths", "preprocess", "pixels"}
    assert ("lengths", 50) in made and ("pixels", 1) in made
    counted: list[int] = []
    validate_source(source, workers=1, progress=counted.append)  # a callable gets increments
    assert sum(counted) == 50 and np.all(np.array(counted) > 0)


def test_progress_argument_forms() -> None:
    got: list[int] = []
    with progress(5, "x", enabled=got.append) as bar:
        bar.update(2)
        bar.update(3)
    assert got == [2, 3] and not bar.shown
    assert not progress(5, "x", enabled=False).shown
