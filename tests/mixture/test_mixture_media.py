"""One media plan for a mixture's batches: a dataset naming its Qwen-VL family decides it.

``image_tokens`` is a per-dataset option, but the media stage and the rotary positions are
run-wide. A text dataset left at ``auto`` first and an image dataset naming ``qwen2-vl`` after it
(docs/mixtures.md's worked example) gave 1-D positions to every batch: the first dataset's plan
was the mixture's.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from chute import Loader, World
from chute.errors import ConfigError
from chute.mixture import Mixture

LF = "llama-factory"


def _mixture(shared_data: Path, tmp_path: Path, text_tokens: str = "auto") -> Path:
    path = tmp_path / "mix.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "recipe": {"tokenizer": str(shared_data / "tokenizers/qwen3"), "template": "qwen3"},
                "datasets": {
                    "alpaca": {
                        "sources": [str(shared_data / LF / "alpaca_en_demo.json")],
                        "max_samples": 20,
                        "image_tokens": text_tokens,
                    },
                    "images": {
                        "sources": [str(shared_data / LF / "mllm_demo.json")],
                        "image_tokens": "qwen2-vl",
                    },
                },
            }
        )
    )
    return path


def test_the_dataset_naming_a_family_decides_the_batches_positions(
    shared_data: Path, tmp_path: Path
) -> None:
    loader = Loader(_mixture(shared_data, tmp_path), batch_size=4, seed=0, world=World())
    with_images = [b for b in loader if "pixel_values" in b]
    assert with_images
    for batch in with_images:
        positions = batch["position_ids"]
        assert positions.shape[0] == 3 and positions.shape[-1] == batch["input_ids"].shape[-1]


def test_two_families_in_one_mixture_are_refused(shared_data: Path, tmp_path: Path) -> None:
    mixture = Mixture.load(_mixture(shared_data, tmp_path, text_tokens="qwen2.5-vl"))
    with pytest.raises(ConfigError, match=r"different model families \(alpaca: qwen2.5-vl"):
        Loader(mixture, batch_size=4, world=World())


def test_a_preprocessed_multimodal_mixture_loads_its_images(
    shared_data: Path, tmp_path: Path
) -> None:
    """Over the caches `chute preprocess` built from the mixture, no media stage was made (a
    mixture of caches has no one recipe): image tokens were fed without pixels."""
    import numpy as np

    from chute import open_cache, preprocess

    mixture = Mixture.load(_mixture(shared_data, tmp_path))
    preprocess(mixture, out=tmp_path / "caches", workers=1)
    raw = Loader(mixture, batch_size=4, seed=0, world=World())
    cached = Loader(open_cache(tmp_path / "caches"), batch_size=4, seed=0, world=World())
    pairs = list(zip(raw, cached, strict=True))
    assert any("pixel_values" in b for b, _ in pairs)
    for a, b in pairs:
        assert a["sample_ids"].tolist() == b["sample_ids"].tolist()
        assert sorted(a) == sorted(b)
        if "pixel_values" in a:
            assert np.array_equal(np.asarray(a["pixel_values"]), np.asarray(b["pixel_values"]))
            assert np.array_equal(np.asarray(a["position_ids"]), np.asarray(b["position_ids"]))
