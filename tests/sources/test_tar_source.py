"""TarSource: WebDataset shards read in place, every loader guarantee kept.

Shards are written here with Python's ``tarfile``: id samples (the tokens are the sample id, so
exact-once is set equality) and real LLaVA / mllm_demo records with their images from
``/work/shared/data``, whose pixels must equal those decoded from the loose files.
"""

from __future__ import annotations

import os
import tarfile
from pathlib import Path

import numpy as np
import orjson
import pytest

from chute import DynamicResolution, Loader, Recipe, SourceChanged, TarSource, World, open_source
from chute.errors import SampleError
from chute.media import ImageTransform, MediaStage
from chute.media.images import DecodeOptions, decode_image
from chute.media.sizes import image_size
from chute.sources.tar_members import MemberRef
from chute.testing import check_resume
from tar_helpers import id_samples, id_shards, write_shard

pytestmark = [pytest.mark.filterwarnings("ignore:This DataLoader will create:UserWarning")]

LF = "llama-factory"
QWEN = "tokenizers/qwen3"
N = 37


def seen_ids(source: object, world_size: int, num_workers: int) -> list[int]:
    ids: list[int] = []
    for rank in range(world_size):
        loader = Loader(
            source, batch_size=3, world=World(rank, world_size), seed=5, num_workers=num_workers
        )
        batches = 0
        for batch in loader:
            got = batch["sample_ids"].numpy()
            real = got >= 0
            assert np.array_equal(batch["input_ids"][:, 0].numpy()[real], got[real])
            ids.extend(got[real].tolist())
            batches += 1
        assert batches == len(loader)
    return ids


def test_index_is_built_once_and_reused(tmp_path: Path) -> None:
    shard = write_shard(tmp_path / "s.tar", id_samples(range(5)))
    first = TarSource(shard, cache_dir=tmp_path / "c")
    assert first.files[0].built and first.files[0].sidecar is not None
    stamp = first.files[0].sidecar.stat().st_mtime_ns
    again = TarSource(str(shard), cache_dir=tmp_path / "c")
    assert not again.files[0].built and again.files[0].sidecar.stat().st_mtime_ns == stamp
    assert isinstance(again.files[0].members.base, np.memmap)  # mapped, not held per process
    assert [again.files[0].key(i) for i in range(5)] == [f"{i:06d}" for i in range(5)]
    assert [r.data["input_ids"][0] for r in again] == list(range(5))

    unicode = write_shard(
        tmp_path / "u.tar", [("café/bébé", {"txt": b"one"}), ("日本", {"txt": b"two"})]
    )
    src = TarSource(unicode, cache_dir=tmp_path / "c")
    assert [(r.key, r.data["text"]) for r in src] == [("café/bébé", "one"), ("日本", "two")]


@pytest.mark.parametrize("num_workers", [0, 2])
def test_exact_once_over_ranks_and_workers(tmp_path: Path, num_workers: int) -> None:
    id_shards(tmp_path, N, per_shard=8)
    source = open_source(str(tmp_path / "train-{000000..000004}.tar"))  # WebDataset's brace range
    assert isinstance(source, TarSource) and len(source.files) == 5 and len(source) == N
    assert source.paths == sorted(str(p) for p in tmp_path.glob("train-*.tar"))
    assert sorted(seen_ids(source, world_size=2, num_workers=num_workers)) == list(range(N))


def test_resume_continues_the_stream(tmp_path: Path) -> None:
    id_shards(tmp_path, 23, per_shard=6)
    paths = sorted(str(p) for p in tmp_path.glob("*.tar"))

    def make(num_workers: int = 0) -> Loader:
        return Loader(paths, batch_size=4, seed=1, num_workers=num_workers)

    assert check_resume(make, epochs=2, every=2, twice=False) > 5


