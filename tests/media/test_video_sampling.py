"""Video frames sampled at a rate (Qwen's rule), the short form, Qwen3-VL's layout, timing fields.

The arithmetic (``chute.media.video_rules``) is compared with the references' own functions over
many frame counts, rates and sizes; the rest runs on small synthetic videos (real videos and
the processors' outputs: ``test_video_reference.py``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from chute import Loader, Recipe, World, open_cache, preprocess
from chute.cache.rows import ChunkRows
from chute.collate.media import collate_media
from chute.errors import ConfigError, SampleError
from chute.media import DynamicResolution, ImageTransform, MediaStage
from chute.media import video_rules as rules
from chute.media.video import VideoFrames
from chute.media.video_spec import video_tokens_rule
from chute.recipe.encode import Encoded, fit_length
from recipe_helpers import tiny_tokenizer
from video_helpers import References, make_video

TOK = tiny_tokenizer()
VIDEO = TOK.token_to_id("<|video_pad|>")
START, END = TOK.token_to_id("<|vision_start|>"), TOK.token_to_id("<|vision_end|>")


@pytest.fixture(scope="module")
def refs() -> Any:
    with pytest.MonkeyPatch.context() as patch:
        yield References(patch)


# -- the arithmetic against the references' functions ---------------------------------------------


def test_frame_counts_equal_the_references(refs: References) -> None:
    from transformers.video_utils import VideoMetadata

    nframes = refs.vision_process.smart_nframes
    qwen3 = refs.video_processor(refs.qwen3_vl_video.Qwen3VLVideoProcessor)
    checked = 0
    for total in (2, 3, 5, 8, 9, 24, 61, 146, 243, 270, 1001, 9000, 40000):
        for video_fps in (1.0, 23.976023976023978, 25.0, 359 / 12, 60.0):
            for fps in (0.5, 1.0, 2.0, 3.7):
                for low, high in ((4, 768), (1, 7), (8, 64), (3, 3)):
                    ele = {"fps": fps, "min_frames": low, "max_frames": high}
                    try:
                        want = nframes(ele, total_frames=total, video_fps=video_fps)
                    except ValueError:
                        with pytest.raises(SampleError, match="video_unsupported"):
                            rules.frames_at_rate(
                                "qwen-vl-utils",
                                total=total,
                                video_fps=video_fps,
                                fps=fps,
                                min_frames=low,
                                max_frames=high,
                            )
                        continue
                    got = rules.frames_at_rate(
                        "qwen-vl-utils",
                        total=total,
                        video_fps=video_fps,
                        fps=fps,
                        min_frames=low,
                        max_frames=high,
                    )
                    assert got == want, (total, video_fps, fps, low, high)
                    qwen3.min_frames, qwen3.max_frames = low, high
                    meta = VideoMetadata(total_num_frames=total, fps=video_fps)
                    indices = qwen3.sample_frames(meta, fps=fps)
                    n = rules.frames_at_rate(
                        "qwen3-vl",
                        total=total,
                        video_fps=video_fps,
                        fps=fps,
                        min_frames=low,
                        max_frames=high,
                    )
                    assert n == len(indices)
                    assert rules.frame_indices(total, n).tolist() == indices.tolist()
                    checked += 1
    assert checked > 500
    for num_frames in (2, 3, 4, 7, 9, 10):  # a fixed count: qwen-vl-utils rounds it to even
        want = nframes({"nframes": num_frames}, total_frames=100, video_fps=25.0)
        assert rules.fixed_frames("qwen-vl-utils", num_frames, 100) == want
        assert rules.fixed_frames("qwen3-vl", num_frames, 100) == num_frames


def test_frame_indices_equal_torch_linspace() -> None:
    torch = pytest.importorskip("torch")
    # qwen-vl-utils rounds torch.linspace (float32); chute's float64 indices are the same frames
    # for every count Qwen's rule gives on videos of up to 3000 frames (beyond ~15,000 frames
    # float32 rounding moves some of torch's indices by one frame)
    for total in range(2, 3000, 37):
        for n in range(2, min(total, 768) + 1, 2):
            want = torch.linspace(0, total - 1, n).round().long().tolist()
            assert rules.frame_indices(total, n).tolist() == want, (total, n)


def test_frame_sizes_equal_the_references(refs: References) -> None:
    qwen_resize = refs.vision_process.smart_resize
    clip_resize = refs.qwen3_vl_video.smart_resize
    sizes = [(360, 640), (240, 320), (224, 224), (1080, 1920), (2160, 3840), (40, 3000), (20, 30)]
    for height, width in sizes:
        for n in (2, 4, 10, 18, 64, 300, 768):
            for patch in (14, 16):
                f = patch * 2
                low, cap, total = 128 * f * f, 768 * f * f, 128000 * f * f * 0.9
                # fetch_video's per-frame ceiling, re-derived from its source
                ceiling = max(min(cap, total / n * 2), int(low * 1.05))
                want = qwen_resize(height, width, factor=f, min_pixels=low, max_pixels=ceiling)
                got = rules.frame_size(
                    height,
                    width,
                    n=n,
                    factor=f,
                    frame_min_pixels=low,
                    frame_max_pixels=None,
                    total_pixels=total,
                    frame_cap=cap,
                )
                assert got == want, (height, width, n, patch)
            want = clip_resize(
                n, height, width, temporal_factor=2, factor=32, min_pixels=131072,
                max_pixels=786432,
            )  # fmt: skip
            got = rules.clip_size(
                height,
                width,
                n=n,
                factor=32,
                temporal_patch_size=2,
                video_min_pixels=131072,
                video_max_pixels=786432,
            )
            assert got == want, (height, width, n)
    with pytest.raises(SampleError, match="video_unsupported: .*aspect ratio of 250"):
        rules.frame_size(
            10, 2500, n=4, factor=28, frame_min_pixels=1, frame_max_pixels=None,
            total_pixels=1e9, frame_cap=10**7,
        )  # fmt: skip


def test_group_times_equal_the_qwen3_processor(refs: References) -> None:
    calc = refs.qwen3_vl.Qwen3VLProcessor._calculate_timestamps
    for indices, fps in (([0, 30, 60, 90, 120, 149], 30.0), ([0, 5, 9], 24.0), ([3], 2.5)):
        assert rules.group_times(indices, fps, 2) == calc(None, list(indices), fps, 2)


# -- VideoFrames and the short form ---------------------------------------------------------------


def test_video_frames_options_are_checked() -> None:
    assert VideoFrames().num_frames == 8 and VideoFrames().rule is None  # as before
    frames = VideoFrames(fps=2)
    assert (frames.num_frames, frames.fps, frames.rule) == (None, 2.0, "qwen-vl-utils")
    bad = [
        ({"num_frames": 8, "fps": 2.0}, "fps: num_frames=8 and fps=2.0 are both set"),
        ({"fps": 0}, "fps: expected a positive number"),
        ({"fps": 2, "min_frames": 9, "max_frames": 4}, "min_frames: min_frames=9 is more"),
        ({"fps": 2, "rule": "qwen4"}, "rule: expected one of qwen-vl-utils, qwen3-vl"),
        ({"fps": 2, "video_max_pixels": 10}, "video_max_pixels: .*pass rule='qwen3-vl'"),
        ({"num_frames": 4, "total_pixels": 10}, "total_pixels: .*rule=None"),
        ({"num_frames": 1, "rule": "qwen3-vl"}, "num_frames: num_frames=1 is less than"),
        ({"num_frames": 1, "rule": "qwen-vl-utils"}, "num_frames: num_frames=1 rounds to 0"),
        ({"fps": 2, "frame_min_pixels": 9, "frame_max_pixels": 4}, "frame_max_pixels: "),
    ]
    for kwargs, message in bad:
        with pytest.raises(ConfigError, match=message):
            VideoFrames(**kwargs)
    with pytest.raises(ConfigError, match="unknown family 'llava'"):
        VideoFrames.preset("llava")


def test_short_form() -> None:
    assert video_tokens_rule(None) is None and video_tokens_rule("64") == 64
    qwen2 = video_tokens_rule("fps", family="qwen2-vl")
    assert qwen2 == VideoFrames.preset("qwen2-vl")
    assert (qwen2.fps, qwen2.min_frames, qwen2.max_frames, qwen2.transform.patch_size) == (
        2.0, 4, 768, 14,
    )  # fmt: skip
    qwen3 = video_tokens_rule("fps=1, max_frames=64", family="qwen3-vl")
    assert (qwen3.fps, qwen3.max_frames, qwen3.rule) == (1.0, 64, "qwen3-vl")
    assert qwen3.transform.patch_size == 16 and qwen3.transform.normalize == "siglip"
    assert video_tokens_rule({"fps": 1, "max_frames": 64}, family="qwen3-vl") == qwen3
    fixed = video_tokens_rule("frames=8", family="qwen2.5-vl")
    assert (fixed.num_frames, fixed.fps, fixed.rule) == (8, None, "qwen-vl-utils")
    plain = video_tokens_rule({"num_frames": 4})  # no family: VideoFrames' own defaults
    assert (plain.num_frames, plain.rule) == (4, None)
    frames = VideoFrames(num_frames=2)
    assert video_tokens_rule(frames) is frames
    for value, message in (
        ("fps=2,frames=8", "sets both fps and a frame count"),
        ("fps,frames=8", "sets both fps and a frame count"),
        ("frames", "'frames' in 'frames' is not key=value"),
        ("fps=fast", r"fps='fast' in 'fps=fast': expected a number"),
        ("speed=2", "unknown key 'speed'"),
        ({"frame": 4}, r"unknown key\(s\) 'frame'.*\(fields of VideoFrames\)"),
        (0, "expected a positive number of tokens"),
        (True, "expected a token count"),
    ):
        with pytest.raises(ConfigError, match=f"video_tokens: .*{message}"):
            video_tokens_rule(value, family="qwen2-vl")


def test_the_cli_flag_takes_the_short_form(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from chute.cli import app

    make_video(tmp_path / "v.mp4", frames=40, size=(96, 64), fps=8)
    data = tmp_path / "d.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in _rows("v.mp4")))
    tok = tmp_path / "tokenizer.json"
    tok.write_text(TOK.rust.to_str())
    base = ["validate", str(data), "--tokenizer", str(tok), "--template", "chatml"]
    base += ["--image-tokens", "qwen3-vl", "--no-decode", "--json"]
    result = CliRunner().invoke(app, [*base, "--video-tokens", "fps=1,max_frames=64"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["rejected"] == 0
    result = CliRunner().invoke(app, [*base, "--video-tokens", "fsp=2"])
    assert result.exit_code == 2 and "--video-tokens: unknown key 'fsp'" in result.output


# -- synthetic videos: counted == loaded, timing ----------------------------------------------------


def test_fps_sampling_counts_what_it_loads(tmp_path: Path) -> None:
    video = make_video(tmp_path / "v.mp4", frames=40, size=(96, 64), fps=8)  # 5 s
    frames = VideoFrames(fps=2.0)
    s = frames.sampling(str(video))
    assert s.n == 10 and s.indices.tolist() == [0, 4, 9, 13, 17, 22, 26, 30, 35, 39]
    assert s.second_per_grid_t == 2 / (10 / 40 * 8.0) == 1.0
    assert s.timestamps == [(0 + 4) / 2 / 8, (9 + 13) / 16, (17 + 22) / 16, (26 + 30) / 16, 4.625]
    tokens, info = frames.count_tokens(str(video))
    out = frames(str(video))
    assert out.grid_thw == tuple(info["grid_thw"]) and out.num_features == tokens
    assert info["second_per_grid_t"] == 1.0 and info["timestamps"] == s.timestamps
    # the stage decodes exactly the counted frames: the same frames decoded here, resized
    av = pytest.importorskip("av")
    from PIL import Image

    with av.open(str(video)) as container:
        decoded = [f.to_image() for f in container.decode(video=0)]
    h, w = s.size
    picked = np.stack(
        [np.asarray(decoded[i].resize((w, h), Image.Resampling.BICUBIC)) for i in s.indices]
    )
    np.testing.assert_array_equal(out.pixels, DynamicResolution().finish(picked).pixels)
    # a rate above the stream's keeps at most its frames (Qwen: 4 to 768, never more than all)
    assert VideoFrames(fps=100.0).sampling(str(video)).n == 40
    short = make_video(tmp_path / "one.mp4", frames=1)
    with pytest.raises(SampleError, match="video_unsupported: .*one.mp4: .*at least 2"):
        frames.count_tokens(str(short))


def test_a_fixed_count_spreads_frames_and_times_them(tmp_path: Path) -> None:
    video = make_video(tmp_path / "v.mp4", frames=12, fps=4)
    frames = VideoFrames(
        num_frames=3, transform=ImageTransform(size=32, crop=32, tokens_per_image=4)
    )
    assert frames.sampling(str(video)).indices.tolist() == [0, 6, 11]  # ends included
    dynamic = VideoFrames(num_frames=4)
    _, info = dynamic.count_tokens(str(video))
    # Qwen2.5-VL's processor given these frames: fps = 4 / 12 * 4 frames a second
    assert info["second_per_grid_t"] == pytest.approx(2 / (4 / 12 * 4.0))
    assert info["timestamps"] == [(0 + 4 / 4) / 2, (7 / 4 + 11 / 4) / 2]


def _rows(video: str) -> list[dict[str, Any]]:
    return [
        {
            "videos": [video],
            "messages": [
                {"role": "user", "content": "<video>What?"},
                {"role": "assistant", "content": "Grey."},
            ],
        }
    ]


def test_qwen3_vl_layout_in_the_recipe_and_stage(tmp_path: Path) -> None:
    make_video(tmp_path / "v.mp4", frames=40, size=(96, 64), fps=8)
    recipe = Recipe(tokenizer=TOK, template="chatml", image_tokens="qwen3-vl", video_tokens="fps")
    record = _rows("v.mp4")[0]
    sample = recipe.process(record, path=str(tmp_path / "d.jsonl"))  # media beside it
    [ref] = sample["videos"]
    t, h, w = ref["grid_thw"]
    ids = sample["input_ids"]
    assert len(ref["frame_spans"]) == len(ref["timestamps"]) == t == 5
    a, b = ref["span"]
    assert ids[a - 1] == START and ids[b] == END  # the template's markers stay around it
    text = TOK.decode(ids[a:b].tolist())
    assert text.startswith("<0.2 seconds><|vision_start|><|video_pad|>")
    assert text.count("<|vision_start|>") == text.count("<|vision_end|>") == t
    assert [f"{x:.1f}" for x in ref["timestamps"]] == ["0.2", "1.4", "2.4", "3.5", "4.6"]
    for x, y in ref["frame_spans"]:
        assert y - x == h * w // 4 and (ids[x:y] == VIDEO).all()
        assert ids[x - 1] == START and ids[y] == END
    assert int((ids == VIDEO).sum()) == ref["num_tokens"]
    stage = MediaStage(video=recipe.media.video_tokens).bind(recipe)
    assert stage(sample)["video_grid_thw"] == [(t, h, w)]
    moved = {
        **sample,
        "videos": [{**ref, "frame_spans": [[x + 1, y + 1] for x, y in ref["frame_spans"]]}],
    }
    with pytest.raises(SampleError, match="video_token_mismatch"):
        stage(moved)
    # left truncation moves the frame spans with the video
    enc = Encoded(ids, sample["labels"], [{"kind": "video", **ref}])
    cut = fit_length(enc, len(ids) - a + 3, "truncate", "left")
    assert cut.media[0]["frame_spans"] == [[x - a + 3, y - a + 3] for x, y in ref["frame_spans"]]
    with pytest.raises(ConfigError, match="video_tokens: .*a fixed count of 64 tokens"):
        Recipe(tokenizer=TOK, template="chatml", image_tokens="qwen3-vl", video_tokens=64)


def test_second_per_grid_ts_in_batches(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    make_video(tmp_path / "v.mp4", frames=40, size=(96, 64), fps=8)
    data = tmp_path / "d.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in _rows("v.mp4") * 2))
    recipe = Recipe(tokenizer=TOK, template="chatml", image_tokens="qwen2.5-vl", video_tokens="fps")
    [batch] = list(Loader(data, recipe, batch_size=2, world=World(0, 1)))
    assert batch["second_per_grid_ts"].dtype == torch.float32
    assert batch["second_per_grid_ts"].tolist() == [1.0, 1.0]
    pixels = [np.zeros((4, 1176), np.float32)]
    with_time = {"pixel_values_videos": pixels, "video_grid_thw": [(1, 2, 2)],
                 "videos": [{"second_per_grid_t": 0.5}]}  # fmt: skip
    without = {**with_time, "videos": [{}]}  # a fixed count, or a cache of format version 1
    assert collate_media([with_time, with_time])["second_per_grid_ts"].tolist() == [0.5, 0.5]
    assert "second_per_grid_ts" not in collate_media([with_time, without])


def test_video_timing_survives_the_cache(tmp_path: Path) -> None:
    from cache_helpers import write_tokenizer

    make_video(tmp_path / "v.mp4", frames=40, size=(96, 64), fps=8)
    data = tmp_path / "d.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in _rows("v.mp4")))
    tok = write_tokenizer(tmp_path / "tok")
    for family in ("qwen2.5-vl", "qwen3-vl"):
        options = {"tokenizer": str(tok), "template": "chatml", "image_tokens": family}
        cfg = {
            "sources": [str(data)],
            "recipe": {**options, "video_tokens": "fps=2,max_frames=64"},
            "cache": {"workers": 1},
        }
        preprocess(cfg, out=tmp_path / family)
        [got] = list(open_cache(tmp_path / family))
        want = Recipe(**cfg["recipe"])(next(iter(_source(data))))
        assert got["videos"] == want["videos"]
        assert got["videos"][0]["second_per_grid_t"] == 1.0
        assert ("frame_spans" in got["videos"][0]) == (family == "qwen3-vl")
        assert np.array_equal(got["input_ids"], want["input_ids"])


def _source(path: Path) -> Any:
    from chute import JsonlSource

    return JsonlSource(path)


def test_a_version_1_chunk_reads_video_timing_as_absent() -> None:
    item = pa.struct(
        [
            ("source", pa.string()),
            ("path", pa.string()),
            ("span", pa.list_(pa.int32())),
            ("num_tokens", pa.int32()),
            ("size", pa.list_(pa.int32())),
            ("grid_thw", pa.list_(pa.int32())),
            ("seconds", pa.float64()),
        ]
    )  # the media entries of format version 1
    video = {"source": "v.mp4", "path": "/v.mp4", "span": [1, 3], "num_tokens": 2,
             "size": [4, 4], "grid_thw": [1, 2, 4], "seconds": None}  # fmt: skip
    columns = {
        "input_ids": pa.array([[5, 9, 9, 6]], pa.list_(pa.uint16())),
        "label_spans": pa.array([[3, 4]], pa.list_(pa.int32())),
        "length": pa.array([4], pa.int32()),
        "num_image_tokens": pa.array([0], pa.int32()),
        "truncated": pa.array([False]),
        "file": pa.array([0], pa.int32()),
        "line": pa.array([1], pa.int64()),
        "index": pa.array([0], pa.int64()),
        "images": pa.array([[]], pa.list_(item)),
        "videos": pa.array([[video]], pa.list_(item)),
        "audios": pa.array([[]], pa.list_(item)),
    }
    batch = pa.RecordBatch.from_pydict(columns)
    [got] = ChunkRows(batch, ["d.jsonl"]).sample(0)["videos"]
    assert got.get("second_per_grid_t") is None and "frame_spans" not in got
    assert got["grid_thw"] == [1, 2, 4] and got["span"] == [1, 3]


def _mux_frames(av: Any, out: Any, stream: Any, frames: int) -> None:
    """``frames`` grey frames (``k * 5``) of ``stream``'s size encoded into ``out``, flushed."""
    for k in range(frames):
        img = np.full((stream.height, stream.width, 3), k * 5, dtype=np.uint8)
        for packet in stream.encode(av.VideoFrame.from_ndarray(img, format="rgb24")):
            out.mux(packet)
    for packet in stream.encode():
        out.mux(packet)


