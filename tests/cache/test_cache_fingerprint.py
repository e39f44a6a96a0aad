"""Every fingerprint field, changed alone, is detected on open and named with both values."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import orjson
import pytest

from cache_helpers import write_alpaca, write_tokenizer
from chute import FingerprintMismatch, PreprocessConfig, Recipe, open_cache, preprocess
from chute.cache import RecipeConfig
from chute.cache.layout import Layout
from chute.errors import ConfigError
from chute.recipe import MediaSpec

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict:
    root = tmp_path_factory.mktemp("fp")
    tok = write_tokenizer(root / "tok")
    (root / "media").mkdir()
    (root / "other").mkdir()
    data = write_alpaca(root / "train.jsonl", 200)
    recipe = {
        "tokenizer": str(tok),
        "template": "chatml",
        "format": "alpaca",
        "max_length": 256,
        "image_tokens": 16,
        "media_root": str(root / "media"),
    }
    cfg = {"sources": [str(data)], "recipe": recipe, "cache": {"chunk_size": 64, "workers": 1}}
    preprocess(cfg, out=root / "cache")
    return {"root": root, "cache": root / "cache", "recipe": recipe, "cfg": cfg, "tok": tok}


CHANGES = [
    ("format", "auto", "format.name differs: cache 'alpaca', recipe 'auto'"),
    ("template", "vicuna", "template.name differs: cache 'chatml', recipe 'vicuna'"),
    ("max_length", 4096, "max_length differs: cache 256, recipe 4096"),
    ("max_length", None, "max_length differs: cache 256, recipe None"),
    ("overflow", "drop", "overflow differs: cache 'truncate', recipe 'drop'"),
    ("train_on", "all", "train_on differs: cache 'assistant', recipe 'all'"),
    ("columns", {"prompt": "q"}, "format.columns.prompt differs: cache '<absent>', recipe 'q'"),
    ("tags", {"user_tag": "Q"}, "format.tags.user_tag differs"),
    ("placeholders", {"image": "<IMG>"}, "format.placeholders.image differs"),
    ("system", "Be brief.", "system differs: cache None, recipe 'Be brief.'"),
    ("template_vars", {"enable_thinking": False}, "template_vars.enable_thinking differs"),
    ("special_tokens", {"eos": "<|im_end|>"}, "tokenizer.special_tokens.eos differs"),
    ("media_root", "OTHER", "media.media_root differs"),
    ("image_tokens", 32, "media.image_tokens.tokens differs: cache 16, recipe 32"),
    ("image_token", "<|video_pad|>", "media.tokens.image differs"),
    ("image_token_id", 7, "media.image_token_id differs: cache None, recipe 7"),
    ("video_tokens", 8, "media.video_tokens differs"),
    ("audio_tokens", 8, "media.audio_tokens differs"),
    ("check_images", False, "media.check_images differs: cache True, recipe False"),
    ("allow_urls", True, "media.allow_urls differs: cache False, recipe True"),
    ("max_image_pixels", 1000, "media.max_image_pixels differs"),
    ("media_allowed_roots", ["OTHER"], "media.allowed_roots (length) differs: cache 0, recipe 1"),
    ("geometry", "qwen2-vl", "geometry"),
    ("timestamps", "seconds", "timestamps"),
]


@pytest.mark.parametrize(("field", "value", "named"), CHANGES, ids=[c[0] for c in CHANGES])
def test_each_recipe_field_changed_alone_is_named(built: dict, field, value, named) -> None:
    other = str(built["root"] / "other")
    value = other if value == "OTHER" else [other] if value == ["OTHER"] else value
    changed = {**built["recipe"], field: value}
    with pytest.raises(FingerprintMismatch) as info:
        open_cache(built["cache"], recipe=Recipe(**changed))
    message = str(info.value)
    assert named in message
    assert len(info.value.fields) == len(message.splitlines()) - 2  # only what changed
    assert f"chute preprocess {built['cache']}/config.yaml --out {built['cache']}" in message


def test_a_config_takes_geometry_and_timestamps_as_the_recipe_does() -> None:
    config = RecipeConfig(tokenizer="t", geometry="qwen2-vl", timestamps={"mode": "check"})
    assert (config.geometry, config.timestamps) == ("qwen2-vl", {"mode": "check"})
    with pytest.raises(ConfigError, match=r"geometry: expected a name, a mapping of its fields"):
        RecipeConfig(tokenizer="t", geometry=5)  # type: ignore[arg-type]


def test_same_recipe_config_or_object_opens(built: dict) -> None:
    assert len(open_cache(built["cache"], recipe=Recipe(**built["recipe"]))) == 200
    assert len(open_cache(built["cache"], recipe=built["recipe"])) == 200
    assert len(open_cache(built["cache"], recipe=PreprocessConfig.from_dict(built["cfg"]))) == 200


def test_a_media_spec_opens_the_cache_its_flat_keys_built(built: dict) -> None:
    """``Recipe(media=MediaSpec(...))`` is the config's flat media keys: same fingerprint."""
    flat = {k: v for k, v in built["recipe"].items() if k not in ("image_tokens", "media_root")}
    spec = MediaSpec(image_tokens=16, root=built["recipe"]["media_root"])
    assert len(open_cache(built["cache"], recipe=Recipe(**flat, media=spec))) == 200
    other = MediaSpec(image_tokens=32, root=built["recipe"]["media_root"])
    with pytest.raises(FingerprintMismatch, match=r"media.image_tokens.tokens differs: cache 16"):
        open_cache(built["cache"], recipe=Recipe(**flat, media=other))


