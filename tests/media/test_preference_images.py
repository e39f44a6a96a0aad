"""Preference pairs with images: the image in the shared prompt, decoded once per pair.

Both sides are checked on a tiny random-initialised Qwen2-VL: each side's loss from chute's
batches (padded, and packed with both sides in one row) equals the loss of that side computed
the model's usual way (the processor's inputs, one sequence per forward, ``position_ids=None``).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from chute import Loader, Recipe, SampleError, open_cache, open_source, preprocess  # noqa: E402
from chute.collate.packed import hf_packed_inputs  # noqa: E402
from chute.recipe.preference import pair_sides  # noqa: E402
from qwen_vl_helpers import processor, processor_inputs, special_ids, tiny_model  # noqa: E402

pytestmark = [pytest.mark.shared_data, pytest.mark.slow]

PAIRS = [
    {
        "conversations": [{"from": "human", "value": "<image>Who are they?"}],
        "chosen": {"from": "gpt", "value": "They are football players on a pitch."},
        "rejected": {"from": "gpt", "value": "A cat and a dog."},
        "images": ["images/1.jpg"],
    },
    {
        "conversations": [{"from": "human", "value": "Compare <image> with <image>."}],
        "chosen": {"from": "gpt", "value": "Both show a match in a stadium."},
        "rejected": {"from": "gpt", "value": "No idea."},
        "images": ["images/2.jpg", "images/3.jpg"],
    },
    {
        "conversations": [{"from": "human", "value": "Say hello."}],
        "chosen": {"from": "gpt", "value": "Hello!"},
        "rejected": {"from": "gpt", "value": "Go away."},
    },
]


@pytest.fixture
def pairs(shared_data: Path, tmp_path: Path) -> Path:
    folder = tmp_path / "data"
    shutil.copytree(shared_data / "llama-factory" / "mllm_demo_data", folder / "images")
    path = folder / "pairs.jsonl"
    path.write_text("".join(json.dumps(p) + "\n" for p in PAIRS))
    return path


def make_recipe(shared_data: Path) -> Recipe:
    return Recipe(
        tokenizer=shared_data / "tokenizers" / "qwen3",
        task="preference",
        image_tokens="qwen2-vl",
        max_length=512,
    )


def test_a_pair_lists_its_images_once_with_both_spans(shared_data: Path, pairs: Path) -> None:
    r = make_recipe(shared_data)
    sample = r(open_source(pairs)[1])
    k = sample["chosen_length"]
    image_pad = r.tokenizer.token_to_id("<|image_pad|>")
    ids = np.asarray(sample["input_ids"])
    assert len(sample["images"]) == 2
    for item in sample["images"]:
        (a, b), (c, d) = item["span"], item["rejected_span"]
        assert b <= k <= c and b - a == d - c == item["num_tokens"]
        assert (ids[a:b] == image_pad).all() and (ids[c:d] == image_pad).all()
    assert sample["num_image_tokens"] == int((ids == image_pad).sum())
    # the image tokens are never trained; each side is trained from its response on
    labels = np.asarray(sample["labels"])
    assert (labels[ids == image_pad] == -100).all()
    chosen, rejected = pair_sides(sample)
    assert chosen["images"][0]["span"] == sample["images"][0]["span"]
    first_trained = [int(np.argmax(np.asarray(s["labels"]) != -100)) for s in (chosen, rejected)]
    assert first_trained[0] == first_trained[1] > sample["images"][1]["span"][1]


def test_an_image_in_a_response_is_a_counted_reject(shared_data: Path, tmp_path: Path) -> None:
    r = make_recipe(shared_data)
    shutil.copytree(shared_data / "llama-factory" / "mllm_demo_data", tmp_path / "images")
    record = {
        "conversations": [{"from": "human", "value": "Draw a match."}],
        "chosen": {"from": "gpt", "value": "<image>"},
        "rejected": {"from": "gpt", "value": "No."},
        "images": ["images/1.jpg"],
    }
    with pytest.raises(SampleError, match="media_in_response: a response holds media"):
        r.process(record, path=str(tmp_path / "x.jsonl"))


def test_pixels_are_decoded_once_per_pair(
    shared_data: Path, pairs: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import chute.media.stage as stage

    decoded: list[Any] = []
    real = stage.decode_image

    def counting(source: Any, options: Any) -> Any:
        decoded.append(source)
        return real(source, options)

    monkeypatch.setattr(stage, "decode_image", counting)
    r = make_recipe(shared_data)
    padded = next(iter(Loader(pairs, r, batch_size=3, shuffle=False)))
    assert len(decoded) == 3  # three images in three pairs, not six
    assert padded["image_grid_thw"].shape == (3, 3)
    decoded.clear()
    packed = next(iter(Loader(pairs, r, batch_size=3, shuffle=False, plan="packed")))
    assert len(decoded) == 3
    # in packed rows both segments of a pair hold the image tokens: its pixels come twice
    assert packed["image_grid_thw"].shape == (6, 3)
    per_pair = dict(zip(padded["sample_ids"].tolist(), split_pixels(padded), strict=True))
    expected = [x for i in packed["sample_ids"].tolist() for x in (per_pair[i], per_pair[i])]
    np.testing.assert_array_equal(packed["pixel_values"].numpy(), np.concatenate(expected))


def split_pixels(batch: dict[str, Any]) -> list[np.ndarray]:
    """Each pair's patches of a padded pair batch (``image_counts`` images each)."""
    patches = batch["image_grid_thw"].prod(-1).tolist()
    counts = batch["image_counts"].tolist()
    ends = np.cumsum(
        [sum(patches[a : a + c]) for a, c in zip(np.cumsum([0, *counts[:-1]]), counts, strict=True)]
    )
    return np.split(batch["pixel_values"].numpy(), ends[:-1])


