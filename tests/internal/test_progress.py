"""Progress of long steps: a bar on a terminal, log lines elsewhere, a summary, rank 0 only.

The reporter (``chute._internal.progress``) is what the lengths pass (the Loader's, for
grouped/budget/packed plans), the plan builds themselves, validation, preprocessing (and its
full hash of the sources), indexing and the pixel store use.
"""

from __future__ import annotations

import io
import logging
from pathlib import Path
from typing import Any

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
from chute.plan import order as order_module
from chute.plan.budget import BudgetPlanner
from chute.plan.grouped import GroupedPlanner
from chute.plan.order import Reported
from chute.plan.packed import PackedPlanner
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


def _recorded(monkeypatch: pytest.MonkeyPatch) -> list[Progress]:
    made: list[Progress] = []
    real = progress_module.Progress

    class Recording(real):  # type: ignore[misc, valid-type]
        def __init__(self, total: int | None, desc: str, **kwargs: object) -> None:
            super().__init__(total, desc, **kwargs)  # type: ignore[arg-type]
            made.append(self)

    monkeypatch.setattr(progress_module, "Progress", Recording)
    return made


@pytest.mark.parametrize(
    "make",
    [
        lambda lens: GroupedPlanner(4, group_size=3, lengths=lens),
        lambda lens: BudgetPlanner(8192, lengths=lens),
        lambda lens: PackedPlanner(2048, batch_size=2, lengths=lens),
        lambda lens: GroupedPlanner(4, shuffle=False, lengths=lens),
    ],
    ids=["grouped", "budget", "packed", "sorted"],
)
def test_plan_builds_count_every_id_of_the_epoch(
    make: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(order_module, "REPORT_CHUNK", 1000)  # several reports on a small epoch
    lens = np.random.default_rng(0).integers(1, 1500, 5_000).astype(np.int32)
    lens[::7] = -1  # rejected: not in the epoch's order
    made = _recorded(monkeypatch)
    planner = make(lens)
    plan = planner.build(len(lens), epoch=1, world_size=3)
    (bar,) = [p for p in made if p.desc == f"plan {planner.kind}"]
    valid = int((lens >= 0).sum())
    assert bar.total == valid and bar.done == valid  # each id read once, nothing lost
    assert not isinstance(plan.order, Reported)  # the plan keeps the order, not the reporter
    # the same plan as with no reporting (and built once: the second call is cached)
    fresh = make(lens).plan_order(planner.epoch_order(1), epoch=1, world_size=3, whole=True)
    assert np.array_equal(plan.ids, fresh.ids)
    assert np.array_equal(plan.batch_bounds, fresh.batch_bounds)
    planner.build(len(lens), epoch=1, world_size=3)
    assert len([p for p in made if p.desc.startswith("plan ")]) == 1


def test_a_long_plan_build_logs_an_eta_on_rank_0_only(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    lens = np.random.default_rng(1).integers(1, 900, 3_000).astype(np.int32)
    monkeypatch.setattr(order_module, "REPORT_CHUNK", 500)
    made = _recorded(monkeypatch)
    real_init = progress_module.Progress.__init__

    def logging_often(self: Progress, *args: Any, **kwargs: Any) -> None:
        kwargs.update(every=0.0, quiet_below=0.0, stream=io.StringIO())  # no TTY: log lines
        real_init(self, *args, **kwargs)

    monkeypatch.setattr(progress_module.Progress, "__init__", logging_often)
    with caplog.at_level(logging.INFO, logger="chute.progress"):
        GroupedPlanner(8, lengths=lens).build(len(lens), epoch=0, world_size=2)
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("plan grouped")]
    assert lines[0].startswith("plan grouped: 500 / 3,000 ids (17%)") and "ETA" in lines[0]
    assert lines[-1].startswith("plan grouped: 3,000 ids in ")  # the summary
    caplog.clear()
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    with caplog.at_level(logging.INFO, logger="chute.progress"):
        GroupedPlanner(8, lengths=lens).build(len(lens), epoch=0, world_size=2)
    assert caplog.records == [] and not made[-1].shown  # other ranks stay quiet
    with silenced(), caplog.at_level(logging.INFO, logger="chute.progress"):
        GroupedPlanner(8, lengths=lens).build(len(lens), epoch=0, world_size=2)
    assert caplog.records == []


def test_a_full_hash_of_the_sources_shows_bytes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    made = _recorded(monkeypatch)
    tok = write_tokenizer(tmp_path / "tok")
    data = write_alpaca(tmp_path / "d.jsonl", 40)
    preprocess(config(data, tok), out=tmp_path / "quick")
    assert not [p for p in made if p.desc == "full hash"]  # ends only: nothing to show
    preprocess(config(data, tok), out=tmp_path / "whole", full_hash=True)
    (bar,) = [p for p in made if p.desc == "full hash"]
    assert bar.unit == "B" and bar.total == bar.done == data.stat().st_size
