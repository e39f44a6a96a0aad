"""Media references stay inside their media root; URLs are refused unless allowed."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from PIL import Image

from chute import JsonlSource, Recipe
from chute.errors import ConfigError, SampleError
from chute.media import MediaPaths
from recipe_helpers import tiny_tokenizer

TOK = tiny_tokenizer()


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """root/imgs/a.png, root/data.jsonl; outside/secret.png; root/imgs/link.png -> secret."""
    root = tmp_path / "root"
    (root / "imgs").mkdir(parents=True)
    Image.new("RGB", (8, 8)).save(root / "imgs" / "a.png")
    (tmp_path / "outside").mkdir()
    Image.new("RGB", (8, 8)).save(tmp_path / "outside" / "secret.png")
    os.symlink(tmp_path / "outside" / "secret.png", root / "imgs" / "link.png")
    os.symlink(root / "imgs" / "a.png", root / "imgs" / "inner_link.png")
    return root


def test_relative_paths_resolve_under_the_data_files_folder(tree: Path) -> None:
    paths = MediaPaths()
    data = str(tree / "data.jsonl")
    assert paths.resolve("imgs/a.png", data) == str((tree / "imgs/a.png").resolve())
    assert paths.resolve("imgs/../imgs/a.png", data) == str((tree / "imgs/a.png").resolve())
    assert paths.resolve(str(tree / "imgs/a.png"), data) == str((tree / "imgs/a.png").resolve())
    # A symlink that stays inside the root is fine (resolved to its target).
    assert paths.resolve("imgs/inner_link.png", data) == str((tree / "imgs/a.png").resolve())


@pytest.mark.parametrize(
    ("source", "why"),
    [
        ("../outside/secret.png", "it resolves there"),
        ("imgs/../../outside/secret.png", "it resolves there"),
        ("imgs/link.png", "a symlink leads there"),
        ("/etc/passwd", "it resolves there"),
    ],
)
def test_escaping_references_are_unsafe(tree: Path, source: str, why: str) -> None:
    with pytest.raises(SampleError, match=f"unsafe_path: .* outside the media root .*{why}"):
        MediaPaths().resolve(source, str(tree / "data.jsonl"))


def test_absolute_outside_path_is_fine_once_the_root_covers_it(tree: Path) -> None:
    secret = tree.parent / "outside" / "secret.png"
    with pytest.raises(SampleError, match="unsafe_path"):
        MediaPaths(tree).resolve(str(secret), None)
    assert MediaPaths(tree.parent).resolve(str(secret), None) == str(secret.resolve())


def test_allowed_roots_admit_a_symlinked_image_folder(tree: Path) -> None:
    outside = tree.parent / "outside"
    paths = MediaPaths(allowed_roots=[outside])
    got = paths.resolve("imgs/link.png", str(tree / "data.jsonl"))
    assert got == str((outside / "secret.png").resolve())
    with pytest.raises(SampleError, match="unsafe_path"):
        paths.resolve("/etc/passwd", str(tree / "data.jsonl"))
    recipe = Recipe(tokenizer=TOK, template="chatml", image_tokens=4, media_allowed_roots=outside)
    assert recipe.fingerprint()["media"]["allowed_roots"] == [str(outside.resolve())]


def test_urls_refused_unless_allowed_and_data_urls_pass() -> None:
    with pytest.raises(SampleError, match="url_not_allowed: https://x/y.jpg is a URL"):
        MediaPaths().resolve("https://x/y.jpg", None)
    with pytest.raises(SampleError, match="url_not_allowed"):
        MediaPaths().resolve("s3://bucket/y.jpg", None)
    assert MediaPaths(allow_urls=True).resolve("https://x/y.jpg", None) == "https://x/y.jpg"
    assert MediaPaths().resolve("data:image/png;base64,AAAA", None).startswith("data:")


def test_the_url_message_names_what_the_front_end_has() -> None:
    """``allow_urls`` is a Python option: the command line has no flag to name for it."""
    from chute._spelling import spelling
    from chute.cli._options import FLAGS

    with pytest.raises(SampleError, match=r"set media_root to .*or pass allow_urls=True with"):
        MediaPaths().resolve("https://x/y.jpg", None)
    with spelling(FLAGS), pytest.raises(SampleError) as info:
        MediaPaths().resolve("https://x/y.jpg", None)
    assert "(--media-root s3://bucket/images," in info.value.message
    assert "set --media-root to the URL's folder" in info.value.message
    assert "allow_urls" not in info.value.message


def test_media_root_per_source(tree: Path, tmp_path: Path) -> None:
    other = tmp_path / "other"
    other.mkdir()
    paths = MediaPaths({str(other / "v1.jsonl"): tree, "*/glob_*.jsonl": tree / "imgs"})
    assert paths.root_for(str(other / "v1.jsonl")) == str(tree)
    assert paths.root_for(str(other / "glob_x.jsonl")) == str(tree / "imgs")
    assert paths.root_for(str(other / "else.jsonl")) == str(other)  # unnamed: its own folder
    assert paths.resolve("imgs/a.png", str(other / "v1.jsonl")) == str(tree / "imgs/a.png")
    with pytest.raises(ConfigError, match=r"media_root\['x.jsonl'\]: .* is not a folder"):
        MediaPaths({"x.jsonl": tmp_path / "nope"})
    with pytest.raises(ConfigError, match="media_root: .* is not a folder"):
        MediaPaths(tmp_path / "nope")


def test_recipe_rejects_unsafe_records_with_their_location(tree: Path) -> None:
    rows = [
        {"images": ["imgs/a.png"], "messages": _msgs()},
        {"images": ["../outside/secret.png"], "messages": _msgs()},
        {"images": ["imgs/link.png"], "messages": _msgs()},
        {"images": [str(tree.parent / "outside" / "secret.png")], "messages": _msgs()},
        {"images": ["http://evil/x.png"], "messages": _msgs()},
    ]
    data = tree / "data.jsonl"
    import json

    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    recipe = Recipe(tokenizer=TOK, template="chatml", image_tokens=4)
    source = JsonlSource(data)
    assert recipe(source[0])["images"][0]["path"] == str((tree / "imgs/a.png").resolve())
    kinds = []
    for i in range(1, 5):
        with pytest.raises(SampleError) as info:
            recipe(source[i])
        assert info.value.location == f"{data}:{i + 1}"
        kinds.append(info.value.kind)
    assert kinds == ["unsafe_path", "unsafe_path", "unsafe_path", "url_not_allowed"]
    assert recipe.fingerprint()["media"]["allow_urls"] is False


def _msgs() -> list[dict]:
    return [
        {"role": "user", "content": "<image>What?"},
        {"role": "assistant", "content": "A cat."},
    ]
