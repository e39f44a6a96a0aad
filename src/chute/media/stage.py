"""The media stage: after the recipe, in the loader's workers, decode, transform and check.

The recipe counts image tokens from headers and records each image's resolved path and token
span; it never decodes pixels (so lengths passes and token caches stay cheap). The loader runs
this stage on every sample after the recipe, inside the same guarded step, so a bad image is a
counted skip with the record's ``path:line`` like any other bad sample::

    recipe(record) ──► sample {input_ids, images: [{path, span, num_tokens, ...}]}
                              │ MediaStage, per image:
                              │   store hit? ──► uint8 pixels        (pre-decoded, no JPEG)
                              │   else decode_image (guarded, full) ──► transform.prepare
                              │   transform.finish ──► pixels, grid_thw, num_features
                              │   check: tokens in input_ids == features, per image and total
                              ▼
                       sample + {pixel_values: [...], image_grid_thw: [...]}  ──► MediaCollate

A mismatch between the tokens in ``input_ids`` and the features the pixels give raises
``image_token_mismatch``: such a sample never reaches the model.

Example:
    >>> stage = MediaStage(ImageTransform(size=224, crop=224, tokens_per_image=4))  # doctest: +SKIP
    >>> loader = Loader("train.jsonl", recipe, batch_size=8, media=stage)  # doctest: +SKIP
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from chute._internal.spelling import spell_set
from chute.errors import ConfigError, SampleError
from chute.media.anyres import AnyresImageTokens
from chute.media.augment import Augment, SampleDraw
from chute.media.images import DecodeOptions, decode_image
from chute.media.inline import is_inline, local_copy
from chute.media.paths import is_remote
from chute.media.processor import ProcessorTransform
from chute.media.remote import RemoteMedia
from chute.media.tiles import AnyresTransform, check_anyres_rule
from chute.media.tokens import DynamicImageTokens, FixedImageTokens
from chute.media.transforms import DynamicResolution, ImageFeatures, ImageTransform

__all__ = ["DEFAULT_TRANSFORMS", "MediaStage", "as_media_stage", "default_media_stage"]

# Sample keys the stage adds (transformers' names for Qwen2-VL / LLaVA inputs).
OUTPUT_KEYS = {
    "image": ("pixel_values", "image_grid_thw"),
    "video": ("pixel_values_videos", "video_grid_thw"),
    "audio": ("audio_values", None),
}
_REFS = {"image": "images", "video": "videos", "audio": "audios"}


@dataclasses.dataclass
class MediaStage:
    """Loads the media of a sample: images (and videos, audio clips) to model inputs.

    Args:
        image: ``ImageTransform`` (fixed size), ``DynamicResolution`` (Qwen2-VL),
            ``AnyresTransform`` (LLaVA-NeXT / OneVision tiles), a ``ProcessorTransform`` or any
            callable ``fn(image) -> array`` (wrapped in one).
        decode: decoding limits and conversions (``DecodeOptions``: ``max_pixels``,
            ``max_bytes``, ``background``).
        video: a ``VideoFrames`` (``pip install 'chute[video]'``), for samples with videos.
        audio: an ``AudioClips`` (``pip install 'chute[audio]'``), for samples with audio.
        store: a ``PixelStore`` of pre-decoded pixels; images it holds are not decoded.
            ``None`` (default): a Loader over a cache built with ``--pixels`` fills in the
            cache's store; ``False``: decode every image even then.
        fetch: ``fetch(url) -> bytes`` for URL references (with ``Recipe(allow_urls=True)``);
            chute itself fetches only under a remote media root (``remote``).
        remote: the fetcher of media under remote media roots (``RemoteMedia``); filled in
            from the recipe's media roots by ``bind``.
        token_ids: kind -> the token id marking that kind in ``input_ids``; filled in from the
            recipe by ``bind`` (the Loader calls it).
        augment: an ``Augment`` (random resized crop, flip, colour jitter, a torchvision v2
            transform) applied to the prepared pixels, after the pixel store and before
            ``finish``, drawn from each sample's ``SampleDraw`` (the Loader gives it; without
            one the pixels are left clean). Needs an ``ImageTransform`` or
            ``DynamicResolution``.
    """

    image: Any = None
    decode: DecodeOptions = dataclasses.field(default_factory=DecodeOptions)
    video: Any = None
    audio: Any = None
    store: Any = None
    fetch: Callable[[str], bytes] | None = None
    remote: RemoteMedia | None = None
    token_ids: Mapping[str, int] | None = None
    fixed_tokens: int | None = None
    augment: Augment | None = None

    def __post_init__(self) -> None:
        if self.image is not None and not isinstance(
            self.image, ImageTransform | DynamicResolution | AnyresTransform | ProcessorTransform
        ):
            if not callable(self.image):
                raise ConfigError(
                    f"expected ImageTransform, DynamicResolution, ProcessorTransform or "
                    f"a callable, got {type(self.image).__name__}",
                    param="image",
                )
            self.image = ProcessorTransform(self.image)
        if not isinstance(self.decode, DecodeOptions):
            raise ConfigError(
                f"expected chute.media.DecodeOptions, got {type(self.decode).__name__}",
                param="decode",
            )
        if self.has_store and not hasattr(self.image, "prepare"):
            raise ConfigError(
                "a pixel store keeps the output of a transform's geometry step; "
                "ProcessorTransform has none, use ImageTransform or DynamicResolution",
                param="store",
            )
        if self.has_store:
            self.store.check_transform(self.image)
        if self.augment is not None:
            if not isinstance(self.augment, Augment):
                raise ConfigError(
                    f"expected a chute.media.augment.Augment, got {type(self.augment).__name__}",
                    param="augment",
                )
            if not isinstance(self.image, ImageTransform | DynamicResolution):
                raise ConfigError(
                    f"augmentation works on the prepared pixels of an ImageTransform or a "
                    f"DynamicResolution, not a {type(self.image).__name__}",
                    param="augment",
                )

    @property
    def has_store(self) -> bool:
        """Whether images are read from a pixel store (``store`` is neither ``None`` nor False)."""
        return self.store is not None and self.store is not False

    # -- configuration -----------------------------------------------------------------------

    def bind(self, recipe: Any) -> MediaStage:
        """A copy that knows the recipe's media token ids and checks its counting rule.

        Raises:
            ConfigError: the transform would produce a different number of features than the
                recipe counts tokens (a dynamic transform with a fixed rule, other patch sizes,
                another fixed count).
        """
        # ``recipe`` meets chute.recipe.contract.RecipeContract (the Loader checked it), or is
        # None: samples read from a cache
        plan = recipe.media if recipe is not None else None
        if plan is None:
            return self
        rule = plan.image_rule
        _check_rule(self.image, rule)
        ids = dict(self.token_ids or {})
        for kind in ("image", "video", "audio"):
            if kind not in ids:
                # A vocabulary without the token: the recipe refuses such media anyway.
                with contextlib.suppress(ConfigError):
                    ids[kind] = plan.token_id(kind)
        fixed = rule.tokens if isinstance(rule, FixedImageTokens) else None
        remote = self.remote
        if remote is None and self.fetch is None:
            remote = RemoteMedia(plan.paths, max_bytes=self.decode.max_bytes)
        return dataclasses.replace(self, token_ids=ids, fixed_tokens=fixed, remote=remote)

    # -- per sample ----------------------------------------------------------------------------

    def __call__(self, sample: Mapping[str, Any], draw: SampleDraw | None = None) -> dict[str, Any]:
        """``sample`` plus its media inputs (a new dict; ``sample`` is not modified).

        ``draw``: the sample's augmentation key; with ``augment``, its images are augmented.

        Raises:
            SampleError: the decoder's kinds, ``image_token_mismatch`` (and video/audio ones).
            ConfigError: the sample has a kind of media this stage has no loader for.
        """
        out = dict(sample)
        for kind, refs_key in _REFS.items():
            refs = sample.get(refs_key) or ()
            if not refs:
                continue
            loader = getattr(self, kind)
            if loader is None:
                raise ConfigError(
                    f"the data has {refs_key} but the media stage has no {kind}=...; pass "
                    f"MediaStage({kind}=...) to load them"
                )
            if len(refs) > 1 and hasattr(loader, "for_images"):  # OneVision pads several images
                loader = loader.for_images(len(refs))
            where = sample.get("path")
            moves = None
            if kind == "image" and draw is not None and self.augment is not None:
                moves = (draw, not sample.get("no_flip"))
            feats = [self._load(kind, loader, ref, where, moves, i) for i, ref in enumerate(refs)]
            self._check(kind, sample["input_ids"], refs, feats)
            values_key, grid_key = OUTPUT_KEYS[kind]
            out[values_key] = [f.pixels for f in feats]
            if grid_key is not None and feats[0].grid_thw is not None:
                out[grid_key] = [f.grid_thw for f in feats]
            if getattr(feats[0], "image_size", None) is not None:  # anyres (media.tiles)
                out["image_sizes"] = [f.image_size for f in feats]  # type: ignore[attr-defined]
        return out

    def _load(
        self,
        kind: str,
        loader: Any,
        ref: Mapping[str, Any],
        data_path: str | None,
        moves: tuple[SampleDraw, bool] | None = None,
        index: int = 0,
    ) -> ImageFeatures:
        path = ref["path"]
        remote = is_remote(path) and self.fetch is None and self.remote is not None
        if kind != "image":
            if is_inline(path):  # a data: URL or a tar member: decoders read files
                return loader(local_copy(path, kind, self.decode.max_bytes))
            if remote:
                return loader(self.remote.local(path, data_path, kind))  # type: ignore[union-attr]
            return loader(path)
        if self.has_store and loader is self.image:  # (not a OneVision multi-image square)
            pixels = self.store.get(path)
            if pixels is not None:
                return loader.finish(self._augment(pixels, moves, index))
        source: Any = path
        if is_remote(path) and self.fetch is not None:
            source = self.fetch(path)
        elif remote:
            source = self.remote.read(path, data_path)  # type: ignore[union-attr]
        try:
            image = decode_image(source, self.decode)
        except SampleError as exc:
            if not isinstance(source, bytes) or "<bytes>" not in exc.message:
                raise
            raise SampleError(exc.kind, exc.message.replace("<bytes>", path)) from None
        if moves is not None:
            return loader.finish(self._augment(loader.prepare(image), moves, index))
        return loader(image)

    def _augment(
        self, pixels: np.ndarray, moves: tuple[SampleDraw, bool] | None, index: int
    ) -> np.ndarray:
        """Prepared pixels, augmented by the sample's draw (the clean ones without a draw)."""
        if moves is None or self.augment is None:
            return pixels
        draw, flip_ok = moves
        h, w = pixels.shape[:2]
        return self.augment.apply(pixels, draw.image(index, h, w, flip_ok))

    def _check(self, kind: str, ids: np.ndarray, refs: Any, feats: list[ImageFeatures]) -> None:
        token_id = (self.token_ids or {}).get(kind)
        total = 0
        for i, (ref, feat) in enumerate(zip(refs, feats, strict=True)):
            n = feat.num_features
            if n is None:
                n = self.fixed_tokens if kind == "image" and self.fixed_tokens else None
            start, end = ref["span"]
            # a Qwen3-VL video: its tokens are runs, one per frame group, between timestamps
            runs = ref.get("frame_spans") or [[start, end]]
            # a preference pair: the same tokens again, on the other side
            if "rejected_span" in ref:
                shift = int(ref["rejected_span"][0]) - int(start)
                runs = [*runs, *([a + shift, b + shift] for a, b in runs)]
                n = None if n is None else 2 * n
            held = sum(b - a for a, b in runs)
            if n is None:
                n = held  # nothing to compare with: trust the recipe's count
            if held != n or (
                token_id is not None
                and not all(bool((ids[a:b] == token_id).all()) for a, b in runs)
            ):
                where = "" if token_id is None else f" of token id {token_id}"
                raise SampleError(
                    f"{kind}_token_mismatch",
                    f"{kind} {i} ({ref['path']}): input_ids holds {held} tokens{where} "
                    f"at [{start}, {end}) but the {kind} gives {n} features"
                    + _size_note(ref, feat)
                    + "; the file changed since the sample was counted, or the recipe's "
                    f"{kind} token rule does not match the media stage's transform",
                )
            total += n
        if token_id is not None:
            found = int(np.count_nonzero(ids == token_id))
            if found != total:
                raise SampleError(
                    f"{kind}_token_mismatch",
                    f"input_ids holds {found} {kind} tokens (id {token_id}) but the sample's "
                    f"{len(feats)} {kind}(s) give {total} features; a {kind} token outside the "
                    f"recorded spans (written in the text, or a sample built elsewhere)",
                )

    def fingerprint(self) -> dict[str, Any]:
        """What shapes the model inputs: transform, decoding options (JSON-able)."""
        out: dict[str, Any] = {"decode": dataclasses.asdict(self.decode)}
        if self.augment is not None:
            out["augment"] = self.augment.fingerprint()
        for kind in ("image", "video", "audio"):
            loader = getattr(self, kind)
            if loader is not None:
                out[kind] = loader.fingerprint() if hasattr(loader, "fingerprint") else repr(loader)
        return out


