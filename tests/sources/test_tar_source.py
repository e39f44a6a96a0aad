"""TarSource: WebDataset shards read in place, every loader guarantee kept.

Shards are written here with Python's ``tarfile``: id samples (the tokens are the sample id, so
exact-once is set equality) and real LLaVA / mllm_demo records with their images from
``/work/shared/data``, whose pixels must equal those decoded from the loose files.
"""

from __future__ import annotations

import io
import os
import tarfile
from pathlib import Path

import numpy as np
import orjson
import pytest

from cache_helpers import write_tokenizer
from chute import DynamicResolution, Loader, Recipe, SourceChanged, TarSource, World, open_source
from chute.errors import SampleError, SourceError
from chute.media import ImageTransform, MediaStage
from chute.media.images import DecodeOptions, decode_image
from chute.media.sizes import image_size
from chute.sources.tar_members import MemberRef, read_member
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


@pytest.mark.parametrize("images", [["photo.jpg"], ["photo.jpg", "other.jpg"], None])
def test_a_member_named_in_an_answer_stays_text(tmp_path: Path, images: list[str] | None) -> None:
    """The answer reads the file's name: it is text, whatever binds the members (the JSON's
    text for one named image, the record's walk for two, the media field when none is named)."""
    record: dict[str, object] = {
        "messages": [
            {"role": "user", "content": "<image>What is this file called?"},
            {"role": "assistant", "content": "photo.jpg"},
        ],
        "history": [["Which one?", "other.jpg"]],
    }
    if images is not None:
        record["images"] = images
    members = {"json": orjson.dumps(record), "jpg": b"a", "other.jpg": b"b"}
    # the sample's key is "photo": its members are photo.jpg and photo.other.jpg
    write_shard(tmp_path / "s.tar", [("photo", members)])
    data = TarSource(tmp_path / "s.tar", cache_dir=tmp_path / "c")[0].data
    assert data["messages"][1]["content"] == "photo.jpg"
    assert data["history"] == [["Which one?", "other.jpg"]]
    names = [MemberRef.parse(ref).name for ref in data["images"]]
    want = {1: ["photo.jpg"], 2: ["photo.jpg", "photo.other.jpg"]}
    assert names == want.get(len(images or []), ["photo.jpg", "photo.other.jpg"])


def test_names_that_are_not_ascii_or_not_utf8_read_in_place(tmp_path: Path) -> None:
    """PAX (Python's default) writes a name that is not ASCII as ``?`` in the member's own
    header; a tar from a latin-1 system holds names that are not UTF-8 at all."""
    pax = write_shard(tmp_path / "pax.tar", [("échantillon_1", {"txt": b"a caption", "png": b"p"})])
    latin = tmp_path / "latin.tar"
    with tarfile.open(latin, "w", format=tarfile.GNU_FORMAT, encoding="latin-1") as tar:
        for name, body in [("caf\xe9.json", b"{bad"), ("caf\xe9.png", b"q"), ("ok.txt", b"x")]:
            info = tarfile.TarInfo(name)
            info.size = len(body)
            tar.addfile(info, io.BytesIO(body))
    record = TarSource(pax, cache_dir=tmp_path / "c")[0]
    assert read_member(MemberRef.parse(record.data["images"][0])) == b"p"
    src = TarSource(latin, cache_dir=tmp_path / "c")
    assert src[0].location == "latin.tar:caf\\xe9"  # its bytes shown, printable
    (_, _, text), *_ = src[0].media  # the reference the record carries, as a string
    ref = MemberRef.parse(text)
    assert ref.name == "caf\udce9.png" and read_member(ref) == b"q"
    with pytest.raises(SampleError, match=r"bad_json: latin.tar:caf\\xe9.json"):
        src[0].data
    rejects = tmp_path / "rejects.jsonl"
    recipe = Recipe(tokenizer=write_tokenizer(tmp_path / "tok"), format="text")
    loader = Loader(src, recipe, batch_size=1, seed=0, max_bad_fraction=None, rejects=rejects)
    assert [i for b in loader for i in b["sample_ids"].tolist() if i >= 0] == [1]
    assert loader.tally.counts == {"bad_json": 1}
    (line,) = rejects.read_bytes().splitlines()  # JSON cannot hold the name's bytes as they are
    assert orjson.loads(line)["message"].startswith("latin.tar:caf\\xe9.json: ")


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


