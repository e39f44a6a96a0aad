"""Video frames (PyAV) and audio (soundfile): counted from headers, loaded, checked, skipped."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from chute import Loader, Recipe, World
from chute.errors import ConfigError, SampleError
from chute.media import DynamicResolution, ImageTransform, MediaStage
from recipe_helpers import tiny_tokenizer

TOK = tiny_tokenizer()
VIDEO = TOK.token_to_id("<|video_pad|>")


def make_video(
    path: Path, frames: int = 12, size: tuple[int, int] = (64, 48), fps: int = 4
) -> Path:
    av = pytest.importorskip("av")
    with av.open(str(path), "w") as out:
        stream = out.add_stream("mpeg4", rate=fps)
        stream.width, stream.height = size
        stream.pix_fmt = "yuv420p"
        for k in range(frames):
            img = np.full((size[1], size[0], 3), k * 20, dtype=np.uint8)
            for packet in stream.encode(av.VideoFrame.from_ndarray(img, format="rgb24")):
                out.mux(packet)
        for packet in stream.encode():
            out.mux(packet)
    return path


def test_video_frames_count_and_load(tmp_path: Path) -> None:
    from chute.media.video import VideoFrames, probe_video

    video = make_video(tmp_path / "v.mp4")
    info = probe_video(str(video))
    assert (info.width, info.height) == (64, 48) and info.duration == pytest.approx(3.0, abs=0.3)
    frames = VideoFrames(num_frames=4, transform=DynamicResolution())
    tokens, found = frames.count_tokens(str(video))
    out = frames(str(video))
    assert out.grid_thw == tuple(found["grid_thw"]) == (2, 4, 4) and out.num_features == tokens == 8
    fixed = VideoFrames(
        num_frames=3, transform=ImageTransform(size=32, crop=32, tokens_per_image=4)
    )
    got = fixed(str(video))
    assert got.pixels.shape == (3, 3, 32, 32) and got.num_features == 12
    # Uniform sampling: frames from the start, middle and end (brightness rises with the index).
    brightness = got.pixels.mean(axis=(1, 2, 3))
    assert brightness[0] < brightness[1] < brightness[2]
    with pytest.raises(SampleError, match="video_too_large: .*longer than max_seconds=1"):
        VideoFrames(num_frames=2, max_seconds=1)(str(video))
    with pytest.raises(SampleError, match="video_missing"):
        frames(str(tmp_path / "none.mp4"))
    (tmp_path / "bad.mp4").write_bytes(b"\x00" * 100)
    with pytest.raises(SampleError, match="video_corrupt"):
        frames(str(tmp_path / "bad.mp4"))
    with pytest.raises(ConfigError, match="tokens_per_image=N"):
        VideoFrames(transform=ImageTransform())


def test_videos_through_the_recipe_and_loader(tmp_path: Path) -> None:
    from chute.media.video import VideoFrames

    make_video(tmp_path / "v.mp4")
    (tmp_path / "broken.mp4").write_bytes(b"junk" * 50)
    frames = VideoFrames(num_frames=4)
    rows = [
        {
            "videos": ["v.mp4"],
            "messages": [
                {"role": "user", "content": "<video>What?"},
                {"role": "assistant", "content": "Grey."},
            ],
        },
        {
            "videos": ["broken.mp4"],
            "messages": [
                {"role": "user", "content": "<video>What?"},
                {"role": "assistant", "content": "?"},
            ],
        },
    ]
    data = tmp_path / "d.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    recipe = Recipe(tokenizer=TOK, template="chatml", video_tokens=frames)
    loader = Loader(data, recipe, batch_size=2, media=MediaStage(video=frames), world=World(0, 1))
    [batch] = list(loader)
    assert loader.stats == {"video_corrupt": 1}
    assert batch["video_grid_thw"].tolist() == [[2, 4, 4]] and batch["video_counts"].tolist() == [1]
    assert int((batch["input_ids"] == VIDEO).sum()) == 8
    assert batch["pixel_values_videos"].shape == (32, 1176)


def test_audio_resample_count_and_load(tmp_path: Path) -> None:
    sf = pytest.importorskip("soundfile")
    from chute.media.audio import AudioClips, probe_audio, resample

    rate = 44100
    t = np.arange(int(1.5 * rate)) / rate
    tone = (0.5 * np.sin(2 * np.pi * 440 * t)).astype(np.float32)
    sf.write(tmp_path / "a.wav", np.stack([tone, tone], axis=1), rate)
    info = probe_audio(str(tmp_path / "a.wav"))
    assert (info.frames, info.sample_rate, info.channels) == (len(tone), rate, 2)
    out = resample(tone, rate, 16000)
    assert len(out) == int(np.ceil(len(tone) * 16000 / rate))
    t16 = np.arange(len(out)) / 16000
    middle = slice(1000, len(out) - 1000)
    assert np.abs(out[middle] - 0.5 * np.sin(2 * np.pi * 440 * t16[middle])).max() < 2e-3
    clips = AudioClips(sample_rate=16000, max_seconds=10, tokens_per_second=25)
    tokens, _ = clips.count_tokens(str(tmp_path / "a.wav"))
    loaded = clips(str(tmp_path / "a.wav"))
    assert tokens == loaded.num_features == 38  # ceil(1.5 s * 25)
    assert loaded.pixels.shape == (24000,)
    with pytest.raises(SampleError, match="audio_too_large"):
        AudioClips(max_seconds=1)(str(tmp_path / "a.wav"))
    (tmp_path / "bad.wav").write_bytes(b"RIFF0000WAVEjunk")
    with pytest.raises(SampleError, match="audio_corrupt"):
        clips(str(tmp_path / "bad.wav"))
    with pytest.raises(SampleError, match="audio_missing"):
        clips(str(tmp_path / "none.wav"))
    stage = MediaStage(audio=clips, token_ids={"audio": 5})
    ids = np.array([1] + [5] * 38 + [2], dtype=np.int32)
    sample = {"input_ids": ids, "audios": [{"path": str(tmp_path / "a.wav"), "span": [1, 39]}]}
    assert stage(sample)["audio_values"][0].shape == (24000,)
    sample["input_ids"] = ids[:-5]
    sample["audios"][0]["span"] = [1, 34]
    with pytest.raises(SampleError, match="audio_token_mismatch"):
        stage(sample)


@pytest.mark.parametrize(
    ("content", "match"),
    [
        (b"", r"audio_corrupt.*empty file \(0 bytes\)"),
        (b"\x00\x00\x00\x20ftypM4A \x00" + b"\x00" * 64, r"audio_unsupported.*MP4/M4A.*ffmpeg"),
        (b"\x1a\x45\xdf\xa3" + b"\x00" * 64, r"audio_unsupported.*WebM"),
        (b"\xff\xf1\x50\x80" + b"\x00" * 64, r"audio_unsupported.*raw AAC"),
        (b"not audio at all" * 8, r"audio_corrupt.*cannot read as audio"),
    ],
)
def test_audio_that_soundfile_cannot_read_says_why(
    tmp_path: Path, content: bytes, match: str
) -> None:
    pytest.importorskip("soundfile")
    from chute.media.audio import AudioClips

    path = tmp_path / "clip.m4a"
    path.write_bytes(content)
    with pytest.raises(SampleError, match=match):
        AudioClips().count_tokens(str(path))
