"""``chute preprocess --pixels``: images pre-decoded into the cache, read by the Loader."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import numpy as np
import orjson
import pytest
from PIL import Image
from typer.testing import CliRunner

from cache_helpers import write_tokenizer
from chute import CacheError, FingerprintMismatch, Loader, World, open_cache, preprocess
from chute.cache import RecipeConfig, workdir
from chute.cache.pixels import PixelsStage
from chute.cli import app
from chute.errors import ConfigError
from chute.media import DynamicResolution, ImageTransform, MediaStage, PixelStore


def msgs(n: int = 1) -> list[dict]:
    return [
        {"role": "user", "content": "<image>" * n + "What is it?"},
        {"role": "assistant", "content": "A picture."},
    ]


@pytest.fixture
def data(tmp_path: Path) -> Path:
    """Records with real PNG/JPEG files, a truncated JPEG, a missing file and a text record."""
    rng = np.random.default_rng(0)
    img = tmp_path / "img"
    img.mkdir()
    for name, (w, h) in {"a.png": (300, 168), "b.jpg": (640, 480), "c.png": (90, 120)}.items():
        Image.fromarray(rng.integers(0, 255, (h, w, 3), dtype=np.uint8)).save(img / name)
    full = (img / "b.jpg").read_bytes()
    (img / "cut.jpg").write_bytes(full[: len(full) // 2])  # header intact, pixels cut
    rows = [
        {"id": 0, "images": ["img/a.png"], "messages": msgs()},
        {"id": 1, "images": ["img/a.png", "img/b.jpg"], "messages": msgs(2)},
        {"id": 2, "images": ["img/cut.jpg"], "messages": msgs()},
        {"id": 3, "instruction": "no image", "output": "fine"},
        {"id": 4, "images": ["img/gone.png"], "messages": msgs()},
        {"id": 5, "images": ["img/c.png"], "messages": msgs()},
    ]
    path = tmp_path / "d.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def cfg(data: Path, **recipe) -> dict:
    tok = write_tokenizer(data.parent / "tok")
    return {
        "sources": [str(data)],
        "recipe": {"tokenizer": str(tok), "template": "chatml", "image_tokens": 16, **recipe},
        "cache": {"chunk_size": 2, "workers": 1},
    }


def batches(loader: Loader) -> list[dict]:
    return [dict(b) for b in loader]


def test_pixels_give_the_same_batches_as_decoding_and_read_no_image(
    tmp_path: Path, data: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    report = preprocess(cfg(data), out=tmp_path / "c", pixels={"size": 48})
    px = report.to_json()["stage_outputs"]["pixels"]
    # a, b, c stored; cut.jpg has a valid header (the recipe kept it) but does not decode
    assert px == {"images": 3, "bytes": 3 * 48 * 48 * 3, "failures": {"image_corrupt": 1}}
    cache = open_cache(tmp_path / "c")
    assert isinstance(cache.pixels, PixelStore) and len(cache.pixels) == 3
    failures = (tmp_path / "c" / "pixels" / "failures.jsonl").read_text()
    assert "cut.jpg" in failures and "image_corrupt" in failures
    assert cache.summary["by_reason"] == {"image_missing": 1}  # gone.png: rejected at build

    def loader(**kw) -> Loader:
        return Loader(cache, batch_size=2, shuffle=False, world=World(0, 1), **kw)

    decoded = loader(
        media=MediaStage(ImageTransform(size=48, crop=48, tokens_per_image=16), store=False)
    )
    assert not decoded.media.has_store
    want = batches(decoded)
    assert decoded.stats == {"image_corrupt": 1}

    def no_decode(*args, **kwargs):
        raise AssertionError("an image was decoded although the cache holds its pixels")

    auto = loader()  # no media=: the cache's own transform and pixels
    assert auto.media.has_store and auto.media.image == decoded.media.image
    # cut.jpg is not in the store: it is decoded (and skipped) at training time, as before
    real_decode = __import__("chute.media.stage", fromlist=["decode_image"]).decode_image

    def decode_only_cut(path, *args, **kwargs):
        if not str(path).endswith("cut.jpg"):
            no_decode()
        return real_decode(path, *args, **kwargs)

    monkeypatch.setattr("chute.media.stage.decode_image", decode_only_cut)
    got = batches(auto)
    assert auto.stats == {"image_corrupt": 1}
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        assert g.keys() == w.keys()
        for key in g:
            a, b = g[key], w[key]
            assert np.array_equal(np.asarray(a), np.asarray(b)), key
    assert sum(int(b["image_counts"].sum()) for b in got) == 4  # a, a+b, c
    # a given stage without store gets the cache's pixels, with its workers too
    given = loader(media=ImageTransform(size=48, crop=48, tokens_per_image=16), num_workers=2)
    assert given.media.has_store


def test_other_geometry_is_refused_and_store_false_decodes(tmp_path: Path, data: Path) -> None:
    preprocess(cfg(data), out=tmp_path / "c", pixels={"size": 48})
    cache = open_cache(tmp_path / "c")
    other = ImageTransform(size=64, crop=64, tokens_per_image=16)
    with pytest.raises(ConfigError, match=r"pre-decoded for another transform.*size: store 48"):
        Loader(cache, batch_size=2, world=World(0, 1), media=other)
    loader = Loader(
        cache, batch_size=2, world=World(0, 1), shuffle=False, media=MediaStage(other, store=False)
    )
    shapes = {tuple(b["pixel_values"].shape[1:]) for b in loader if "pixel_values" in b}
    assert shapes == {(3, 64, 64)}


def test_pixel_options_are_part_of_the_fingerprint(tmp_path: Path, data: Path) -> None:
    out = tmp_path / "c"
    preprocess(cfg(data), out=out, pixels={"size": 48})
    again = preprocess(cfg(data), out=out, pixels={"size": 48})  # same config: complete already
    assert again.built == 0 and not again.finalized
    with pytest.raises(FingerprintMismatch, match=r"stages\.pixels\.options\.transform\.size"):
        preprocess(cfg(data), out=out, pixels={"size": 32})
    with pytest.raises(FingerprintMismatch, match=r"stages"):
        preprocess(cfg(data), out=out)  # without pixels: another build too


def test_dynamic_resolution_from_the_recipe_rule(tmp_path: Path, data: Path) -> None:
    report = preprocess(cfg(data, image_tokens="qwen2-vl"), out=tmp_path / "c", pixels=True)
    assert report.to_json()["stage_outputs"]["pixels"]["images"] == 3
    cache = open_cache(tmp_path / "c")
    stage = cache.media_stage()
    assert isinstance(stage.image, DynamicResolution) and stage.image.rule().patch_size == 14
    loader = Loader(cache, batch_size=3, shuffle=False, world=World(0, 1))
    grids = [g for b in loader if "image_grid_thw" in b for g in b["image_grid_thw"].tolist()]
    assert grids == [[1, 12, 22], [1, 12, 22], [1, 34, 46], [1, 8, 6]]
    assert loader.stats == {"image_corrupt": 1}


def test_options_are_checked_against_the_recipe(tmp_path: Path, data: Path) -> None:
    with pytest.raises(ConfigError, match=r"stages\.pixels\.colour: unknown option"):
        preprocess(cfg(data), out=tmp_path / "c", pixels={"colour": "red"})
    with pytest.raises(ConfigError, match=r"recipe counts a fixed 16 tokens"):
        preprocess(cfg(data), out=tmp_path / "c", pixels={"transform": "dynamic"})
    with pytest.raises(ConfigError, match=r"tokens_per_image is 9"):
        preprocess(cfg(data), out=tmp_path / "c", pixels={"tokens_per_image": 9})
    with pytest.raises(ConfigError, match=r"patch_size: 16 here but the recipe counts"):
        preprocess(
            cfg(data, image_tokens="qwen2-vl"), out=tmp_path / "c", pixels={"patch_size": 16}
        )
    assert not (tmp_path / "c").exists()  # nothing written before the config is known good


def test_changed_image_is_decoded_again_not_served_stale(tmp_path: Path, data: Path) -> None:
    preprocess(cfg(data), out=tmp_path / "c", pixels={"size": 48})
    cache = open_cache(tmp_path / "c")
    img = data.parent / "img" / "c.png"
    Image.new("RGB", (90, 120), (255, 0, 0)).save(img)  # same size, other pixels
    os.utime(img, ns=(time.time_ns(), time.time_ns() + 10**9))
    assert cache.pixels.get(str(img)) is None
    loader = Loader(cache, batch_size=6, shuffle=False, world=World(0, 1))
    (batch,) = list(loader)
    last = batch["pixel_values"][-1]  # c.png's, decoded now: pure red after normalising
    assert float(last[0].std()) < 1e-5 and float(last[0, 0, 0]) > float(last[1, 0, 0])


def test_missing_pixel_store_is_damage_and_a_rerun_repairs_it(tmp_path: Path, data: Path):
    out = tmp_path / "c"
    preprocess(cfg(data), out=out, pixels={"size": 48})
    (out / "pixels" / "manifest.json").unlink()
    with pytest.raises(CacheError, match=r"pixels/manifest\.json is missing"):
        open_cache(out)
    report = preprocess(cfg(data), out=out, pixels={"size": 48})
    assert report.finalized and report.built == 0
    assert len(open_cache(out).pixels) == 3


def test_finish_keeps_an_equal_store_and_replaces_a_stale_one(tmp_path: Path, data: Path):
    out = tmp_path / "c"
    config = cfg(data)
    preprocess(config, out=out, pixels={"size": 48})
    folder = out / "pixels"
    recipe = RecipeConfig(**config["recipe"]).build()
    stage = PixelsStage.from_options({"size": 48}, recipe)
    cache = open_cache(out)

    def chunks():
        return (cache.chunk(k) for k in range(cache.num_chunks))

    index = (folder / "index.npy").read_bytes()
    before = (folder / "index.npy").stat()
    facts = stage.finish(folder, chunks)  # another rank finishing too: nothing rebuilt
    after = (folder / "index.npy").stat()
    assert facts["images"] == 3 and (after.st_ino, after.st_mtime_ns) == (
        before.st_ino,
        before.st_mtime_ns,
    )
    other = PixelsStage.from_options({"size": 32}, recipe)
    facts = other.finish(folder, chunks)  # a store of other options there: replaced whole
    assert facts["images"] == 3 and (folder / "index.npy").read_bytes() != index
    assert PixelStore(folder).manifest["transform"]["size"] == 32
    assert not list(out.glob(".pixels.tmp-*"))


def test_waiting_ranks_leave_finalizing_to_a_live_heartbeat(tmp_path: Path) -> None:
    layout = workdir.Layout(tmp_path)
    assert workdir._finalizer(layout) is None
    with workdir._heartbeat(layout.finalizing, every=0.05):
        assert layout.finalizing.is_file() and workdir._finalizer(layout) == "live"
        first = layout.finalizing.stat().st_mtime_ns
        time.sleep(0.3)
        assert layout.finalizing.stat().st_mtime_ns > first  # still beating
    assert not layout.finalizing.exists()
    layout.finalizing.touch()
    old = time.time() - workdir._FINALIZE_GRACE - 1
    os.utime(layout.finalizing, (old, old))  # a rank that died while finalizing
    assert workdir._finalizer(layout) == "gone"


def test_cli_pixels_flags(tmp_path: Path, data: Path) -> None:
    config = tmp_path / "cfg.yaml"
    config.write_text(orjson.dumps(cfg(data)).decode())  # JSON is YAML
    runner = CliRunner()
    out = tmp_path / "c"
    args = ["preprocess", str(config), "--out", str(out), "-q"]
    res = runner.invoke(app, [*args, "--pixels", "--image-size", "40"])
    assert res.exit_code == 0, res.output
    assert "pixels: 3 images pre-decoded" in res.output
    assert "1 could not be (see pixels/failures.jsonl)" in res.output
    assert PixelStore(out / "pixels").manifest["transform"]["size"] == 40
    res = runner.invoke(app, [*args, "--pixels", "--image-size", "40", "--json"])
    assert json.loads(res.output)["stage_outputs"]["pixels"]["images"] == 3
    res = runner.invoke(app, [*args, "--image-size", "40"])
    assert res.exit_code != 0 and "add --pixels" in res.output


@pytest.mark.shared_data
@pytest.mark.timeout(240)
def test_real_multimodal_data_with_pixels(shared_data: Path, tmp_path: Path) -> None:
    """LLaMA-Factory's mllm_demo and Qwen3-VL's demo (real JPEGs): store == decoding."""
    recipe = {
        "tokenizer": str(shared_data / "tokenizers/qwen3/tokenizer.json"),
        "template": "qwen3",
        "image_tokens": "qwen2-vl",
        "media_root": {
            str(shared_data / "qwen3-vl/demo/single_images.json"): str(shared_data / "qwen3-vl")
        },
    }
    sources = [
        str(shared_data / "llama-factory/mllm_demo.json"),
        str(shared_data / "qwen3-vl/demo/single_images.json"),
    ]
    config = {"sources": sources, "recipe": recipe, "cache": {"workers": 2}}
    report = preprocess(config, out=tmp_path / "c", pixels=True).to_json()
    cache = open_cache(tmp_path / "c")
    referenced = {img["path"] for s in cache for img in s["images"]}
    px = report["stage_outputs"]["pixels"]
    assert px["images"] + sum(px["failures"].values()) == len(referenced) > 3

    def run(**kw) -> list[dict]:
        loader = Loader(cache, batch_size=4, shuffle=False, world=World(0, 1), **kw)
        return [dict(b) for b in loader]

    got = run()
    want = run(media=MediaStage(cache.media_stage().image, store=False))
    for g, w in zip(got, want, strict=True):
        assert np.array_equal(g["pixel_values"].numpy(), w["pixel_values"].numpy())
        assert g["image_grid_thw"].tolist() == w["image_grid_thw"].tolist()


def test_media_false_and_chute_bench_use_the_cache_pixels(tmp_path: Path, data: Path) -> None:
    from chute.cli.bench_cmd import media_stage

    preprocess(cfg(data), out=tmp_path / "c", pixels={"size": 48})
    cache = open_cache(tmp_path / "c")
    plain = Loader(cache, batch_size=6, shuffle=False, world=World(0, 1), media=False)
    assert plain.media is None and "pixel_values" not in next(iter(plain))
    # chute bench DIR: the cache's own stage (whatever --image-size says), or none with --media off
    stage = media_stage(cache, None, "auto", 336, None)
    assert stage.has_store and stage.image.output_size == (48, 48)
    assert media_stage(cache, None, "off", 336, None) is False


def test_two_ranks_at_once_build_one_store_equal_to_a_single_build(
    tmp_path: Path, data: Path
) -> None:
    import subprocess
    import sys

    config = tmp_path / "cfg.yaml"
    config.write_text(orjson.dumps(cfg(data)).decode())
    out = tmp_path / "ranks"
    cli = [sys.executable, "-c", "from chute.cli import main; main()", "preprocess"]
    cmd = [*cli, str(config), "--out", str(out)]
    cmd += ["--pixels", "--image-size", "48", "--json", "-q", "--workers", "1"]
    procs = [subprocess.Popen([*cmd, "--shard", f"{i}/2"], stdout=subprocess.PIPE) for i in (0, 1)]
    reports = [json.loads(p.communicate(timeout=120)[0]) for p in procs]
    assert all(p.returncode == 0 for p in procs)
    assert sum(r["finalized"] for r in reports) >= 1
    assert {r["stage_outputs"]["pixels"]["images"] for r in reports} == {3}
    preprocess(cfg(data), out=tmp_path / "one", pixels={"size": 48})
    for name in ("index.npy", "paths.bin", "chunk-00000.bin", "failures.jsonl"):
        assert (out / "pixels" / name).read_bytes() == (tmp_path / "one/pixels" / name).read_bytes()
    assert not (out / "finalizing").exists() and not list(out.glob(".pixels.tmp-*"))
    assert len(open_cache(out).pixels) == 3


def test_a_mixtures_caches_read_every_datasets_pixels(
    tmp_path: Path, data: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``chute preprocess --pixels`` of a mixture keeps a store per dataset; the Loader over
    the caches reads each dataset's images from its store (before, it decoded them all)."""
    from chute import Mixture, MixtureEntry
    from chute.media import PixelStores

    rows = data.read_text().splitlines(keepends=True)
    first, second = tmp_path / "first.jsonl", tmp_path / "second.jsonl"
    first.write_text("".join(rows[:2]))  # a.png; a.png + b.jpg
    second.write_text("".join(rows[3:4] + rows[5:]))  # text; c.png
    tok = write_tokenizer(tmp_path / "tok")
    mix = Mixture(
        [MixtureEntry("first", str(first)), MixtureEntry("second", str(second), repeat=2)],
        recipe={"tokenizer": str(tok), "template": "chatml", "image_tokens": 16},
    )
    preprocess(mix, out=tmp_path / "c", pixels={"size": 48}, overrides=["cache.workers=1"])

    def loader(**kw) -> Loader:
        return Loader(open_cache(tmp_path / "c"), batch_size=2, seed=1, world=World(0, 1), **kw)

    decoded = loader(
        media=MediaStage(ImageTransform(size=48, crop=48, tokens_per_image=16), store=False)
    )
    want = batches(decoded)
    auto = loader()
    assert isinstance(auto.media.store, PixelStores) and len(auto.media.store) == 3

    def no_decode(*args, **kwargs):
        raise AssertionError("an image was decoded although a cache holds its pixels")

    monkeypatch.setattr("chute.media.stage.decode_image", no_decode)
    got = batches(auto)
    assert sum(int(b["image_counts"].sum()) for b in got) == 5  # a, a+b, c twice
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        assert g.keys() == w.keys()
        for key in g:
            assert np.array_equal(np.asarray(g[key]), np.asarray(w[key])), key
    with_workers = batches(loader(num_workers=2))  # the stores travel to forked workers
    for g, w in zip(with_workers, want, strict=True):
        assert np.array_equal(np.asarray(g["pixel_values"]), np.asarray(w["pixel_values"]))
    other = ImageTransform(size=64, crop=64, tokens_per_image=16)
    with pytest.raises(ConfigError, match="a cache of the mixture holds images pre-decoded"):
        loader(media=other)


