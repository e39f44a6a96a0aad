"""Times in a video sample's text: read, checked against the clip's end, written as Qwen reads.

Expectations are computed by hand from the headers: a generated clip of 40 frames at 8 fps
(5.0 s), and LLaMA-Factory's demo videos (1.mp4: 243 frames at 25 fps, 9.72 s; 3.mp4: 146 frames
at 23.976 fps, 6.09 s; 4.mp4: 150 frames at 30 fps, 5.0 s).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from chute import Recipe
from chute.errors import ConfigError, SampleError
from chute.lengths import lengths_of
from chute.media.timestamps import Clip, Timestamps
from chute.sources import JsonlSource
from recipe_helpers import tiny_tokenizer
from video_helpers import make_video

TOK = tiny_tokenizer()
DEMO = Path(__file__).resolve().parents[2] / ".." / "shared" / "data" / "llama-factory"
SECONDS = Timestamps("seconds")


def test_the_forms_read_and_what_is_not_a_time():
    clip = [Clip(4000.0)]
    cases = {
        "at 00:12": "at 12.0 seconds",
        "at 1:02:03.": "at 3723.0 seconds.",
        "02:03.5 in": "123.5 seconds in",
        "12.5s, 12.5 s, 12.5 sec and 12 seconds": (
            "12.5 seconds, 12.5 seconds, 12.5 seconds and 12.0 seconds"
        ),
        "from 3.5 to 7 seconds, 3.5-7s": "from 3.5 to 7.0 seconds, 3.5-7.0 seconds",
        "<12.5 seconds>": "<12.5 seconds>",  # Qwen3-VL's own label stays as it is
    }
    for text, expected in cases.items():
        assert SECONDS.rewrite(text, clip) == expected, text
    not_times = (
        "3 dogs, 2.5 images, a 16:9 frame, the 1990s, 12:30:45:10, 5 sets, v1.5s, at 10:30 am, "
        "5:00 p.m., 3:15 o'clock, 3:00 PM"
    )
    assert not Timestamps.find(not_times) and SECONDS.rewrite(not_times, clip) == not_times
    assert Timestamps("check").rewrite("at 00:12", clip) == "at 00:12"  # checked, kept


def test_decades_and_ages_are_not_seconds():
    texts = (
        "A man in his 30s is cooking. Music from the 80s plays; in her 70s, the '90s, "
        "her late 20s and mid-40s."
    )
    assert SECONDS.rewrite(texts, [Clip(60.0)]) == texts
    assert Timestamps("check").rewrite("in her 70s", [Clip(10.0)]) == "in her 70s"
    # without those words it is a time: written in seconds, and past the end rejected
    assert SECONDS.rewrite("He scores at 30s.", [Clip(60.0)]) == "He scores at 30.0 seconds."
    assert SECONDS.rewrite("from 10s to 20s", [Clip(60.0)]) == ("from 10.0 seconds to 20.0 seconds")
    with pytest.raises(SampleError, match="timestamp_outside"):
        Timestamps("check").rewrite("wait 70s", [Clip(10.0)])
    # after "the", a word of time makes it one: "the 30s intro", "the 50s mark"
    assert SECONDS.rewrite("Skip the 30s intro, then the 50s mark.", [Clip(60.0)]) == (
        "Skip the 30.0 seconds intro, then the 50.0 seconds mark."
    )
    with pytest.raises(SampleError, match="timestamp_outside"):
        Timestamps("check").rewrite("Skip the 30s intro.", [Clip(12.0)])
    assert Timestamps("seconds").fingerprint()["rules"] == 2


def test_a_time_past_the_end_is_rejected_within_its_written_precision():
    clip = [Clip(12.6)]
    check = Timestamps("check")
    assert check.rewrite("at 00:13", clip) == "at 00:13"  # 13 +- 0.5 may be 12.6
    for text in ("at 00:14", "at 12.7s", "3 to 13.0 seconds"):
        with pytest.raises(SampleError, match="timestamp_outside"):
            check.rewrite(text, clip)
    # kept within the precision, written no later than the end
    assert SECONDS.rewrite("at 00:13", clip) == "at 12.6 seconds"
    # several videos: checked against the longest
    assert check.rewrite("at 00:20", [Clip(5.0), Clip(21.0)]) == "at 00:20"
    with pytest.raises(SampleError, match="timestamp_ambiguous"):
        Timestamps("seconds", snap=True).rewrite("at 00:02", [Clip(5.0, [1.0]), Clip(6.0, [1.0])])
    with pytest.raises(ConfigError, match="timestamps"):
        Timestamps("minutes")


def _record(video: str, answer: str) -> dict[str, Any]:
    return {
        "videos": [video],
        "messages": [
            {"role": "user", "content": "<video>When does it happen?"},
            {"role": "assistant", "content": answer},
        ],
    }


def _recipe(**kw: Any) -> Recipe:
    return Recipe(
        tokenizer=TOK, template="chatml", image_tokens="qwen3-vl", video_tokens="fps", **kw
    )


def _answer(recipe: Recipe, record: dict[str, Any], where: Path) -> str:
    sample = recipe.process(record, path=str(where))
    text = TOK.decode(sample["input_ids"].tolist())
    return text.split("<|im_start|>assistant\n")[1].split("<|im_end|>")[0]


def test_generated_clip_through_the_recipe_and_the_lengths_pass(tmp_path: Path):
    make_video(tmp_path / "v.mp4", frames=40, size=(96, 64), fps=8)  # 5.0 s
    answers = ["At 00:03.", "From 1.5 to 4.5 seconds.", "At 00:07.", "At 5.4s."]
    data = tmp_path / "d.jsonl"
    data.write_text("".join(json.dumps(_record("v.mp4", a)) + "\n" for a in answers))
    recipe = _recipe(timestamps="qwen3-vl")
    assert _answer(recipe, _record("v.mp4", answers[0]), data) == "At 3.0 seconds."
    assert _answer(recipe, _record("v.mp4", answers[1]), data) == "From 1.5 to 4.5 seconds."
    lengths = lengths_of(JsonlSource(data), recipe, cache=False)
    # 7 s and 5.4 s lie past the 5.0 s clip: counted, not trained on
    assert lengths.rejected == {"timestamp_outside": 2} and lengths.num_valid == 2
    # without the option the text is not read
    assert lengths_of(JsonlSource(data), _recipe(), cache=False).rejected == {}
    # snapped to the sampled groups: 2 fps of 40 frames at 8 -> 10 frames, indices
    # 0 4 9 13 17 22 26 30 35 39, groups of 2 at (0+4)/16=0.25, 1.375, 2.4375, 3.5, 4.625 s
    snap = _recipe(timestamps={"mode": "seconds", "snap": True})
    assert _answer(snap, _record("v.mp4", answers[0]), data) == "At 3.5 seconds."
    assert _answer(snap, _record("v.mp4", answers[1]), data) == "From 1.4 to 4.6 seconds."
    assert recipe.fingerprint()["timestamps"] == {"mode": "seconds", "snap": False, "rules": 2}


@pytest.mark.skipif(not DEMO.exists(), reason="no shared LLaMA-Factory videos")
def test_the_shared_demo_videos(tmp_path: Path):
    where = DEMO / "mllm_video_demo.json"
    recipe = _recipe(timestamps="seconds")
    v1, v3, v4 = (f"mllm_demo_data/{n}" for n in ("1.mp4", "3.mp4", "4.mp4"))
    # 1.mp4: 9.72 s. 00:09 and 00:10 (10 +- 0.5 reaches 9.72) are kept, 00:11 is not
    assert _answer(recipe, _record(v1, "At 00:09 and 00:10."), where) == (
        "At 9.0 seconds and 9.7 seconds."
    )
    with pytest.raises(SampleError, match="timestamp_outside: 00:11 is 11.0 s into a clip of 9.7"):
        recipe.process(_record(v1, "At 00:11."), path=str(where))
    # 3.mp4: 146 / 23.976 = 6.089 s. 6.1s is within 0.05 of it; 6.5 seconds is not
    assert _answer(recipe, _record(v3, "At 6.1s."), where) == "At 6.1 seconds."
    with pytest.raises(SampleError, match="timestamp_outside"):
        recipe.process(_record(v3, "After 6.5 seconds."), path=str(where))
    # 4.mp4: 150 frames at 30 fps, Qwen3-VL's rule at 2 fps: 10 frames, indices
    # 0 17 33 50 66 83 99 116 132 149; groups at 17/60=0.283, 83/60=1.383, 149/60=2.483,
    # 215/60=3.583, 281/60=4.683 s. 2.0 s snaps to 2.483 (0.483 away; 1.383 is 0.617 away)
    snap = _recipe(timestamps=Timestamps("qwen3-vl", snap=True))
    assert _answer(snap, _record(v4, "At 2.0s."), where) == "At 2.5 seconds."
    assert _answer(snap, _record(v4, "At 00:04."), where) == "At 3.6 seconds."