def _video_with_longer_audio(path: Path) -> Path:
    """2 s of 25 fps video and 6 s of audio in one container (the container says 6 s)."""
    av = pytest.importorskip("av")
    with av.open(str(path), "w") as out:
        video = out.add_stream("mpeg4", rate=25)
        video.width, video.height, video.pix_fmt = 64, 48, "yuv420p"
        audio = out.add_stream("aac", rate=16000)
        audio.layout = "mono"
        _mux_frames(av, out, video, 50)
        for i in range(6 * 16000 // 1024):
            frame = av.AudioFrame.from_ndarray(
                np.zeros((1, 1024), np.float32), format="fltp", layout="mono"
            )
            frame.sample_rate, frame.pts = 16000, i * 1024
            for packet in audio.encode(frame):
                out.mux(packet)
        for packet in audio.encode():
            out.mux(packet)
    return path


@pytest.mark.parametrize("tag", [True, False])
def test_a_video_track_shorter_than_its_audio_is_sampled_over_its_own_frames(
    tmp_path: Path, tag: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Matroska gives the video stream no duration: the container's (its audio's 6 s) made
    150 frames of a 50-frame video, and frames past the end repeated the last one."""
    from chute.media import video

    path = _video_with_longer_audio(tmp_path / "clip.mkv")
    if not tag:  # a muxer that writes no DURATION tag: the packets are counted
        monkeypatch.setattr(video, "_tagged_duration", lambda stream: None)
    info = video.probe_video(str(path))
    assert info.frames == 50 and abs(info.duration - 2.0) < 0.05, info


def test_a_raw_stream_without_timestamps_is_decoded_whole(tmp_path: Path) -> None:
    """A raw H.264 stream cannot seek back: counting its packets in the caller's container
    broke the decoding after it (PermissionError); it is counted in a container of its own."""
    av = pytest.importorskip("av")
    from chute.media import video

    path = tmp_path / "clip.h264"
    with av.open(str(path), "w", format="h264") as out:
        stream = out.add_stream("libx264", rate=25)
        stream.width, stream.height, stream.pix_fmt = 64, 48, "yuv420p"
        _mux_frames(av, out, stream, 20)
    video.probe_video(str(path))  # no error: the header's figures, whatever they are
    rule = ImageTransform(size=28, crop=28, tokens_per_image=4)
    frames = VideoFrames(num_frames=4, transform=rule)(str(path))
    assert frames.pixels.shape[0] == 4
