"""``MediaSpec``: the media options as one checked value, given in place of their keywords.

``Recipe(media=MediaSpec(...))`` and the loose keywords give the same ``recipe.media`` (the
``MediaPlan`` the layers above read), the same samples and the same fingerprint; both at once
is a ``ConfigError`` naming the clash; in a config the spec is the flat keys it always was.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from chute import JsonlSource, Recipe, SampleError
from chute.cache.config import RecipeConfig
from chute.errors import ConfigError
from chute.media.refs import MediaPlan
from chute.recipe import MediaSpec, RecipeOptions, as_recipe
from chute.recipe.options import OPTION_NAMES
from chute.recipe.specs import group_of
from recipe_helpers import real_tokenizer, tiny_tokenizer

TOK = tiny_tokenizer()
MEDIA_KEYWORDS = tuple(MediaSpec.KEYWORDS)


def test_the_spec_stands_for_exactly_the_options_the_media_entry_holds() -> None:
    """Its keywords are the fingerprint's ``media`` entry: nothing left loose, nothing added."""
    assert set(MEDIA_KEYWORDS) == set(RecipeOptions.FINGERPRINTED_WITHIN["media"])
    assert set(MEDIA_KEYWORDS) <= set(OPTION_NAMES)
    assert "geometry" not in MEDIA_KEYWORDS and "timestamps" not in MEDIA_KEYWORDS
    # each field's default is its option's default: an empty spec is no option given
    defaults = RecipeOptions(tokenizer="t")
    assert MediaSpec().keywords() == {k: getattr(defaults, k) for k in MEDIA_KEYWORDS}


def test_the_spec_checks_itself_by_the_options_declarations() -> None:
    with pytest.raises(ConfigError, match=r"^max_image_pixels: expected a positive integer, got 0"):
        MediaSpec(max_image_pixels=0)
    with pytest.raises(ConfigError, match=r"^check_images: expected true or false, got 'yes'"):
        MediaSpec(check_images="yes")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"^media_root: expected a folder, a mapping"):
        MediaSpec(root=5)
    with pytest.raises(ConfigError, match=r"^media_allowed_roots: expected a list of folders"):
        MediaSpec(allowed_roots="imgs")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        MediaSpec("qwen2-vl")  # type: ignore[misc]  # keywords only: twelve fields, no order