def test_a_config_mismatch_prints_the_overrides_that_rebuild(built: dict) -> None:
    wanted = RecipeConfig(**{**built["recipe"], "max_length": 4096, "system": "Be brief."})
    with pytest.raises(FingerprintMismatch) as info:
        open_cache(built["cache"], recipe=wanted)
    assert "--overwrite recipe.max_length=4096 'recipe.system=Be brief.'" in str(info.value)
    other = PreprocessConfig.from_dict({**built["cfg"], "sources": [str(built["root"] / "x")]})
    with pytest.raises(FingerprintMismatch, match=r"sources\[0\] differs"):
        open_cache(built["cache"], recipe=other)


def test_tokenizer_files_are_fingerprinted(tmp_path: Path, built: dict) -> None:
    tok = write_tokenizer(tmp_path / "tok")
    config = json.loads((tok / "tokenizer_config.json").read_text())
    (tok / "tokenizer_config.json").write_text(json.dumps({**config, "unk_token": "<pad>"}))
    recipe = Recipe(**{**built["recipe"], "tokenizer": str(tok)})
    with pytest.raises(FingerprintMismatch) as info:
        open_cache(built["cache"], recipe=recipe)
    assert "tokenizer.files.tokenizer_config.json differs" in str(info.value)
    assert "tokenizer.special_tokens.unk differs: cache None, recipe '<pad>'" in str(info.value)
    blob = json.loads((tok / "tokenizer.json").read_text())
    blob["added_tokens"][0]["normalized"] = not blob["added_tokens"][0]["normalized"]
    (tok / "tokenizer.json").write_text(json.dumps(blob))
    with pytest.raises(FingerprintMismatch, match="tokenizer.files.tokenizer.json differs"):
        open_cache(built["cache"], recipe=Recipe(**{**built["recipe"], "tokenizer": str(tok)}))


def _source_case(tmp_path: Path, *, full_hash: bool, n: int = 3000) -> tuple[Path, Path]:
    tok = write_tokenizer(tmp_path / "tok")
    data = write_alpaca(tmp_path / "d.jsonl", n)
    cfg = {
        "sources": [str(data)],
        "recipe": {"tokenizer": str(tok), "template": "chatml"},
        "cache": {"chunk_size": 1000, "workers": 1, "full_hash": full_hash},
    }
    preprocess(cfg, out=tmp_path / "c")
    return data, tmp_path / "c"


def _rewrite_same_size(path: Path, offset: int) -> None:
    """Change one byte at ``offset`` and restore the mtime: size and mtime say nothing."""
    st = path.stat()
    blob = bytearray(path.read_bytes())
    blob[offset] = ord("X") if blob[offset] != ord("X") else ord("Y")
    path.write_bytes(bytes(blob))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))