def side_reference(
    model: Any, proc: Any, r: Recipe, source: Any, ids: list[int], side: int
) -> tuple[float, int]:
    """Sum of token losses and targets of one side of pairs, one forward per sequence."""
    total, targets = 0.0, 0
    pad = r.tokenizer.token_to_id("<|image_pad|>")
    for i in ids:
        seq = pair_sides(r(source[i]))[side]
        labels = torch.as_tensor(np.asarray(seq["labels"]), dtype=torch.long)[None]
        if seq.get("images"):
            inputs = dict(processor_inputs(proc, seq, pad))
            np.testing.assert_array_equal(inputs["input_ids"][0].numpy(), seq["input_ids"])
        else:
            inputs = {
                "input_ids": torch.as_tensor(np.asarray(seq["input_ids"]), dtype=torch.long)[None]
            }
        out = model(**inputs, labels=labels)
        n = int((labels[0, 1:] != -100).sum())
        total += out.loss.item() * n
        targets += n
    return total, targets


def test_both_sides_train_as_alone(
    shared_data: Path, pairs: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    r = make_recipe(shared_data)
    model = tiny_model("qwen2-vl", special_ids(r))
    hf_tok = transformers.PreTrainedTokenizerFast(
        tokenizer_file=str(shared_data / "tokenizers" / "qwen3" / "tokenizer.json")
    )
    proc = processor("qwen2-vl", hf_tok, monkeypatch)
    source = open_source(pairs)
    padded = next(iter(Loader(pairs, r, batch_size=3, shuffle=False)))
    order = padded["sample_ids"].tolist()
    sums = []
    with torch.no_grad():
        for side, name in enumerate(("chosen", "rejected")):
            total, targets = side_reference(model, proc, r, source, order, side)
            sums.append((total, targets))
            # each side's rows take the pair's pixels: the images are the same on both sides
            out = model(
                input_ids=padded[f"{name}_input_ids"],
                attention_mask=padded[f"{name}_attention_mask"],
                position_ids=padded[f"{name}_position_ids"],
                mm_token_type_ids=padded[f"{name}_mm_token_type_ids"],
                pixel_values=padded["pixel_values"],
                image_grid_thw=padded["image_grid_thw"],
                labels=padded[f"{name}_labels"],
            )
            assert out.loss.item() == pytest.approx(total / targets, abs=1e-4)
        packed = next(iter(Loader(pairs, r, batch_size=3, shuffle=False, plan="packed")))
        both = (sums[0][0] + sums[1][0]) / (sums[0][1] + sums[1][1])
        assert model(**hf_packed_inputs(packed)).loss.item() == pytest.approx(both, abs=1e-4)
    # the same pairs through the token cache
    out = tmp_path / "cache"
    preprocess(
        sources=[str(pairs)],
        recipe={
            "tokenizer": str(shared_data / "tokenizers" / "qwen3"),
            "task": "preference",
            "image_tokens": "qwen2-vl",
            "max_length": 512,
        },
        out=out,
        progress=False,
    )
    cached = next(iter(Loader(open_cache(out), batch_size=3, shuffle=False, plan="packed")))
    for key in ("input_ids", "position_ids", "pixel_values", "image_grid_thw", "chosen_mask"):
        np.testing.assert_array_equal(cached[key].numpy(), packed[key].numpy())
