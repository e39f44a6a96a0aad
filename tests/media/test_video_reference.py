"""Video sampled at a rate equals Qwen's references on LLaMA-Factory's demo videos.

* Qwen2-VL / Qwen2.5-VL: ``qwen-vl-utils``' ``fetch_video`` (its own frame count, frame
  indices, pixel budget and ``sample_fps``), then ``transformers``' ``Qwen2_5_VLProcessor``
  (``input_ids``, ``video_grid_thw``, ``second_per_grid_ts``, ``pixel_values_videos``);
* Qwen3-VL: ``transformers``' ``Qwen3VLVideoProcessor`` (``sample_frames``, its 3-D
  ``smart_resize``) and ``Qwen3VLProcessor`` (the timestamped layout of ``input_ids``).

Where the references need torchvision (not installable here), ``video_helpers`` stands in for
its I/O and arithmetic primitives only (see there): frames are decoded with PyAV as
torchvision's PyAV backend does and resized with Pillow to the size the reference chose, so
pixel values are compared on the same resized frames (tolerance 1e-5; 4.8e-7 and 1.2e-7 seen).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
pytest.importorskip("av")

from transformers.video_utils import VideoMetadata  # noqa: E402

from chute import Loader, Recipe, World  # noqa: E402
from chute.media import DynamicResolution, MediaStage  # noqa: E402
from chute.media.video import VideoFrames  # noqa: E402
from video_helpers import References  # noqa: E402

pytestmark = [pytest.mark.shared_data, pytest.mark.slow]

VIDEOS = ("1.mp4", "2.avi", "3.mp4", "4.mp4")
PIXELS = 1e-5


@pytest.fixture(scope="module")
def refs() -> Any:
    with pytest.MonkeyPatch.context() as patch:
        yield References(patch)


@pytest.fixture(scope="module")
def data(shared_data: Path) -> dict[str, Any]:
    root = shared_data / "llama-factory"
    tokenizer = shared_data / "tokenizers" / "qwen3"
    records = json.loads((root / "mllm_video_demo.json").read_text())
    # 4.mp4 is in no record of the demo: one more, with the same conversation as the first
    records.append({**records[0], "videos": ["mllm_demo_data/4.mp4"]})
    return {
        "root": root,
        "tokenizer": tokenizer,
        "records": records,
        "hf": transformers.AutoTokenizer.from_pretrained(str(tokenizer)),
    }


def _reference_frames(refs: References, path: str, patch: int) -> tuple[Any, dict, float]:
    """qwen-vl-utils' frames (resized), their metadata and its sample_fps, as Qwen runs it."""
    (video, meta), sample_fps = refs.vision_process.fetch_video(
        {"video": path},
        image_patch_size=patch,
        return_video_sample_fps=True,
        return_video_metadata=True,
    )
    return video, meta, sample_fps