def test_caption_pairs_and_llava_json_bind_their_members(tmp_path: Path) -> None:
    png = b"\x89PNG fake"
    shard = write_shard(
        tmp_path / "s.tar",
        [
            ("cap", {"txt": b"a red square", "png": png}),
            (
                "llava",
                {"json": orjson.dumps({"image": "coco/1.jpg", "conversations": []}), "jpg": b"jpg"},
            ),
            (
                "two",
                {
                    "json": orjson.dumps({"images": ["0.jpg", "1.jpg"], "messages": []}),
                    "0.jpg": b"a",
                    "1.jpg": b"b",
                    "cls": b" 7\n",
                },
            ),
            (
                "qwen",
                {
                    "json": orjson.dumps(
                        {
                            "conversations": [
                                {"from": "user", "value": "Picture 1: <img>qwen.png</img>\nWhat?"}
                            ]
                        }
                    ),
                    "png": b"c",
                },
            ),
        ],
    )
    answer = {
        "conversations": [
            {"from": "human", "value": "<image>Format?"},
            {"from": "gpt", "value": "png"},
        ]
    }
    write_shard(tmp_path / "t.tar", [("fmt", {"json": orjson.dumps(answer), "png": b"d"})])
    text = TarSource(tmp_path / "t.tar", cache_dir=tmp_path / "c")[0].data
    assert text["conversations"][1]["value"] == "png" and text["images"][0].startswith("tar:")
    src = TarSource(shard, cache_dir=tmp_path / "c")
    cap, llava, two, qwen = (r.data for r in src)
    assert cap["text"] == "a red square" and len(cap["images"]) == 1
    ref = MemberRef.parse(cap["images"][0])
    assert ref.shard == str(shard) and ref.name == "cap.png" and ref.size == len(png)
    assert MemberRef.parse(llava["image"]).name == "llava.jpg"  # the member replaced the path
    assert [MemberRef.parse(x).name for x in two["images"]] == ["two.0.jpg", "two.1.jpg"]
    assert two["cls"] == 7
    assert "<img>tar:" in qwen["conversations"][0]["value"]
    assert src[1].location == "s.tar:llava" and src[1].line == 2


def test_broken_samples_are_counted_with_shard_and_key(tmp_path: Path) -> None:
    shard = write_shard(
        tmp_path / "bad.tar",
        [
            ("000000", {"json": b'{"input_ids": [0]'}),
            ("000001", {"png": b"x"}),
            *id_samples([2]),
            *id_samples([3]),
            *id_samples([3]),
        ],
    )
    src = TarSource(shard, cache_dir=tmp_path / "c")
    with pytest.raises(SampleError, match=r"bad.tar:1: bad_json: bad.tar:000000.json: "):
        src[0].data
    with pytest.raises(SampleError, match=r"empty_record: bad.tar:000001: .*no .json or .txt"):
        src[1].data
    with pytest.raises(SampleError, match=r"duplicate_member: bad.tar:000003: two members"):
        src[3].data
    loader = Loader(src, batch_size=1, seed=0)
    assert sorted(int(i) for b in loader for i in b["sample_ids"] if i >= 0) == [2]
    assert loader.tally.counts == {"bad_json": 1, "empty_record": 1, "duplicate_member": 1}


@pytest.mark.shared_data
def test_truncated_image_member_is_a_counted_skip(shared_data: Path, tmp_path: Path) -> None:
    jpg = (shared_data / LF / "mllm_demo_data/1.jpg").read_bytes()
    record = {
        "messages": [
            {"role": "user", "content": "<image>Who?"},
            {"role": "assistant", "content": "A player."},
        ]
    }
    shard = write_shard(
        tmp_path / "imgs.tar",
        [
            ("good", {"json": orjson.dumps(record), "jpg": jpg}),
            ("cut", {"json": orjson.dumps(record), "jpg": jpg[:4000]}),
        ],
    )
    tok = str(shared_data / QWEN)
    recipe = Recipe(tokenizer=tok, template="qwen3", image_tokens=16, image_token="<|image_pad|>")
    stage = MediaStage(ImageTransform(size=32, crop=32, tokens_per_image=16))
    loader = Loader(str(shard), recipe, batch_size=1, media=stage, seed=0)
    seen = [int(i) for b in loader for i in b["sample_ids"] if i >= 0]
    assert seen == [0]
    assert loader.tally.counts == {"image_corrupt": 1}
    assert "imgs.tar:cut.jpg: decoding failed" in loader.tally.examples["image_corrupt"][0]


