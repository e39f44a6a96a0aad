"""A cache folder that cannot be written (read-only, not ours, full) never stops a job silently.

Derived files are an optimisation: where the folder cannot be written at all, indexes and
lengths are kept in memory (each process computes its own, with a warning that says how to
share them); where a write runs out of space, the index falls back to memory and the lengths
pass, which the other ranks of a node wait for, stops with the fix. Nothing half-written is
left behind. "Cannot be written" is made real here without privileges: the cache folder lies
under a regular file, so no one, root included, can create it.
"""

from __future__ import annotations

import errno
import logging
from pathlib import Path

import pytest

from cache_helpers import write_alpaca, write_tokenizer
from chute import Loader, Recipe, World
from chute.lengths import lengths_of
from chute.sources import JsonlSource


def _recipe(tmp_path: Path) -> Recipe:
    return Recipe(tokenizer=write_tokenizer(tmp_path / "tok"), template="chatml", max_length=512)


def _left(folder: Path) -> list[str]:
    """The files in ``folder`` but the locks of a failed computation (``.building``)."""
    return [p.name for p in folder.iterdir() if not p.name.endswith(".building")]


def _full(*args: object, **kwargs: object) -> None:
    raise OSError(errno.ENOSPC, "No space left on device")


def test_a_cache_folder_that_cannot_be_made_keeps_indexes_and_lengths_in_memory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    data = write_alpaca(tmp_path / "a.jsonl", 60)
    recipe = _recipe(tmp_path)
    (tmp_path / "blocker").write_text("a file, not a folder")
    monkeypatch.setenv("CHUTE_CACHE_DIR", str(tmp_path / "blocker" / "cache"))
    caplog.set_level(logging.WARNING)
    seen = []
    for rank in range(2):  # local rank 1 computes its own instead of waiting for a file
        world = World(rank=rank, world_size=2, local_rank=rank, local_world_size=2)
        loader = Loader(data, recipe, batch_size=4, plan="packed", world=world, seed=0)
        seen += [i for b in loader for i in b["sample_ids"].tolist() if i >= 0]
    assert sorted(seen) == list(range(60))
    assert (
        "keeping indexes in memory" in caplog.text and "cannot write lengths under" in caplog.text
    )
    assert caplog.text.count("cannot write lengths under") == 1  # once per folder


def test_a_full_disk_while_indexing_keeps_the_index_in_memory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from chute.sources import index

    data = write_alpaca(tmp_path / "a.jsonl", 30)
    real_into = index._Scan.into

    def into_then_full(self: object, out: object) -> object:
        real_into(self, out)  # type: ignore[arg-type]
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(index._Scan, "into", into_then_full)
    caplog.set_level(logging.WARNING)
    source = JsonlSource(data)
    assert len(source) == 30 and source[29].data["instruction"].startswith("Question 29")
    assert "No space left on device" in caplog.text
    left = [p.name for p in (index.cache_root() / "index").iterdir()]
    assert all(name.endswith(".lock") for name in left), left  # nothing half-written


def test_a_full_disk_stops_the_lengths_pass_with_the_fix_and_leaves_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from chute._internal import files

    data = write_alpaca(tmp_path / "a.jsonl", 40)
    recipe = _recipe(tmp_path)
    monkeypatch.setattr(files, "_reserve", _full)
    with pytest.raises(
        OSError, match=r"cannot write the lengths cache of 40 records under .*lengths \(No space"
    ) as caught:
        lengths_of(JsonlSource(data), recipe)
    assert caught.value.errno == errno.ENOSPC and "set CHUTE_CACHE_DIR" in str(caught.value)
    assert not _left(files.cache_root() / "lengths")
    monkeypatch.undo()
    assert len(lengths_of(JsonlSource(data), recipe)) == 40  # with room again


def test_a_lengths_array_whose_sidecar_cannot_be_written_is_removed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from chute._internal import files
    from chute.lengths import store

    data = write_alpaca(tmp_path / "a.jsonl", 40)
    monkeypatch.setattr(store, "atomic_file", _full)
    with pytest.raises(OSError, match="No space left"):
        lengths_of(JsonlSource(data), _recipe(tmp_path))
    assert not _left(files.cache_root() / "lengths")


def test_content_hashes_under_a_folder_that_cannot_be_made_are_computed_in_memory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from chute.mixture.hashes import content_hashes

    data = write_alpaca(tmp_path / "a.jsonl", 30)
    kept = content_hashes(JsonlSource(data), "auto", workers=1).copy()
    (tmp_path / "blocker").write_text("a file, not a folder")
    monkeypatch.setenv("CHUTE_CACHE_DIR", str(tmp_path / "blocker" / "cache"))
    caplog.set_level(logging.WARNING)
    again = content_hashes(JsonlSource(data), "auto", workers=1, local_rank=1)  # no waiting
    assert again.tolist() == kept.tolist()
    assert "cannot write content hashes under" in caplog.text


def test_a_compressed_file_without_room_for_its_copy_says_where_and_how(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import gzip

    from chute.errors import SourceError
    from chute.sources import decompress, open_source

    data = write_alpaca(tmp_path / "a.jsonl", 20)
    packed = tmp_path / "a.jsonl.gz"
    packed.write_bytes(gzip.compress(data.read_bytes()))
    with monkeypatch.context() as patch:
        patch.setattr(decompress, "atomic_file", _full)
        with pytest.raises(SourceError, match=r"decompressed copy under .*No space left on device"):
            open_source(str(packed))
    (tmp_path / "blocker").write_text("a file, not a folder")
    monkeypatch.setenv("CHUTE_CACHE_DIR", str(tmp_path / "blocker" / "cache"))
    with pytest.raises(SourceError, match="it cannot be written; set CHUTE_CACHE_DIR"):
        open_source(str(packed))


def test_an_inline_clip_without_a_writable_folder_for_its_copy_is_a_setting_to_fix(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import base64

    from chute.errors import ConfigError
    from chute.media.inline import local_copy

    source = "data:audio/wav;base64," + base64.b64encode(b"RIFF....WAVE").decode()
    assert Path(local_copy(source, "audio")).read_bytes() == b"RIFF....WAVE"
    (tmp_path / "blocker").write_text("a file, not a folder")
    monkeypatch.setenv("CHUTE_CACHE_DIR", str(tmp_path / "blocker" / "cache"))
    with pytest.raises(ConfigError, match="decoded from a local copy under .*set CHUTE_CACHE_DIR"):
        local_copy(source, "audio")
