"""Media references of a sample: where each file is, which token marks it, how many tokens.

``MediaPlan`` holds a recipe's media options and turns the media parts of a rendered
conversation into ``MediaSlot`` values (token id, token count, and what the sample records about
the item), reading at most an image's header. Every reference is resolved by ``MediaPaths``
(inside its media root, URLs refused unless allowed); decoding pixels is the media stage's work
(``chute.media.stage``), after the recipe.

Example:
    >>> plan = MediaPlan(tok, image_tokens=576, media_root="/data/images")  # doctest: +SKIP
    >>> plan.resolve("cats/1.jpg", "/data/train.jsonl")  # doctest: +SKIP
    '/data/images/cats/1.jpg'
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from typing import Any

from chute._internal.files import warn_once
from chute._internal.spelling import spell, spell_set, spell_value
from chute.errors import ConfigError, SampleError
from chute.media.images import DEFAULT_MAX_PIXELS
from chute.media.inline import is_inline, local_copy
from chute.media.paths import MediaPaths, is_remote
from chute.media.remote import RemoteMedia
from chute.media.sizes import image_size
from chute.media.tokens import DynamicImageTokens, image_tokens_rule
from chute.media.video_layout import qwen3_video_ids, video_layout
from chute.media.video_spec import video_tokens_rule
from chute.sample.conversation import Part
from chute.tokenize.base import Tokenizer

log = logging.getLogger("chute.media")

__all__ = ["MediaPlan", "MediaSlot"]


@dataclass(slots=True)
class MediaSlot:
    """One media item to expand: its kind, token id, token count and what to record about it.

    ``ids``: the item's whole expansion when it is more than ``count`` copies of ``token_id``
    (a Qwen3-VL video: timestamps and vision markers around each frame group's tokens).
    """

    kind: str
    token_id: int
    count: int
    info: dict[str, Any] = field(default_factory=dict)
    ids: Any = None


class MediaPlan:
    """A recipe's media options: tokens, ids, counts per item, path resolution.

    Args:
        tokenizer: the recipe's tokenizer (for token ids and the default image token).
        image_tokens: a count, a preset or a rule (see ``image_tokens_rule``); ``"auto"`` (the
            default): Qwen2-VL's counts when the image token is ``<|image_pad|>`` (without its
            model family: batches keep 1-D positions), else ``llava-1.5`` (576); ``None`` makes
            the first image a ``ConfigError``.
        image_token: the token marking an image (default: the tokenizer's, else ``<image>``).
        image_token_id: the id written for it (default: the token's id).
        video_token / audio_token: the tokens marking a video / an audio clip.
        video_tokens: fixed tokens per video, a ``VideoFrames`` (counts from the header), its
            fields or short form (``fps``, ``fps=1,max_frames=64``, ``frames=8``: the image
            rule's family preset, see ``chute.media.video_spec``), or ``None``.
        audio_tokens: fixed tokens per audio clip, an ``AudioClips`` (counts from the header),
            or ``None``.
        media_root: folder for relative paths (default: the data file's folder), or a mapping
            from data file (or glob) to folder; see ``MediaPaths``.
        check_images: with a fixed count, reject a missing image file.
        allow_urls: keep URL references (fixed counts only; chute fetches nothing).
        max_image_pixels: refuse images larger than this where the header is read
            (``image_too_large``), as the media stage's decoder does.
        allowed_roots: further folders references may resolve into (see ``MediaPaths``).
    """

    def __init__(
        self,
        tokenizer: Tokenizer,
        *,
        image_tokens: Any = "auto",
        image_token: str | None = None,
        image_token_id: int | None = None,
        video_tokens: Any = None,
        audio_tokens: Any = None,
        video_token: str | None = None,
        audio_token: str | None = None,
        media_root: Any = None,
        check_images: bool = True,
        allow_urls: bool = False,
        max_image_pixels: int = DEFAULT_MAX_PIXELS,
        allowed_roots: Any = (),
    ):
        self.audio_tokens = _count_or_none(audio_tokens, "audio_tokens")
        if image_token_id is not None and (
            not isinstance(image_token_id, int) or isinstance(image_token_id, bool)
        ):
            raise ConfigError(
                f"expected an integer, got {spell_value(image_token_id)}", param="image_token_id"
            )
        self.image_token_id = image_token_id
        self.paths = MediaPaths(media_root, allow_urls=allow_urls, allowed_roots=allowed_roots)
        self._remote: RemoteMedia | None = None
        self.check_images = bool(check_images)
        if (
            isinstance(max_image_pixels, bool)
            or not isinstance(max_image_pixels, int)
            or max_image_pixels < 1
        ):
            raise ConfigError(
                f"expected a positive integer, got {spell_value(max_image_pixels)}",
                param="max_image_pixels",
            )
        self.max_image_pixels = max_image_pixels
        self.tokenizer = tokenizer
        self.tokens, self.text = _markup(tokenizer, image_token, video_token, audio_token)
        if image_tokens == "auto":  # Qwen2-VL's rule for Qwen vision vocabularies, else LLaVA's
            # the counts only: no model family (3-D positions would break the text models that
            # share Qwen's vocabulary, Qwen3 among them); a Qwen-VL run names its family
            qwen = self.tokens["image"] == "<|image_pad|>"
            image_tokens = DynamicImageTokens() if qwen else "llava-1.5"
        # said at the first image counted (text-only data never meets the rule)
        self._llama_vision = image_tokens == "llava-1.5" and self.tokens["image"] == "<|image|>"
        self.image_rule = image_tokens_rule(image_tokens)
        family = getattr(self.image_rule, "family", None)
        # a short form (fps=2) or fields resolve with the family's preset (chute.media.video)
        self.video_tokens = video_tokens_rule(video_tokens, family)
        self.video_layout = video_layout(family, self.video_tokens)
        self._stamps: dict[str, list[int]] = {}  # Qwen3-VL's encoded timestamps
        # Media tokens that are special tokens: written literally in a text they would pose as
        # an image, so a text-only sample holding one is rejected.
        self.guard = tuple(t for t in self.tokens.values() if tokenizer.token_to_id(t) is not None)

    @property
    def media_root(self) -> str | None:
        """The one folder every source's relative paths resolve against (``None``: per file)."""
        return self.paths.default

    def resolve(self, source: str, data_path: str | None) -> str:
        """Where a media source points: its real path inside its media root.

        Raises:
            SampleError: ``unsafe_path``, ``url_not_allowed`` (see ``MediaPaths.resolve``).
        """
        return self.paths.resolve(source, data_path)

    def slots(self, media: list[Part], data_path: str | None) -> list[MediaSlot]:
        """The expansion of each media part, in order.

        Raises:
            SampleError: ``unsafe_path``, ``url_not_allowed``, ``image_missing``,
                ``image_corrupt``, ``image_unsupported``, ``image_too_large``.
            ConfigError: a kind without a token count, or a token without an id.
        """
        out = []
        images = sum(part.kind == "image" for part in media)
        for part in media:
            resolved = self.resolve(part.value, data_path)
            info: dict[str, Any] = {"source": part.value, "path": resolved}
            if part.kind == "image":
                count, size, grid = self._image_count(resolved, data_path, images)
                token_id = self._token_id("image", "image_token_id", self.image_token_id)
                info.update(num_tokens=count, size=size, grid_thw=grid)
            else:
                rule = self.video_tokens if part.kind == "video" else self.audio_tokens
                count = rule
                extra: dict[str, Any] = {"size": None, "grid_thw": None}
                if rule is not None and not isinstance(rule, int):
                    local = resolved
                    if is_inline(resolved):  # a data: URL or a tar member: a local copy
                        local = local_copy(resolved, part.kind)
                    elif self.paths.fetchable(resolved, data_path):
                        local = self.remote.local(resolved, data_path, part.kind)
                    elif is_remote(resolved):
                        raise SampleError(
                            "url_not_allowed",
                            f"{resolved}: counting {part.kind} tokens needs the local file",
                        )
                    count, found = rule.count_tokens(local)
                    extra.update(found)
                if count is None:
                    how = f"tokens per {part.kind}, e.g. {spell_set(f'{part.kind}_tokens', 64)}"
                    if part.kind == "video":  # what Qwen-VL does: frames sampled at a rate
                        how = (
                            f"{spell_set('video_tokens', 'fps')} to sample frames at a rate as "
                            f"Qwen2/2.5/3-VL do, or a count of {how}"
                        )
                    raise ConfigError(
                        f"the data has {part.kind}s ({part.value}) but no token count per "
                        f"{part.kind} is set; pass {spell(f'{part.kind}_tokens')} ({how})",
                        param=f"{part.kind}_tokens",
                    )
                token_id = self._token_id(part.kind, None, None)
                info.update(num_tokens=count, **extra)
                if part.kind == "video":
                    ids = self._video_ids(info, count, token_id)
                    out.append(MediaSlot(part.kind, token_id, count, info, ids))
                    continue
            out.append(MediaSlot(part.kind, token_id, count, info))
        return out

    def _video_ids(self, info: dict[str, Any], count: int, token_id: int) -> Any:
        """The video's own expansion in the recipe's layout (``None``: ``count`` video tokens).

        Keys a video entry has only when known (``second_per_grid_t``; ``frame_spans`` and
        ``timestamps`` in Qwen3-VL's layout) are left out when not.
        """
        times = info.pop("timestamps", None)
        if info.get("second_per_grid_t", 0) is None:
            del info["second_per_grid_t"]
        if self.video_layout != "qwen3-vl":
            return None
        ids, spans = qwen3_video_ids(
            self.tokenizer, info.get("grid_thw"), times, count, token_id, self._stamps, info["path"]
        )
        info.update(frame_spans=spans, timestamps=times)
        return ids

    def _image_count(
        self, resolved: str, data_path: str | None, images: int = 1
    ) -> tuple[int, list[int] | None, list[int] | None]:
        rule: Any = self.image_rule
        if rule is None:
            raise ConfigError(
                f"the data has images but image tokens are turned off ({spell_value(None)}); pass "
                f"{spell_set('image_tokens', 576)} (LLaVA-1.5), 256 (Qwen-VL), "
                f"{spell_value('qwen2-vl')} (from each image's size) or {spell_value('auto')} (the default)",
                param="image_tokens",
            )
        if self._llama_vision:  # Llama 3.2's vocabulary under the auto rule
            warn_once(
                log,
                "image_tokens='auto' counts LLaVA-1.5's 576 tokens per image; the tokenizer's "
                "image token <|image|> is Llama 3.2 Vision's, which takes one <|image|> per image "
                "(its pixels are cross-attended): for that model pass %s",
                spell_set("image_tokens", 1),
            )
        if images > 1 and hasattr(rule, "in_sample"):  # OneVision pads the images of such samples
            rule = rule.in_sample(images)
        dynamic = bool(rule.needs_size)  # counted from the image's size (its header)
        if dynamic and is_remote(resolved) and self.paths.fetchable(resolved, data_path):
            # Under a remote media root: the header is read from a local copy (which the
            # media stage then decodes without fetching again). A fixed count reads nothing.
            w, h = image_size(self.remote.local(resolved, data_path))
            return self._dynamic_count(rule, resolved, w, h)
        if is_remote(resolved):  # allow_urls=True or a remote root, else resolve() refused it
            if dynamic:
                raise SampleError(
                    "url_not_allowed",
                    f"{resolved}: a dynamic image-token rule needs the image's size, and chute "
                    f"never fetches URLs; download the image, or use a fixed image_tokens",
                )
        elif (
            not is_inline(resolved)
            and (self.check_images or dynamic)
            and not os.path.isfile(resolved)
        ):
            if os.path.isdir(resolved):  # there, but not a file: said so, not "no such file"
                raise SampleError("image_missing", f"{resolved}: a directory, not an image file")
            if os.path.exists(resolved):  # a FIFO, a socket, a device
                raise SampleError(
                    "image_unsupported", f"{resolved}: not a regular file, not an image file"
                )
            where = self.paths.describe_root(data_path)
            above = self.paths.root_above(resolved, data_path)
            fix = (
                f"the path is there under {above}: set {spell_set('media_root', above)}"
                if above is not None
                else f"set {spell('media_root')} if they are relative to another folder"
            )
            if data_path is not None and data_path.endswith(
                ".tar"
            ):  # a shard's record names a member it does not hold
                name = os.path.basename(resolved)
                raise SampleError(
                    "image_missing",
                    f"{os.path.basename(data_path)} holds no member {name} for this sample, "
                    f"and no file {resolved} is beside it ({fix})",
                )
            raise SampleError(
                "image_missing",
                f"{resolved}: no such file (relative paths resolve against {where}; {fix})",
            )
        if dynamic:
            w, h = image_size(resolved)
            return self._dynamic_count(rule, resolved, w, h)
        return rule.count(None)[0], None, None

    def _dynamic_count(
        self, rule: Any, resolved: str, w: int, h: int
    ) -> tuple[int, list[int] | None, list[int] | None]:
        if w * h > self.max_image_pixels:
            raise SampleError(
                "image_too_large",
                f"{resolved}: {w}x{h} = {w * h:,} pixels, more than max_image_pixels="
                f"{self.max_image_pixels:,}",
            )
        count, grid = rule.count((w, h))
        return count, [w, h], list(grid) if grid is not None else None

    @property
    def remote(self) -> RemoteMedia:
        """The fetcher of media under remote media roots (made on first use)."""
        if self._remote is None:
            self._remote = RemoteMedia(self.paths)
        return self._remote

    def token_id(self, kind: str = "image") -> int:
        """The id written for one ``kind`` token (``image``, ``video``, ``audio``).

        Raises:
            ConfigError: the token is not in the vocabulary and no id was given.
        """
        if kind == "image":
            return self._token_id("image", "image_token_id", self.image_token_id)
        return self._token_id(kind, None, None)

    def _token_id(self, kind: str, option: str | None, given: int | None) -> int:
        if given is not None:
            return given
        token = self.tokens[kind]
        token_id = self.tokenizer.token_to_id(token)
        if token_id is None:
            fix = (
                f"pass {spell(option)} (LLaVA's original code uses -200)"
                if option
                else "use a tokenizer that has it"
            )
            raise ConfigError(
                f"{kind} token {token!r} is not in the tokenizer's vocabulary; {fix}, or name "
                f"the {kind} token with {spell(f'{kind}_token')}"
            )
        return token_id

    def to_json(self) -> dict[str, Any]:
        rule = self.image_rule
        return {
            "image_tokens": rule.to_json() if rule is not None else None,
            "video_tokens": _rule_json(self.video_tokens),
            "audio_tokens": _rule_json(self.audio_tokens),
            "tokens": dict(self.tokens),
            "text": dict(self.text),
            "image_token_id": self.image_token_id,
            **self.paths.to_json(),
            "check_images": self.check_images,
            "max_image_pixels": self.max_image_pixels,
        }


def _markup(
    tok: Tokenizer,
    image_token: str | None,
    video_token: str | None = None,
    audio_token: str | None = None,
) -> tuple[dict[str, str], dict[str, str]]:
    """Per kind: the media token, and the text one item renders as.

    The text is the token, wrapped in Qwen's vision/audio markers when the vocabulary has them.
    """
    image = image_token or tok.special.get("image") or "<image>"
    has = tok.token_to_id
    tokens = {
        "image": image,
        "video": video_token
        or ("<|video_pad|>" if has("<|video_pad|>") is not None else "<video>"),
        "audio": audio_token or ("<|AUDIO|>" if has("<|AUDIO|>") is not None else "<audio>"),
    }
    vision = has("<|vision_start|>") is not None
    text = {}
    for kind, token in tokens.items():
        if vision and token in ("<|image_pad|>", "<|video_pad|>"):
            text[kind] = f"<|vision_start|>{token}<|vision_end|>"
        elif token == "<|AUDIO|>" and has("<|audio_bos|>") is not None:
            text[kind] = f"<|audio_bos|>{token}<|audio_eos|>"
        else:
            text[kind] = token
    return tokens, text


def _count_or_none(count: Any, name: str) -> Any:
    """A fixed count, ``None``, or a rule with ``count_tokens(path)`` (e.g. ``VideoFrames``)."""
    if count is None or callable(getattr(count, "count_tokens", None)):
        return count
    if not isinstance(count, int) or isinstance(count, bool) or count < 1:
        raise ConfigError(
            f"expected a positive number of tokens or {spell_value(None)}, got {spell_value(count)}",
            param=name,
        )
    return count


def _rule_json(rule: Any) -> Any:
    if rule is None or isinstance(rule, int):
        return rule
    return {"rule": type(rule).__name__, **rule.fingerprint()}