def _size_note(ref: Mapping[str, Any], feat: ImageFeatures) -> str:
    size, grid = ref.get("grid_thw"), feat.grid_thw
    if size is not None and grid is not None and list(grid) != list(size):
        return f" (grid {list(grid)} now, {list(size)} when counted)"
    return ""


def _check_rule(transform: Any, rule: Any) -> None:
    if transform is None or rule is None or isinstance(transform, ProcessorTransform):
        return
    if isinstance(transform, AnyresTransform) or isinstance(rule, AnyresImageTokens):
        check_anyres_rule(transform, rule)
        return
    if isinstance(transform, DynamicResolution):
        if not isinstance(rule, DynamicImageTokens):
            raise ConfigError(
                f"the recipe counts a fixed {rule.tokens} tokens per image but the "
                f"media stage's DynamicResolution gives a count per image size; pass "
                f"Recipe(image_tokens=transform.rule()) or a fixed ImageTransform",
                param="media",
            )
        want = transform.rule()
        diffs = [
            f"{name}: recipe {getattr(rule, name)}, transform {getattr(want, name)}"
            for name in ("patch_size", "merge_size", "min_pixels", "max_pixels")
            if getattr(rule, name) != getattr(want, name)
        ]
        if diffs:
            raise ConfigError(
                "the recipe's image token rule and the DynamicResolution transform "
                f"differ ({'; '.join(diffs)}), so token counts would not match the patches; "
                "pass Recipe(image_tokens=transform.rule())",
                param="media",
            )
        return
    if isinstance(rule, DynamicImageTokens):
        raise ConfigError(
            "the recipe counts image tokens from each image's size (a dynamic rule) but "
            "the media stage's ImageTransform makes every image the same size; use "
            "DynamicResolution(...) with the same patch_size, merge_size, min_pixels, max_pixels",
            param="media",
        )
    per_image = transform.tokens_per_image
    if per_image is not None and per_image != rule.tokens:
        raise ConfigError(
            f"the recipe writes {rule.tokens} tokens per image but the ImageTransform's "
            f"tokens_per_image is {per_image}; make them equal (LLaVA-1.5 with CLIP-336: 576)",
            param="media",
        )