def test_replaced_shard_raises_source_changed(tmp_path: Path) -> None:
    shard = write_shard(tmp_path / "s.tar", [("a", {"txt": b"one", "png": b"p" * 100})])
    src = TarSource(shard, cache_dir=tmp_path / "c")
    ref = src[0].data["images"][0]
    write_shard(shard, [("b", {"txt": b"a longer caption", "png": b"q" * 90})])
    os.utime(shard, ns=(1, 1))
    with pytest.raises(SourceChanged, match="changed after it was indexed"):
        src[0]
    with pytest.raises(SourceChanged, match="other bytes at offset"):
        decode_image(ref)
    reopened = TarSource(shard, cache_dir=tmp_path / "c")
    assert reopened.files[0].built and reopened[0].data["text"] == "a longer caption"


def test_member_limits_and_policy(tmp_path: Path, shared_data: Path) -> None:
    png = (shared_data / "images/skimage/horse.png").read_bytes()
    shard = write_shard(tmp_path / "s.tar", [("h", {"txt": b"horse", "png": png})])
    src = TarSource(shard, cache_dir=tmp_path / "c")
    ref = src[0].data["images"][0]
    assert image_size(ref) == (400, 328)
    with pytest.raises(SampleError, match=r"image_too_large: s.tar:h.png: 16,633 bytes"):
        decode_image(ref, DecodeOptions(max_bytes=1000))
    # a reference into another shard, from a record elsewhere, is refused
    tok = str(shared_data / QWEN)
    recipe = Recipe(tokenizer=tok, template="qwen3", image_tokens="qwen2-vl")
    other = tmp_path / "elsewhere"
    other.mkdir()
    (other / "d.jsonl").write_text(orjson.dumps({"text": "x", "images": [ref]}).decode() + "\n")
    with pytest.raises(SampleError, match="unsafe_path: s.tar:h.png: a member of"):
        recipe(open_source(str(other / "d.jsonl"), cache_dir=tmp_path / "c")[0])


@pytest.mark.shared_data
def test_llava_and_mllm_demo_pixels_equal_the_loose_files(
    shared_data: Path, tmp_path: Path
) -> None:
    """Real records with their images: the same tokens and pixels from shards as from files."""
    rows = orjson.loads((shared_data / LF / "mllm_demo.json").read_bytes())
    samples = []
    for i, row in enumerate(rows):
        members = {"json": orjson.dumps(row)}
        for k, name in enumerate(row["images"]):
            members[f"{k}.jpg"] = (shared_data / LF / name).read_bytes()
        samples.append((f"mllm{i:03d}", members))
    bench = shared_data / "llava/llava_bench_in_the_wild"
    questions = [orjson.loads(x) for x in (bench / "questions.jsonl").read_bytes().splitlines()]
    llava = []
    for k, q in enumerate(questions[:6]):
        rec = {
            "image": q["image"],
            "conversations": [
                {"from": "human", "value": "<image>\n" + q["text"]},
                {"from": "gpt", "value": "ok"},
            ],
        }
        llava.append(rec)
        ext = "png" if q["image"] == "014.jpg" else "jpg"  # a PNG named .jpg: bytes decide
        samples.append(
            (
                f"llava{k:03d}",
                {"json": orjson.dumps(rec), ext: (bench / "images" / q["image"]).read_bytes()},
            )
        )
    shard = write_shard(tmp_path / "shards/train-000000.tar", samples)
    (tmp_path / "llava.jsonl").write_bytes(b"\n".join(orjson.dumps(r) for r in llava) + b"\n")
    tar = open_source(str(shard))
    loose = list(open_source(str(shared_data / LF / "mllm_demo.json"))) + list(
        open_source(str(tmp_path / "llava.jsonl"))
    )
    tok = str(shared_data / QWEN)
    stage = MediaStage(DynamicResolution(max_pixels=200_000))
    rule = stage.image.rule()
    recipe = Recipe(tokenizer=tok, template="qwen3", image_tokens=rule)
    roots = {str(tmp_path / "llava.jsonl"): str(bench / "images")}
    by_file = Recipe(tokenizer=tok, template="qwen3", image_tokens=rule, media_root=roots)
    bound = stage.bind(recipe)
    for record, plain in zip(tar, loose, strict=True):
        a, b = recipe(record), by_file(plain)
        assert [r["size"] for r in a["images"]] == [r["size"] for r in b["images"]], record.key
        assert np.array_equal(a["input_ids"], b["input_ids"]), record.key
        assert all(ref["path"].startswith("tar:") for ref in a["images"])
        pa, pb = bound(a)["pixel_values"], bound(b)["pixel_values"]
        assert len(pa) == len(pb) and all(np.array_equal(x, y) for x, y in zip(pa, pb, strict=True))