@pytest.mark.parametrize("name", VIDEOS)
@pytest.mark.parametrize("patch", [14, 16])
def test_fps_sampling_equals_qwen_vl_utils(
    refs: References, data: dict[str, Any], name: str, patch: int
) -> None:
    path = str(data["root"] / "mllm_demo_data" / name)
    transform = DynamicResolution(patch_size=patch, normalize="clip" if patch == 14 else "siglip")
    frames = VideoFrames.preset("qwen2.5-vl", transform=transform)
    video, meta, sample_fps = _reference_frames(refs, path, patch)
    s = frames.sampling(path)
    assert s.indices is not None and s.indices.tolist() == [int(i) for i in meta["frames_indices"]]
    assert s.size == tuple(video.shape[-2:])
    assert s.second_per_grid_t == 2 / sample_fps  # what Qwen2.5-VL's processor computes
    tokens, info = frames.count_tokens(path)
    n, h, w = video.shape[0], video.shape[2], video.shape[3]
    assert info["grid_thw"] == [n // 2, h // patch, w // patch]
    assert tokens == n // 2 * (h // patch) * (w // patch) // 4
    out = frames(path)  # the media stage decodes exactly the counted frames
    assert out.grid_thw == tuple(info["grid_thw"]) and out.num_features == tokens
    proc = refs.video_processor(
        refs.qwen2_vl_video.Qwen2VLVideoProcessor,
        patch_size=patch,
        image_mean=transform_mean(patch),
        image_std=transform_mean(patch, std=True),
    )
    theirs = proc(
        [video.to(torch.uint8)],
        do_sample_frames=False,
        do_resize=False,
        do_convert_rgb=False,
        return_tensors="pt",
    )
    assert theirs["video_grid_thw"][0].tolist() == info["grid_thw"]
    diff = (theirs["pixel_values_videos"] - torch.from_numpy(out.pixels)).abs().max().item()
    assert diff < PIXELS


def transform_mean(patch: int, std: bool = False) -> list[float]:
    from chute.media.transforms import NORMALIZE_PRESETS

    mean, sd = NORMALIZE_PRESETS["clip" if patch == 14 else "siglip"]
    return list(sd if std else mean)


def _recipe(data: dict[str, Any], family: str) -> Recipe:
    return Recipe(
        tokenizer=data["tokenizer"],
        template="qwen3",
        image_tokens=family,
        video_tokens="fps",
        media_root=data["root"],
    )


def test_qwen25_vl_samples_equal_the_processor(refs: References, data: dict[str, Any]) -> None:
    recipe = _recipe(data, "qwen2.5-vl")
    stage = MediaStage(video=recipe.media.video_tokens).bind(recipe)
    proc = refs.processor("qwen2.5-vl", data["hf"])
    for record in data["records"]:
        sample = recipe(record)
        [ref] = sample["videos"]
        video, meta, _ = _reference_frames(refs, ref["path"], 14)
        metadata = VideoMetadata(
            total_num_frames=meta["total_num_frames"],
            fps=meta["fps"],
            frames_indices=[int(i) for i in meta["frames_indices"]],
        )
        theirs = proc(
            text=[recipe.render(record).text],
            videos=[video.to(torch.uint8)],
            video_metadata=[metadata],
            do_sample_frames=False,
            do_resize=False,
            do_convert_rgb=False,
            return_metadata=True,
            return_tensors="pt",
        )
        assert theirs["input_ids"][0].tolist() == sample["input_ids"].tolist()
        assert theirs["video_grid_thw"][0].tolist() == ref["grid_thw"]
        seconds = theirs["second_per_grid_ts"]  # float32, as chute's batches carry it
        assert seconds.dtype == torch.float32
        assert seconds.tolist() == torch.tensor([ref["second_per_grid_t"]]).tolist()
        ours = torch.from_numpy(stage(sample)["pixel_values_videos"][0])
        assert (theirs["pixel_values_videos"] - ours).abs().max().item() < PIXELS


def _qwen3_reference(refs: References, path: str) -> tuple[Any, Any]:
    """Qwen3VLVideoProcessor's frames of ``path``: sampled and sized by it, decoded with PyAV."""
    import av
    from PIL import Image

    proc = refs.video_processor(refs.qwen3_vl_video.Qwen3VLVideoProcessor)
    with av.open(path) as container:  # the metadata transformers' PyAV reader builds
        stream = container.streams.video[0]
        metadata = VideoMetadata(
            total_num_frames=int(stream.frames),
            fps=float(stream.average_rate),
            width=stream.width,
            height=stream.height,
        )
        indices = proc.sample_frames(metadata)
        wanted = set(indices.tolist())
        decoded = {
            i: f.to_ndarray(format="rgb24")
            for i, f in enumerate(container.decode(video=0))
            if i in wanted
        }
    metadata.frames_indices = indices
    h, w = refs.qwen3_vl_video.smart_resize(
        len(indices),
        metadata.height,
        metadata.width,
        temporal_factor=proc.temporal_patch_size,
        factor=proc.patch_size * proc.merge_size,
        min_pixels=proc.size["shortest_edge"],
        max_pixels=proc.size["longest_edge"],
    )
    frames = np.stack(
        [
            np.asarray(Image.fromarray(decoded[i]).resize((w, h), Image.Resampling.BICUBIC))
            for i in indices.tolist()
        ]
    )
    return frames, metadata


def test_qwen3_vl_samples_equal_the_processor(refs: References, data: dict[str, Any]) -> None:
    recipe = _recipe(data, "qwen3-vl")
    frames = recipe.media.video_tokens
    assert frames.rule == "qwen3-vl" and frames.transform.patch_size == 16
    stage = MediaStage(video=frames).bind(recipe)
    proc = refs.processor("qwen3-vl", data["hf"])
    video_pad = recipe.tokenizer.token_to_id("<|video_pad|>")
    for record in data["records"]:
        sample = recipe(record)
        [ref] = sample["videos"]
        video, metadata = _qwen3_reference(refs, ref["path"])
        assert frames.sampling(ref["path"]).indices.tolist() == metadata.frames_indices.tolist()
        theirs = proc(
            text=[recipe.render(record).text],
            videos=[video],
            video_metadata=[metadata],
            do_sample_frames=False,
            do_resize=False,
            do_convert_rgb=False,
            return_metadata=True,
            cap_pixels_per_frame=False,
            return_tensors="pt",
        )
        assert theirs["input_ids"][0].tolist() == sample["input_ids"].tolist()
        assert theirs["video_grid_thw"][0].tolist() == ref["grid_thw"]
        t, h, w = ref["grid_thw"]
        expected = proc._calculate_timestamps(metadata.frames_indices, metadata.fps, 2)
        assert ref["timestamps"] == expected and len(ref["frame_spans"]) == t
        ids = sample["input_ids"]
        for a, b in ref["frame_spans"]:  # each group's pads, between its markers
            assert b - a == h * w // 4 and (ids[a:b] == video_pad).all()
            assert ids[a - 1] == recipe.tokenizer.token_to_id("<|vision_start|>")
            assert ids[b] == recipe.tokenizer.token_to_id("<|vision_end|>")
        ours = torch.from_numpy(stage(sample)["pixel_values_videos"][0])
        assert (theirs["pixel_values_videos"] - ours).abs().max().item() < PIXELS


@pytest.mark.parametrize("family", ["qwen2-vl", "qwen2.5-vl", "qwen3-vl"])
def test_video_positions_equal_get_rope_index(data: dict[str, Any], family: str) -> None:
    # the interface chute.media.positions reads: span and grid_thw, second_per_grid_t (Qwen2.5-VL's
    # time step: 1.08 s per group on 1.mp4, so a wrong value moves the positions), frame_spans
    from chute.media.positions import MRopePositions
    from qwen_vl_helpers import special_ids, tiny_model

    recipe = _recipe(data, family)
    model = tiny_model(family, special_ids(recipe))
    rule = MRopePositions(family)
    for record in data["records"]:
        sample = recipe(record)
        videos = sample["videos"]
        extra = {}
        if family == "qwen2.5-vl":
            extra["second_per_grid_ts"] = torch.tensor([v["second_per_grid_t"] for v in videos])
        theirs, _ = model.model.get_rope_index(
            torch.as_tensor(sample["input_ids"], dtype=torch.long)[None],
            torch.from_numpy(rule.token_types(sample))[None],
            video_grid_thw=torch.tensor([v["grid_thw"] for v in videos]),
            **extra,
        )
        np.testing.assert_array_equal(rule.positions(sample), theirs[:, 0].numpy())


def test_batches_carry_second_per_grid_ts(data: dict[str, Any]) -> None:
    recipe = _recipe(data, "qwen2.5-vl")
    source = data["root"] / "mllm_video_demo.json"
    loader = Loader(source, recipe, batch_size=3, shuffle=False, world=World(0, 1))
    [batch] = list(loader)
    seconds = [recipe(r)["videos"][0]["second_per_grid_t"] for r in data["records"][:3]]
    assert batch["second_per_grid_ts"].dtype == torch.float32
    assert batch["second_per_grid_ts"].tolist() == torch.tensor(seconds).tolist()
    assert batch["video_grid_thw"].tolist() == [[9, 26, 46], [9, 20, 28], [6, 26, 46]]
