"""The preprocessing config: YAML, dotted overrides, every error at once, paths resolved."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml

from cache_helpers import write_tokenizer
from chute import ConfigError, PreprocessConfig, preprocess
from chute.cache import load_config


def test_yaml_file_overrides_and_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(
        "sources: [a.jsonl]\nrecipe:\n  tokenizer: tok\n  max_length: 2048\ncache:\n  workers: 2\n"
    )
    cfg = load_config(
        path,
        [
            "recipe.max_length=4096",
            "recipe.template=null",
            "sources=[a.jsonl, b.jsonl]",
            "recipe.columns.prompt=question",
            "recipe.system=Be brief: always.",
        ],
    )
    assert cfg.recipe.max_length == 4096 and cfg.recipe.template is None
    assert cfg.sources == ["a.jsonl", "b.jsonl"]
    assert cfg.recipe.columns == {"prompt": "question"}
    assert cfg.recipe.system == "Be brief: always."
    again = PreprocessConfig.from_dict(yaml.safe_load(cfg.to_yaml()))
    assert again == cfg
    shaping = yaml.safe_load(cfg.to_yaml(shaping_only=True))
    # chunk_size left out: chosen from the record count when the build starts (the config a
    # build keeps says the number; tests/cache/test_cache_chunking.py)
    assert shaping["cache"] == {"chunk_size": None, "full_hash": False}


def test_every_problem_is_reported_at_once_with_its_key() -> None:
    with pytest.raises(ConfigError) as info:
        PreprocessConfig.from_dict(
            {
                "sources": "a.jsonl",
                "recipe": {"tokenizer": "t", "overflow": "cut", "image_tokens": True},
                "cache": {"workers": 0, "max_bad_fraction": 2, "chunksize": 5},
                "extra": 1,
            }
        )
    lines = str(info.value).splitlines()[1:]
    assert [line.split(":")[0].strip() for line in lines] == [
        "extra",
        "recipe.overflow",
        "recipe.image_tokens",
        "cache.chunksize",
        "cache.workers",
        "cache.max_bad_fraction",
    ]
    assert "expected one of truncate, drop, split, got 'cut'" in lines[1]
    assert "did you mean chunk_size?" in lines[3]
    with pytest.raises(ConfigError, match=r"recipe.tokenizer: required"):
        PreprocessConfig.from_dict({"sources": ["a"], "recipe": {}})
    with pytest.raises(ConfigError, match="recipe.max_length is 5, not a section"):
        PreprocessConfig.from_dict(
            {"sources": ["a"], "recipe": {"tokenizer": "t", "max_length": 5}},
            ["recipe.max_length.x=1"],
        )
    with pytest.raises(ConfigError, match="expected dotted.key=value"):
        load_config({"sources": ["a"], "recipe": {"tokenizer": "t"}}, ["max_length"])
    with pytest.raises(ConfigError, match="not both"):
        preprocess({"sources": ["a"]}, recipe={"tokenizer": "t"}, out="x")


def test_paths_resolved_and_media_rules_from_mappings(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    write_tokenizer(tmp_path / "tok")
    (tmp_path / "imgs").mkdir()
    cfg = PreprocessConfig.from_dict(
        {
            "sources": ["data/*.jsonl"],
            "recipe": {
                "tokenizer": "tok",
                "template": "chatml",
                "media_root": {"data/*.jsonl": "imgs"},
                "media_allowed_roots": ["imgs"],
                "video_tokens": {"num_frames": 4},
            },
        }
    ).resolved()
    assert cfg.sources == [os.path.join(tmp_path, "data/*.jsonl")]
    assert cfg.recipe.tokenizer == str(tmp_path / "tok")
    assert cfg.recipe.media_root == {str(tmp_path / "data/*.jsonl"): str(tmp_path / "imgs")}
    assert cfg.recipe.template == "chatml"  # a built-in name stays a name
    recipe = cfg.recipe.build()
    assert type(recipe.media.video_tokens).__name__ == "VideoFrames"
    assert recipe.media.video_tokens.num_frames == 4
    short = {"tokenizer": "tok", "template": "chatml", "video_tokens": "frames=4"}
    built = PreprocessConfig.from_dict({"sources": ["a"], "recipe": short}).recipe.build()
    assert built.media.video_tokens.num_frames == 4
    bad = PreprocessConfig.from_dict(
        {
            "sources": ["a"],
            "recipe": {"tokenizer": "tok", "template": "chatml", "video_tokens": {"frame": 4}},
        }
    )
    with pytest.raises(
        ConfigError, match=r"recipe.video_tokens: .*'frame'.* \(fields of VideoFrames\)"
    ):
        bad.recipe.build()
    with pytest.raises(ConfigError, match="recipe.tokenizer: .*nope"):
        PreprocessConfig.from_dict(
            {"sources": ["a"], "recipe": {"tokenizer": "nope"}}
        ).recipe.build()


def test_a_source_beside_the_config_but_not_here_says_where_it_is(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tmp_path / "job"
    folder.mkdir()
    (folder / "train.jsonl").write_text('{"text": "x"}\n')
    config = folder / "c.yaml"
    config.write_text("sources: [train.jsonl, '*.jsonl']\nrecipe: {tokenizer: tok}\n")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(
        ConfigError,
        match=r"sources\[0\]: 'train.jsonl' is not in the working directory .* beside the "
        r"config, in .*/job; run chute from there, or write the path as '.*/job/train.jsonl'",
    ):
        load_config(config)
    monkeypatch.chdir(folder)  # run from there: read as written
    assert load_config(config).sources == ["train.jsonl", "*.jsonl"]