def test_the_spec_is_frozen_and_keeps_what_it_was_made_with() -> None:
    roots, by_file = ["/a"], {"*.jsonl": "/imgs"}
    spec = MediaSpec(root=by_file, allowed_roots=roots)
    roots.append("/b")
    by_file["x.jsonl"] = "/other"
    assert (spec.allowed_roots, spec.root) == (["/a"], {"*.jsonl": "/imgs"})
    assert MediaSpec(allowed_roots=None).allowed_roots == []  # type: ignore[arg-type]
    with pytest.raises(dataclasses.FrozenInstanceError):
        spec.image_tokens = 64  # type: ignore[misc]


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        (
            {"media": MediaSpec(image_tokens=64), "media_root": "imgs"},
            r"^media: media options given twice: media=MediaSpec\(\.\.\.\) and media_root; "
            r"set them in the MediaSpec",
        ),
        (
            {"media": MediaSpec(), "check_images": True, "image_tokens": "auto"},
            r"^media: media options given twice: media=MediaSpec\(\.\.\.\) and image_tokens, "
            r"check_images",  # even at their defaults: a keyword given is a keyword given
        ),
        (
            {"media": "qwen2-vl"},
            r"^media: expected a chute.recipe.MediaSpec or None, got str \(the stage that "
            r"decodes media in the workers is the Loader's: Loader\(media=\.\.\.\)\)",
        ),
    ],
)
def test_a_spec_and_its_keywords_are_never_both_given(kwargs: dict[str, Any], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        Recipe(tokenizer=TOK, template="chatml", **kwargs)


def test_recipe_media_stays_the_plan_the_contract_reads() -> None:
    recipe = Recipe(tokenizer=TOK, template="chatml", media=MediaSpec(image_tokens=7))
    assert isinstance(recipe.media, MediaPlan)
    assert as_recipe(recipe).media is recipe.media
    assert recipe.options["image_tokens"] == 7  # the flat keys, as given loose
    record = {
        "messages": [
            {"role": "user", "content": "<image>What is it?"},
            {"role": "assistant", "content": "A cat."},
        ],
        "images": ["a.png"],
    }
    loose = Recipe(tokenizer=TOK, template="chatml", image_tokens=7, check_images=False)
    grouped = Recipe(
        tokenizer=TOK, template="chatml", media=MediaSpec(image_tokens=7, check_images=False)
    )
    assert grouped(record)["input_ids"].tolist() == loose(record)["input_ids"].tolist()
    assert grouped(record)["num_image_tokens"] == 7
    with pytest.raises(SampleError, match="image_missing"):
        recipe(record)  # check_images stays on by default, in the spec as loose


def test_every_field_reaches_the_plan_as_its_keyword_does(tmp_path: Path) -> None:
    """Each option away from its default, grouped or loose: the same plan, fingerprint, options."""
    (tmp_path / "imgs").mkdir()
    (tmp_path / "more").mkdir()
    loose: dict[str, Any] = {
        "image_tokens": 16,
        "image_token": "<img>",
        "image_token_id": 5,
        "video_tokens": 8,
        "audio_tokens": 4,
        "video_token": "<vid>",
        "audio_token": "<aud>",
        "media_root": str(tmp_path / "imgs"),
        "check_images": False,
        "allow_urls": True,
        "max_image_pixels": 1000,
        "media_allowed_roots": [str(tmp_path / "more")],
    }
    assert set(loose) == set(MEDIA_KEYWORDS)
    spec = group_of(MediaSpec, None, loose)
    assert spec.keywords() == loose
    a = Recipe(tokenizer=TOK, template="chatml", **loose)
    b = Recipe(tokenizer=TOK, template="chatml", media=spec)
    assert b.fingerprint() == a.fingerprint()
    assert b.options == a.options
    assert b.media.to_json() == a.media.to_json() == spec.plan(TOK).to_json()
    defaults = Recipe(tokenizer=TOK, template="chatml").media.to_json()
    assert all(b.media.to_json()[k] != defaults[k] for k in ("allow_urls", "check_images"))


def test_specs_serialise_as_the_config_keys(tmp_path: Path) -> None:
    """In YAML the spec is the flat keys: the same config, the same fingerprint."""
    (tmp_path / "imgs").mkdir()
    spec = MediaSpec(image_tokens="llava-1.5", root=str(tmp_path / "imgs"), allow_urls=True)
    config = RecipeConfig(tokenizer="tok.json", **spec.keywords())
    assert config == RecipeConfig(
        tokenizer="tok.json",
        image_tokens="llava-1.5",
        media_root=str(tmp_path / "imgs"),
        allow_urls=True,
    )
    assert group_of(MediaSpec, None, spec.keywords()) == spec  # and back


def _same_samples(loose: Recipe, grouped: Recipe, records: list[Any]) -> int:
    """Every record gives the same sample (ids, labels, media) or the same error."""
    assert grouped.fingerprint() == loose.fingerprint()
    assert grouped.options == loose.options
    seen = 0
    for record in records:
        try:
            want = loose(record)
        except SampleError as exc:
            with pytest.raises(SampleError, match=exc.kind):
                grouped(record)
            continue
        got = grouped(record)
        assert got["input_ids"].tolist() == want["input_ids"].tolist()
        assert got["labels"].tolist() == want["labels"].tolist()
        for kind in ("images", "videos", "audios"):
            assert got[kind] == want[kind]
        seen += 1
    batched = [s for s in grouped.batch(records) if not isinstance(s, SampleError)]
    assert [s["input_ids"].tolist() for s in batched] == [
        s["input_ids"].tolist() for s in loose.batch(records) if not isinstance(s, SampleError)
    ]
    return seen


@pytest.mark.shared_data
def test_real_multimodal_records_give_the_same_samples_and_fingerprint(shared_data: Path) -> None:
    """mllm_demo.json (images), and video + audio clips, through the spec and the keywords."""
    qwen = real_tokenizer(str(shared_data / "tokenizers/qwen3/tokenizer.json"))
    root = shared_data / "llama-factory"
    options: dict[str, Any] = {
        "image_tokens": "qwen2-vl",
        "media_root": str(root),
        "max_image_pixels": 10**6,
        "media_allowed_roots": [str(shared_data / "images")],
    }
    loose = Recipe(tokenizer=qwen, template="qwen3", **options)
    grouped = Recipe(tokenizer=qwen, template="qwen3", media=group_of(MediaSpec, None, options))
    records = list(JsonlSource(root / "mllm_demo.json"))
    assert _same_samples(loose, grouped, records) == len(records) == 6
    assert sum(len(s["images"]) for s in grouped.batch(records)) > 6  # some records hold two

    clips: dict[str, Any] = {
        "video_tokens": 64,
        "audio_tokens": 32,
        "video_token": "<|video_pad|>",
        "audio_token": "<|quad_start|>",  # the vocabulary has no audio token of its own
        "check_images": False,
    }
    loose = Recipe(tokenizer=qwen, template="qwen3", **clips)
    grouped = Recipe(tokenizer=qwen, template="qwen3", media=MediaSpec(**clips))
    records = list(JsonlSource(root / "mllm_video_audio_demo.json"))
    assert _same_samples(loose, grouped, records) == len(records) == 3
    assert all(s["videos"] and s["audios"] for s in grouped.batch(records))
