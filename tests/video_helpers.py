"""Helpers for the video tests: synthetic videos, and the Qwen references runnable without torchvision.

The references (``qwen-vl-utils``, ``transformers``' Qwen2-VL / Qwen3-VL video processors) need
torchvision, which is not installable beside the CPU torch these tests run on. Only torchvision's
I/O and arithmetic primitives are stood in for, never the references' own logic:

* ``torchvision.io.read_video``: every frame decoded with PyAV and converted with
  ``frame.to_rgb().to_ndarray()``, which is what torchvision's PyAV backend does, with
  ``video_fps`` the stream's ``average_rate`` as torchvision reports it;
* ``torchvision.transforms.functional.resize``: Pillow's bicubic resize to the size the
  reference asked for (torchvision's antialiased bicubic kernel differs from Pillow's by a few
  uint8 levels; what the reference decides, the size, is compared exactly);
* ``torchvision.transforms.v2.functional.normalize``: ``(x - mean) / std`` per channel;
* the torchvision requirement of the video processor classes and ``ProcessorMixin``'s class
  check of them (``transformers`` registers video processors only with torchvision installed).
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import types
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import pytest


def make_video(
    path: Path, frames: int = 12, size: tuple[int, int] = (64, 48), fps: int = 4
) -> Path:
    """An MPEG-4 video of ``frames`` grey frames (frame k has brightness ``k * 20 % 256``)."""
    av = pytest.importorskip("av")
    with av.open(str(path), "w") as out:
        stream = out.add_stream("mpeg4", rate=fps)
        stream.width, stream.height = size
        stream.pix_fmt = "yuv420p"
        for k in range(frames):
            img = np.full((size[1], size[0], 3), k * 20 % 256, dtype=np.uint8)
            for packet in stream.encode(av.VideoFrame.from_ndarray(img, format="rgb24")):
                out.mux(packet)
        for packet in stream.encode():
            out.mux(packet)
    return path


def _normalize(x: Any, mean: Any, std: Any, inplace: bool = False) -> Any:
    import torch

    shape = (-1, 1, 1)
    return (x - torch.as_tensor(mean, dtype=x.dtype).view(shape)) / torch.as_tensor(
        std, dtype=x.dtype
    ).view(shape)


def _torchvision_stand_in() -> dict[str, types.ModuleType]:
    import av
    import torch
    from PIL import Image

    def read_video(path: str, start_pts: float = 0.0, end_pts: Any = None, **_: Any) -> Any:
        with av.open(path) as container:
            fps = float(container.streams.video[0].average_rate)
            frames = [f.to_rgb().to_ndarray() for f in container.decode(video=0)]
        video = torch.from_numpy(np.stack(frames)).permute(0, 3, 1, 2)
        return video, torch.empty(0), {"video_fps": fps}

    def resize(video: Any, size: Any, interpolation: Any = None, antialias: bool = True) -> Any:
        h, w = size
        out = [
            np.asarray(
                Image.fromarray(f.permute(1, 2, 0).numpy()).resize((w, h), Image.Resampling.BICUBIC)
            )
            for f in video
        ]
        return torch.from_numpy(np.stack(out)).permute(0, 3, 1, 2)

    class InterpolationMode:
        BICUBIC = "bicubic"

    tv = types.ModuleType("torchvision")
    tv.__version__ = "0.28.0"  # type: ignore[attr-defined]
    io = types.ModuleType("torchvision.io")
    io.read_video = read_video  # type: ignore[attr-defined]
    transforms = types.ModuleType("torchvision.transforms")
    transforms.InterpolationMode = InterpolationMode  # type: ignore[attr-defined]
    functional = types.ModuleType("torchvision.transforms.functional")
    functional.resize = resize  # type: ignore[attr-defined]
    v2 = types.ModuleType("torchvision.transforms.v2")
    f2 = types.ModuleType("torchvision.transforms.v2.functional")
    f2.InterpolationMode = InterpolationMode  # type: ignore[attr-defined]
    f2.normalize = _normalize  # type: ignore[attr-defined]
    tv.io, tv.transforms = io, transforms  # type: ignore[attr-defined]
    transforms.functional, transforms.v2, v2.functional = functional, v2, f2  # type: ignore[attr-defined]
    return {
        "torchvision": tv,
        "torchvision.io": io,
        "torchvision.transforms": transforms,
        "torchvision.transforms.functional": functional,
        "torchvision.transforms.v2": v2,
        "torchvision.transforms.v2.functional": f2,
    }


@contextmanager
def _stand_in(modules: dict[str, types.ModuleType]) -> Iterator[None]:
    saved = {k: sys.modules.get(k) for k in modules}
    sys.modules.update(modules)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                sys.modules.pop(k, None)
            else:
                sys.modules[k] = v


@contextmanager
def _torchvision_backend() -> Iterator[None]:
    """``transformers``' check that torchvision is installed passes (its classes then exist)."""
    from transformers.utils import import_utils

    mapping = import_utils.BACKENDS_MAPPING
    saved = mapping["torchvision"]
    mapping["torchvision"] = (lambda: True, saved[1])
    try:
        yield
    finally:
        mapping["torchvision"] = saved