@pytest.mark.shared_data
def test_audio_members_load_like_the_file(shared_data: Path, tmp_path: Path) -> None:
    pytest.importorskip("soundfile", reason="audio clips need chute[audio] (soundfile)")
    from chute.media.audio import AudioClips

    wav = shared_data / LF / "mllm_demo_data/2.wav"
    record = {
        "messages": [
            {"role": "user", "content": "<audio>What is said?"},
            {"role": "assistant", "content": "Words."},
        ]
    }
    shard = write_shard(
        tmp_path / "a.tar", [("clip", {"json": orjson.dumps(record), "wav": wav.read_bytes()})]
    )
    clips = AudioClips(sample_rate=16000, max_seconds=30, tokens_per_second=25)
    recipe = Recipe(
        tokenizer=str(shared_data / QWEN),
        template="qwen3",
        audio_tokens=clips,
        audio_token="<|video_pad|>",
    )
    sample = recipe(TarSource(shard, cache_dir=tmp_path / "c")[0])
    assert sample["audios"][0]["path"].startswith("tar:")
    assert sample["audios"][0]["num_tokens"] == clips.count_tokens(str(wav))[0]
    values = MediaStage(audio=clips).bind(recipe)(sample)["audio_values"][0]
    assert np.array_equal(np.asarray(values), np.asarray(clips(str(wav)).pixels))


@pytest.mark.shared_data
def test_truncated_shard_keeps_its_whole_samples(shared_data: Path, tmp_path: Path) -> None:
    jpg = (shared_data / LF / "mllm_demo_data/1.jpg").read_bytes()
    shard = write_shard(
        tmp_path / "cut.tar",
        [(f"k{i}", {"txt": f"caption {i}".encode(), "jpg": jpg}) for i in range(3)],
    )
    with tarfile.open(shard) as tar:
        start = tar.getmember("k2.jpg").offset_data
    shard.write_bytes(shard.read_bytes()[: start + len(jpg) // 2])  # cut inside the last image
    src = TarSource(shard, cache_dir=tmp_path / "c")
    assert len(src) == 3 and src[2].data["text"] == "caption 2"
    assert decode_image(src[1].data["images"][0]).size == (300, 168)
    with pytest.raises(
        SampleError, match=r"image_corrupt: cut.tar:k2.jpg: the member is cut short"
    ):
        decode_image(src[2].data["images"][0])
    cut_text = write_shard(tmp_path / "t.tar", [("a", {"jpg": jpg, "txt": b"x" * 3000})])
    with tarfile.open(cut_text) as tar:
        start = tar.getmember("a.txt").offset_data
    cut_text.write_bytes(cut_text.read_bytes()[: start + 100])
    with pytest.raises(SampleError, match=r"member_truncated: t.tar:a.txt: cut short"):
        TarSource(cut_text, cache_dir=tmp_path / "c")[0].data