def test_changed_sources_are_named(tmp_path: Path) -> None:
    data, cache = _source_case(tmp_path, full_hash=False)
    st = data.stat()
    os.utime(data, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    with pytest.raises(FingerprintMismatch, match=f"source {data}: mtime_ns differs"):
        open_cache(cache)
    os.utime(data, ns=(st.st_atime_ns, st.st_mtime_ns))
    open_cache(cache)
    _rewrite_same_size(data, 20)  # inside the first 64 KiB: the edge hash sees it
    with pytest.raises(FingerprintMismatch, match=f"source {data}: edge_hash differs"):
        open_cache(cache)
    assert len(open_cache(cache, verify_sources=False)) == 3000
    with open(data, "ab") as f:
        f.write(b'{"instruction": "new", "output": "row"}\n')
    with pytest.raises(FingerprintMismatch) as info:
        open_cache(cache)
    assert f"source {data}: size differs: cache {st.st_size}, now {st.st_size + 40}" in str(
        info.value
    )
    assert "verify_sources=False" in str(info.value)
    data.unlink()
    with pytest.raises(FingerprintMismatch, match="differs: cache 'present', now 'missing'"):
        open_cache(cache)


def test_full_hash_catches_what_size_mtime_and_edges_miss(tmp_path: Path) -> None:
    data, cache = _source_case(tmp_path / "edges", full_hash=False)
    assert data.stat().st_size > 3 * 65536
    middle = data.stat().st_size // 2
    _rewrite_same_size(data, middle)
    assert len(open_cache(cache)) == 3000  # the documented limit of the cheap identity
    data, cache = _source_case(tmp_path / "full", full_hash=True)
    original = data.read_bytes()
    open_cache(cache)
    _rewrite_same_size(data, middle)
    with pytest.raises(FingerprintMismatch, match=f"source {data}: full_hash differs"):
        open_cache(cache)
    data.write_bytes(original)  # the same bytes with a new mtime (a copy): the same source
    assert len(open_cache(cache)) == 3000


@pytest.mark.parametrize(("version", "said"), [(0, "older chute"), (None, "older"), (3, "newer")])
def test_other_format_versions_are_refused(built: dict, tmp_path: Path, version, said) -> None:
    copy = tmp_path / "copy"
    shutil.copytree(built["cache"], copy)
    manifest = orjson.loads(Layout(copy).manifest.read_bytes())
    manifest["format_version"] = version
    if version is None:
        del manifest["format_version"]
    Layout(copy).manifest.write_bytes(orjson.dumps(manifest))
    with pytest.raises(FingerprintMismatch) as info:
        open_cache(copy)
    message = str(info.value)
    assert said in message and f"format_version differs: cache {version}, this chute 2" in message
    assert f"Rebuild it: chute preprocess {copy}/config.yaml --out {copy} --overwrite" in message


def test_a_version_1_cache_is_still_read(built: dict, tmp_path: Path) -> None:
    # Version 2 added video timing to media entries; a version 1 cache reads them as absent.
    copy = tmp_path / "v1"
    shutil.copytree(built["cache"], copy)
    manifest = orjson.loads(Layout(copy).manifest.read_bytes())
    manifest["format_version"] = 1
    Layout(copy).manifest.write_bytes(orjson.dumps(manifest))
    assert len(open_cache(copy)) == len(open_cache(built["cache"]))


def test_a_directory_of_another_job_is_refused_then_overwritten(built: dict, tmp_path) -> None:
    out = tmp_path / "c"
    preprocess(built["cfg"], out=out)
    other = {**built["cfg"], "recipe": {**built["recipe"], "max_length": 128}}
    with pytest.raises(FingerprintMismatch) as info:
        preprocess(other, out=out)
    assert f"recipe.max_length differs: in {out} 256, this run 128" in str(info.value)
    assert "--overwrite" in str(info.value)
    report = preprocess(other, out=out, overwrite=True)
    assert (
        report.built == 4 and open_cache(out).manifest["fingerprint"]["recipe"]["max_length"] == 128
    )


def test_the_rebuild_command_for_a_recipe_object_builds_what_the_recipe_makes(
    built: dict, tmp_path: Path
) -> None:
    """A ``Recipe`` keeps no config: its plain differences become the command's overrides,
    so running the command gives a cache the recipe opens (not the same cache again)."""
    import shlex

    changed = {**built["recipe"], "max_length": 128, "train_on": "all"}
    with pytest.raises(FingerprintMismatch) as info:
        open_cache(built["cache"], recipe=Recipe(**changed))
    command = str(info.value).split("Rebuild it: ", 1)[1].split(" (or --out", 1)[0]
    overrides = [a for a in shlex.split(command) if a.startswith("recipe.")]
    assert sorted(overrides) == ["recipe.max_length=128", "recipe.train_on=all"]
    out = tmp_path / "rebuilt"  # the command, into another folder than the shared fixture's
    preprocess(built["cache"] / "config.yaml", out=out, overrides=overrides, progress=False)
    assert len(open_cache(out, recipe=Recipe(**changed))) == 200
    # a difference no option spells one to one: edit the config first, the message says where
    with pytest.raises(FingerprintMismatch, match=r"set your recipe's options in .*config.yaml"):
        open_cache(built["cache"], recipe=Recipe(**{**built["recipe"], "columns": {"prompt": "q"}}))


def test_the_telling_differences_come_first_and_are_never_cut() -> None:
    from chute.cache.fingerprint import mismatch

    diffs = [(f"media.image_tokens.field{i}", i, i + 1) for i in range(12)]
    diffs += [("template.name", "qwen3", "llama3"), ("tokenizer.vocab_size", 151669, 128257)]
    message = str(mismatch("c", "was built for a different recipe", diffs, "recipe"))
    lines = message.splitlines()
    assert lines[1].startswith("  tokenizer.vocab_size differs: cache 151669, recipe 128257")
    assert lines[2].startswith("  template.name differs")
    assert "... and" in message  # media lines were cut, not these