def test_samples_without_a_record_are_counted_into_a_rejects_file(tmp_path: Path) -> None:
    """An image-only sample and an empty .json member are counted skips with ``rejects=``
    too (writing their rejects line rebuilt the record and raised again, ending the run)."""
    shard = write_shard(
        tmp_path / "bad.tar",
        [*id_samples([0]), ("000001", {"png": b"x"}), ("000002", {"json": b""}), *id_samples([3])],
    )
    rejects = tmp_path / "rejects.jsonl"
    loader = Loader(TarSource(shard, cache_dir=tmp_path / "c"), batch_size=1, rejects=rejects)
    assert sorted(int(i) for b in loader for i in b["sample_ids"] if i >= 0) == [0, 3]
    assert loader.tally.counts == {"empty_record": 2}
    lines = [orjson.loads(line) for line in rejects.read_bytes().splitlines()]
    assert sorted(e["reason"] for e in lines) == ["empty_record", "empty_record"]
    assert all(e["raw"] == "" for e in lines)


@pytest.mark.shared_data
def test_a_member_the_record_names_but_the_shard_lacks_is_named(
    shared_data: Path, tmp_path: Path
) -> None:
    record = {
        "messages": [
            {"role": "user", "content": "<image>Who?"},
            {"role": "assistant", "content": "A player."},
        ],
        "images": ["000001.jpg"],
    }
    shard = write_shard(tmp_path / "s.tar", [("000001", {"json": orjson.dumps(record)})])
    recipe = Recipe(tokenizer=str(shared_data / QWEN), template="qwen3", image_tokens="qwen2-vl")
    with pytest.raises(SampleError, match=r"image_missing: s.tar holds no member 000001.jpg"):
        recipe(TarSource(shard, cache_dir=tmp_path / "c")[0])


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


def _broken_copies(shard: Path, folder: Path) -> dict[str, Path]:
    """Copies of ``shard`` broken as shards break: cut at several places, one header damaged."""
    data = shard.read_bytes()
    with tarfile.open(shard) as tar:
        third, last = tar.getmembers()[2], tar.getmembers()[-1]
    end = last.offset_data + -(-last.size // 512) * 512  # the end-of-archive marker starts here
    damaged = bytearray(data)
    damaged[third.offset + 148 : third.offset + 156] = b"0000000\0"  # its checksum: bit rot
    cuts = {
        "inside-the-last-member": data[: last.offset_data + last.size // 2],
        "at-a-block-boundary": data[: third.offset],
        "without-the-end-marker": data[:end],
        "inside-a-header": data[: third.offset + 200],
        "a-damaged-header": bytes(damaged),
    }
    folder.mkdir()
    out = {}
    for name, body in cuts.items():
        out[name] = folder / f"{name}.tar"
        out[name].write_bytes(body)
    return out


def test_a_broken_shard_is_refused_naming_where_it_breaks(tmp_path: Path) -> None:
    """tarfile ends its walk quietly at a header it cannot read: the rest of the shard would
    be gone without a count. Each way a shard breaks is an error at open, naming the place."""
    shard = write_shard(tmp_path / "s.tar", id_samples(range(6)))
    assert len(TarSource(shard, cache_dir=tmp_path / "c")) == 6
    want = {
        "inside-the-last-member": r"ends at byte [\d,]+, inside member '000005.json' \(\d+ of its",
        "at-a-block-boundary": r"ends at byte [\d,]+ \(after member '000001.json'\) without "
        r"tar's end-of-archive marker: it is truncated",
        "without-the-end-marker": r"\(after member '000005.json'\) without tar's end-of-archive",
        "inside-a-header": r"\(after member '000001.json'\) inside a header: it is truncated",
        "a-damaged-header": r"a damaged tar header at byte [\d,]+ \(after member '000001.json'\)",
    }
    for name, path in _broken_copies(shard, tmp_path / "broken").items():
        with pytest.raises(SourceError, match=f"{name}.tar: .*{want[name]}.*leave it out"):
            TarSource(path, cache_dir=tmp_path / "c")
    # a shard written by GNU tar's rules (two zero blocks, the record padded) reads whole
    padded = tmp_path / "padded.tar"
    padded.write_bytes(shard.read_bytes() + bytes(10240))
    assert len(TarSource(padded, cache_dir=tmp_path / "c")) == 6


def test_a_member_cut_short_after_indexing_is_a_counted_skip(tmp_path: Path) -> None:
    """A reference kept (a token cache's row) to a shard cut after it was indexed: the member's
    header still reads, its data does not; a counted skip of that sample, not a crash."""
    shard = write_shard(tmp_path / "t.tar", [("a", {"png": b"p" * 5000, "txt": b"x" * 3000})])
    ref = MemberRef.parse(TarSource(shard, cache_dir=tmp_path / "c")[0].data["images"][0])
    shard.write_bytes(shard.read_bytes()[: ref.offset + 100])
    with pytest.raises(SampleError, match=r"image_corrupt: t.tar:a.png: the member is cut short"):
        read_member(ref)