def test_validate_finds_an_image_whose_size_changed_since_it_was_counted(
    tmp_path: Path, data: Path
) -> None:
    """The fingerprint covers the data files, not the images they name: a replaced image was
    the cache's without a word, and a Loader skipped its samples as image_token_mismatch."""
    from chute.cache.verify import verify_cache

    out = tmp_path / "c"
    preprocess(cfg(data, image_tokens="qwen2-vl"), out=out)
    check = verify_cache(out)
    assert check.ok and check.images_checked == 4, check.problems  # a, b, c and cut (its header)
    Image.new("RGB", (300, 300)).save(data.parent / "img" / "c.png")  # was 90x120
    check = verify_cache(out)
    (problem,) = check.problems
    assert "1 of 4 images the samples reference changed since the cache was built" in problem
    assert "c.png: 90x120 when counted, 300x300 now" in problem and "--overwrite" in problem
    result = CliRunner().invoke(app, ["validate", str(out)])
    assert result.exit_code == 1 and "c.png: 90x120 when counted" in result.output


@pytest.mark.parametrize("pixels", [None, True])
def test_a_cache_of_videos_loads_them_as_the_files_do(tmp_path: Path, pixels: bool | None) -> None:
    # the manifest counts image tokens only: a cache whose samples hold videos was read with no
    # media stage (its video tokens trained on no pixels), and with pixels its stage had no video
    from chute import Recipe
    from video_helpers import make_video

    make_video(tmp_path / "clip.mp4", frames=20, fps=7)
    Image.fromarray(np.full((56, 84, 3), 90, np.uint8)).save(tmp_path / "a.png")
    records = [
        {"messages": [{"role": "user", "content": "<video>What?"}, {"role": "assistant", "content": "Grey."}], "videos": ["clip.mp4"]},
        {"messages": [{"role": "user", "content": "<image>And?"}, {"role": "assistant", "content": "Flat."}], "images": ["a.png"]},
    ]  # fmt: skip
    data = tmp_path / "data.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in records))
    tok = write_tokenizer(tmp_path / "tok")
    options = {
        "tokenizer": str(tok),
        "template": "chatml",
        "image_tokens": "qwen2.5-vl",
        "video_tokens": "fps",
    }
    preprocess(
        sources=[str(data)], recipe=options, cache={"workers": 1}, out=tmp_path / "c", pixels=pixels
    )
    recipe = Recipe(**options)
    loader = {"batch_size": 1, "shuffle": False, "world": World(0, 1)}
    direct = list(Loader(data, recipe, **loader))
    for args in ((), (recipe,)):
        cached = list(Loader(open_cache(tmp_path / "c"), *args, **loader))
        for a, b in zip(direct, cached, strict=True):
            assert sorted(a) == sorted(b)
            for key in ("pixel_values_videos", "video_grid_thw", "pixel_values", "input_ids"):
                if key in a:
                    assert np.array_equal(a[key].numpy(), b[key].numpy()), key
