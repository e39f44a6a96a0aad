"""One cache writer for one dataset and many (issue 29): the same bytes by every entry point.

``chute.cache.build.preprocess`` writes a dataset's cache; ``chute.preprocess`` (the public
entry, ``preprocess_any``) hands a plain config to it unchanged, and ``preprocess_mixture``
builds each dataset of a mixture with it into ``DIR/<name>``. So a dataset's cache is the same,
file for file, whichever way it was built, and so is its fingerprint.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import chute
from cache_helpers import config, tree_digest, write_alpaca, write_tokenizer
from chute import open_cache
from chute.cache.build import preprocess
from chute.mixture import Mixture, MixtureEntry, preprocess_any, preprocess_mixture

pytestmark = pytest.mark.timeout(300)


def test_a_dataset_cache_is_byte_identical_by_every_entry_point(tmp_path: Path) -> None:
    tok = write_tokenizer(tmp_path / "tok")
    data = write_alpaca(tmp_path / "train.jsonl", 200, broken=(5, 77))
    cfg = config(data, tok, max_length=96)
    alone = preprocess(cfg, out=tmp_path / "alone", progress=False)
    assert alone.finalized and alone.rejected >= 2  # the broken records (and any too long)
    entry = chute.preprocess(cfg, out=tmp_path / "entry", progress=False)
    assert type(entry) is type(alone)  # a plain config: the one-dataset report, as before
    preprocess_any(cfg, out=tmp_path / "any", progress=False)
    mix = Mixture([MixtureEntry("train", str(data))], recipe=cfg["recipe"], cache=cfg["cache"])
    report = preprocess_mixture(mix, out=tmp_path / "mix", progress=False)
    assert report.finalized and list(report.datasets) == ["train"]

    reference = tree_digest(tmp_path / "alone")
    assert len(reference) > 3  # chunks, their commit records, the manifest, ...
    assert tree_digest(tmp_path / "entry") == reference
    assert tree_digest(tmp_path / "any") == reference
    assert tree_digest(tmp_path / "mix" / "train") == reference
    fingerprint = open_cache(tmp_path / "alone").fingerprint()
    assert open_cache(tmp_path / "mix" / "train").fingerprint() == fingerprint