def as_media_stage(media: Any) -> MediaStage:
    """``media`` as a ``MediaStage``: a stage, or a transform that gets default decoding."""
    if isinstance(media, MediaStage):
        return media
    return MediaStage(image=media)


# The transform a model family uses, by its fixed image-token count (see default_media_stage).
DEFAULT_TRANSFORMS: dict[int, tuple[str, Callable[[], Any]]] = {
    576: (
        "LLaVA-1.5's CLIP-336: padded to a square on the mean colour, 336 x 336, CLIP "
        "normalisation",
        lambda: ImageTransform(size=336, crop=336, pad_to_square=True, tokens_per_image=576),
    ),
    256: (
        "Qwen-VL's: resized to 448 x 448 (bicubic), CLIP normalisation",
        lambda: ImageTransform(size=(448, 448), crop=None, tokens_per_image=256),
    ),
}


def default_media_stage(rule: Any, video: Any = None, audio: Any = None) -> MediaStage:
    """The media stage matching a recipe's image-token rule: what ``Loader`` uses without ``media=``.

    So samples that reference images always get their pixels (and bad images are counted skips).

    ====================================  =========================================================
    ``Recipe(image_tokens=...)``          default transform
    ====================================  =========================================================
    ``576`` / ``"llava-1.5"``             ``ImageTransform(size=336, crop=336, pad_to_square=True,
                                          tokens_per_image=576)`` (LLaVA-1.5, CLIP-336)
    ``256`` / ``"qwen-vl"``               ``ImageTransform(size=(448, 448), tokens_per_image=256)``
    ``"qwen2-vl"``, ``"qwen2.5-vl"``,     ``DynamicResolution`` with the rule's patch size, merge
    a ``DynamicImageTokens``              size and pixel bounds (CLIP normalisation; SigLIP's for
                                          16-pixel patches, Qwen3-VL)
    ``"llava-onevision"``,                ``AnyresTransform(rule)``: tiles of the rule's side and
    ``"llava-next"``, an                  grids (SigLIP normalisation for 384-pixel tiles,
    ``AnyresImageTokens``                 OneVision; CLIP's otherwise, LLaVA-NeXT)
    ====================================  =========================================================

    Videos and audio clips counted by a ``VideoFrames`` / ``AudioClips`` are loaded by it.

    Raises:
        ConfigError: a fixed count with no known model family: the message names ``media=``
            and ``media=False``.

    Example:
        >>> from chute.media.tokens import image_tokens_rule
        >>> default_media_stage(image_tokens_rule("llava-1.5")).image.output_size
        (336, 336)
    """
    if isinstance(rule, DynamicImageTokens):
        image: Any = DynamicResolution(
            patch_size=rule.patch_size,
            merge_size=rule.merge_size,
            min_pixels=rule.min_pixels,
            max_pixels=rule.max_pixels,
            normalize="siglip" if rule.patch_size == 16 else "clip",
        )
    elif isinstance(rule, AnyresImageTokens):
        image = AnyresTransform(rule, normalize="siglip" if rule.image_size == 384 else "clip")
    elif isinstance(rule, FixedImageTokens) and rule.tokens in DEFAULT_TRANSFORMS:
        image = DEFAULT_TRANSFORMS[rule.tokens][1]()
    else:
        tokens = getattr(rule, "tokens", rule)
        raise ConfigError(
            f"the recipe counts {tokens} tokens per image ({spell_set('image_tokens', tokens)}) "
            f"but no media stage was given, and no default transform makes {tokens} features; pass "
            f"media=MediaStage(ImageTransform(..., tokens_per_image={tokens})) to load the "
            f"images, or media=False to train on the text alone (the image tokens then stand "
            f"for no pixels)"
        )
    # a VideoFrames / AudioClips both counts tokens (the recipe) and loads (the stage)
    frames = video if hasattr(video, "fingerprint") else None
    clips = audio if hasattr(audio, "fingerprint") else None
    return MediaStage(image=image, video=frames, audio=clips)
