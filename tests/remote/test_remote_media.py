"""Images under a remote media root (S3): fetched with the rules of local media, cached, bounded.

The recipe counts tokens from each fetched image's header, the Loader's workers decode the
cached copies; references escaping the root, missing objects and oversized files are counted
skips; the local media cache stays under its byte bound; arbitrary URLs still need allow_urls.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from chute import Loader, Recipe, World
from chute.errors import SampleError
from chute.media import DynamicResolution, ImageTransform, MediaStage
from chute.media.paths import MediaPaths
from chute.media.remote import RemoteMedia
from recipe_helpers import tiny_tokenizer
from remote_helpers import Bucket

pytestmark = [pytest.mark.filterwarnings("ignore:This DataLoader will create:UserWarning")]

TOK = tiny_tokenizer()
PAD = TOK.token_to_id("<|image_pad|>")
LF = "llama-factory"


def msgs() -> list[dict]:
    return [
        {"role": "user", "content": "<image>What?"},
        {"role": "assistant", "content": "Football players."},
    ]


@pytest.fixture
def images(s3: Bucket, shared_data: Path) -> Bucket:
    for i in (1, 2, 3):
        s3.upload(shared_data / LF / f"mllm_demo_data/{i}.jpg", f"images/{i}.jpg")
    s3.put("secret.jpg", (shared_data / LF / "mllm_demo_data/1.jpg").read_bytes())
    return s3


@pytest.mark.shared_data
def test_loader_decodes_images_from_a_remote_media_root(images: Bucket, tmp_path: Path) -> None:
    rows = [
        {"images": ["1.jpg"], "messages": msgs()},
        {"images": ["sub/../2.jpg"], "messages": msgs()},
        {"images": ["../secret.jpg"], "messages": msgs()},  # escapes the root: unsafe_path
        {"images": ["nope.jpg"], "messages": msgs()},  # image_missing
        {"images": [images.url("images/3.jpg")], "messages": msgs()},  # a URL inside the root
    ]
    data = tmp_path / "d.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    recipe = Recipe(
        tokenizer=TOK, template="chatml", image_tokens="qwen2-vl", media_root=images.url("images")
    )
    for workers in (0, 2):
        loader = Loader(
            data,
            recipe,
            batch_size=5,
            shuffle=False,
            media=DynamicResolution(),
            num_workers=workers,
            world=World(0, 1),
        )
        batch = next(iter(loader))
        assert batch["sample_ids"].tolist() == [0, 1, 4]
        assert batch["image_grid_thw"].tolist() == [[1, 12, 22], [1, 14, 22], [1, 12, 22]]
        assert int((batch["input_ids"] == PAD).sum()) == 66 + 77 + 66
        assert loader.stats == {"unsafe_path": 1, "image_missing": 1}


@pytest.mark.shared_data
def test_size_limit_before_download_and_a_bounded_cache(
    images: Bucket, tmp_path: Path, cache_dir: Path
) -> None:
    paths = MediaPaths(images.url("images"))
    small = RemoteMedia(paths, max_bytes=15_000)
    with pytest.raises(
        SampleError, match=r"image_too_large: .*2.jpg: 22,681 bytes.*not downloaded"
    ):
        small.local(images.url("images/2.jpg"), None)
    assert not (cache_dir / "media").exists() or not any((cache_dir / "media").iterdir())
    local = small.local(images.url("images/1.jpg"), None)
    assert Path(local).read_bytes() == images.get("images/1.jpg")
    bounded = RemoteMedia(paths, cache_bytes=40_000)
    # reports (chute bench --json) print it: what it is, not its address
    assert repr(bounded) == "RemoteMedia(max_bytes=268435456, cache_bytes=40000)"
    for i in (1, 2, 3):
        bounded.local(images.url(f"images/{i}.jpg"), None)
    bounded.sweep()
    kept = sum(p.stat().st_size for p in (cache_dir / "media").iterdir())
    assert 0 < kept <= 40_000
    with pytest.raises(SampleError, match="url_not_allowed"):
        bounded.local(images.url("secret.jpg"), None)


def test_arbitrary_urls_still_need_allow_urls(s3: Bucket, tmp_path: Path) -> None:
    recipe = Recipe(tokenizer=TOK, template="chatml", image_tokens=16)
    with pytest.raises(SampleError, match="url_not_allowed: s3://.* is a URL"):
        recipe.process({"images": [s3.url("x.jpg")], "messages": msgs()})
    allowed = Recipe(tokenizer=TOK, template="chatml", image_tokens=16, allow_urls=True)
    sample = allowed.process({"images": [s3.url("x.jpg")], "messages": msgs()})
    stage = MediaStage(ImageTransform(size=32, crop=32, tokens_per_image=16)).bind(allowed)
    with pytest.raises(SampleError, match="url_not_allowed: .* outside the remote media root"):
        stage(sample)  # kept, but chute fetches only under a media root