class References:
    """``qwen_vl_utils.vision_process`` and ``transformers``' Qwen-VL processors, loaded once."""

    def __init__(self, patch: pytest.MonkeyPatch) -> None:
        pytest.importorskip("av")
        pytest.importorskip("torch")
        pytest.importorskip("transformers")
        if importlib.util.find_spec("qwen_vl_utils") is None:  # (importing it needs torchvision)
            pytest.skip("the reference is not installed: pip install qwen-vl-utils")
        import transformers  # before the stand-in: it must still see no torchvision
        import transformers.image_processing_backends as backends
        from transformers.models.qwen2_5_vl import processing_qwen2_5_vl
        from transformers.models.qwen2_vl import image_processing_pil_qwen2_vl
        from transformers.models.qwen3_vl import processing_qwen3_vl

        stand_in = _torchvision_stand_in()
        with _stand_in(stand_in):
            import qwen_vl_utils.vision_process as vision_process

            # the module itself: transformers' lazy package gives a placeholder without torchvision
            video_processing_qwen2_vl = importlib.import_module(
                "transformers.models.qwen2_vl.video_processing_qwen2_vl"
            )
        video_processing_qwen3_vl = importlib.import_module(
            "transformers.models.qwen3_vl.video_processing_qwen3_vl"
        )
        # transformers' fused rescale-and-normalise calls torchvision's normalize
        patch.setattr(backends, "tvF", stand_in["torchvision.transforms.v2.functional"], False)
        self.transformers = transformers
        self.vision_process = vision_process
        self.qwen2_vl_video = video_processing_qwen2_vl
        self.qwen3_vl_video = video_processing_qwen3_vl
        self.qwen3_vl = processing_qwen3_vl
        self.qwen2_5_vl = processing_qwen2_5_vl
        self.image_processor = image_processing_pil_qwen2_vl.Qwen2VLImageProcessorPil

    def video_processor(self, cls: Any, **kwargs: Any) -> Any:
        """An instance of a video processor class (they refuse to exist without torchvision)."""
        with _torchvision_backend():
            return cls(**kwargs)

    def processor(self, kind: str, tokenizer: Any) -> Any:
        """``Qwen2_5_VLProcessor`` or ``Qwen3VLProcessor`` with their default processors."""
        if kind == "qwen2.5-vl":
            cls, video, patch = (
                self.qwen2_5_vl.Qwen2_5_VLProcessor,
                self.video_processor(self.qwen2_vl_video.Qwen2VLVideoProcessor),
                14,
            )
        else:
            cls, video, patch = (
                self.qwen3_vl.Qwen3VLProcessor,
                self.video_processor(self.qwen3_vl_video.Qwen3VLVideoProcessor),
                16,
            )

        class Checked(cls):  # type: ignore[misc, valid-type]
            def check_argument_for_proper_class(self, name: str, arg: Any) -> Any:
                if name == "video_processor":  # a placeholder class without torchvision
                    return type(arg)
                return super().check_argument_for_proper_class(name, arg)

        return Checked(
            image_processor=self.image_processor(patch_size=patch),
            tokenizer=tokenizer,
            video_processor=video,
        )
