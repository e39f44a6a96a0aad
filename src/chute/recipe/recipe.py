r"""``Recipe``: one record in, one training sample out (or a typed ``SampleError``).

A recipe composes a format adapter (record -> ``Conversation``), a chat template
(-> text + trained spans), a tokenizer (-> ids, labels), media token counts and ``max_length``::

    record ──format──► Conversation ──template──► Rendered ──tokenizer──► ids, labels ──► sample
    (bytes)  adapter   (roles, parts)  (text, spans)          media expanded    max_length

The sample is a plain dict (the loader and the cache rely on these keys):

==================  ==========================================================================
key                 value
==================  ==========================================================================
input_ids           ``np.int32`` array
labels              ``np.int32`` array, ``-100`` where not trained
length              ``len(input_ids)``
index, path, line   provenance of the record
images              per image: ``source`` (as written), ``path`` (resolved), ``span``
                    ``[start, end)`` in ``input_ids``, ``num_tokens``, ``size`` ``[w, h]`` and
                    ``grid_thw`` (dynamic rules; else ``None``)
videos, audios      the same for videos and audio clips (fixed counts)
num_image_tokens    total image tokens
truncated           whether ``max_length`` cut the sample
==================  ==========================================================================

Example:
    >>> recipe = Recipe(tokenizer="tokenizers/qwen3/tokenizer.json", template="qwen3",
    ...                 max_length=4096)  # doctest: +SKIP
    >>> sample = recipe({"instruction": "Say hi", "output": "Hi!"})  # doctest: +SKIP
    >>> tokenizer.decode(sample["input_ids"])  # doctest: +SKIP
    '<|im_start|>user\nSay hi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\nHi!<|im_end|>\n'
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from chute._internal.spelling import spell, spell_value
from chute.errors import ConfigError, SampleError
from chute.formats import FormatReader, FormatSpec
from chute.media.images import DEFAULT_MAX_PIXELS
from chute.media.refs import MediaPlan, MediaSlot
from chute.recipe.encode import Encoded, encode, fit_length
from chute.sample.conversation import Conversation
from chute.sources.record import Record
from chute.templates import RenderContext, Rendered, get_template
from chute.tokenize import Tokenizer, load_tokenizer

__all__ = ["OVERFLOW", "RECIPE_VERSION", "Recipe"]

# Bump when the same inputs would give different samples (the cache keys on it).
RECIPE_VERSION = 3  # 3: templates no longer read the clock (strftime_now is a fixed date)
OVERFLOW = ("truncate", "drop")


class Recipe:
    """Record -> training sample. Picklable (DataLoader workers, process pools) and cheap to call.

    Args:
        tokenizer: a ``tokenizer.json`` path, a tokenizer folder, a tiktoken BPE file, or a
            ``tokenizers`` / ``transformers`` tokenizer object (see ``chute.tokenize``).
        format: ``auto`` (each record detected from its keys), a format name (``alpaca``,
            ``prompt_completion``, ``sharegpt``, ``llava``, ``qwen_vl``, ``messages``,
            ``text``) or a ``FormatSpec``.
        template: a built-in name (``chatml``, ``qwen3``, ``llama3``, ``llama2``, ``mistral``,
            ``vicuna``, ``llava-v1``, ``alpaca``, ``raw``), a ``tokenizer_config.json`` or
            ``.jinja`` path, a Jinja string, or ``None``: the tokenizer's own chat template
            (``raw`` for ``format="text"``).
        max_length: longest sample in tokens, or ``None``.
        overflow: what ``max_length`` does to a longer sample: ``truncate`` (keep the start,
            never cutting an image) or ``drop`` (reject it as ``too_long``).
        train_on: ``assistant`` (every assistant turn), ``last`` (the last one) or ``all``.
        columns: record keys by meaning, e.g. ``{"prompt": "question"}`` (needs ``format``).
        tags: role and key names in message lists, e.g. ``{"user_tag": "Q"}`` (needs ``format``).
        placeholders: media placeholder text per kind, e.g. ``{"image": "<IMG_CONTEXT>"}``.
        system: system prompt for conversations without one.
        template_vars: extra variables for Jinja templates, e.g. ``{"enable_thinking": False,
            "date_string": "26 Jul 2024"}`` (in the fingerprint). Templates never read the
            clock: ``strftime_now`` formats 26 Jul 2024 (see docs/templates.md).
        special_tokens: overrides of ``bos``/``eos``/``pad``/``unk``/``image`` tokens.
        media_root: folder that relative media paths are resolved against (default: the folder
            of the record's data file), or a mapping from data file path (or glob) to folder.
            A reference that escapes its root (``..``, an absolute path elsewhere, a symlink
            pointing outside) is rejected as ``unsafe_path``.
        image_tokens: tokens per image: ``auto`` (the default: ``qwen2-vl`` when the image
            token is ``<|image_pad|>``, else 576), a count (``576``), a preset (``llava-1.5``,
            ``qwen-vl``, ``qwen2-vl``, ``qwen2.5-vl``), a ``DynamicImageTokens``, or ``None``
            (images are a ``ConfigError``). The same default everywhere: see docs/media.md,
            "Image tokens".
        image_token: the token that marks an image (default: the tokenizer's image token,
            e.g. ``<|image_pad|>``, else ``<image>``).
        image_token_id: the id written for image tokens (default: ``image_token``'s id; LLaVA's
            original code uses ``-200``).
        video_tokens: tokens per video: a fixed count, or a ``chute.media.video.VideoFrames``
            (counted from the container's header); required for videos.
        audio_tokens: tokens per audio clip: a fixed count, or a
            ``chute.media.audio.AudioClips`` (counted from the header); required for audio.
        check_images: with a fixed count, reject samples whose image file is missing. Dynamic
            counts always read the header.
        allow_urls: keep URL media references (fixed counts only) instead of rejecting them as
            ``url_not_allowed``; chute fetches nothing (the media stage needs ``fetch=``).
        max_image_pixels: reject images with more pixels where the header is read (dynamic
            counts) as ``image_too_large``.
        media_allowed_roots: further folders media references may resolve into through a
            symlink or an absolute path (e.g. where an ``images -> /mnt/coco`` link points).
        tiktoken_pattern: for tiktoken files whose rank count matches no preset.
    """

    def __init__(
        self,
        *,
        tokenizer: Any,
        format: str | FormatSpec = "auto",
        template: Any = None,
        max_length: int | None = None,
        overflow: str = "truncate",
        train_on: str = "assistant",
        columns: Mapping[str, str] | None = None,
        tags: Mapping[str, str] | None = None,
        placeholders: Mapping[str, str | None] | None = None,
        system: str | None = None,
        template_vars: Mapping[str, Any] | None = None,
        special_tokens: Mapping[str, str | None] | None = None,
        media_root: Any = None,
        image_tokens: Any = "auto",
        image_token: str | None = None,
        image_token_id: int | None = None,
        video_tokens: Any = None,
        audio_tokens: Any = None,
        check_images: bool = True,
        allow_urls: bool = False,
        max_image_pixels: int = DEFAULT_MAX_PIXELS,
        media_allowed_roots: Any = (),
        tiktoken_pattern: str | None = None,
    ):
        self.tokenizer: Tokenizer = load_tokenizer(
            tokenizer, special_tokens=special_tokens, tiktoken_pattern=tiktoken_pattern
        )
        if isinstance(format, FormatSpec):
            if columns or tags or placeholders:
                raise ConfigError(
                    f"{spell('columns')}/{spell('tags')}/{spell('placeholders')}: put them in the "
                    f"FormatSpec you pass as {spell('format')}"
                )
            self.format = format
        else:
            self.format = FormatSpec(
                format, columns=columns or {}, tags=tags or {}, placeholders=placeholders or {}
            )
        if template is None and self.format.name == "text":
            template = "raw"
        self.template = get_template(template, self.tokenizer)
        if max_length is not None and (
            not isinstance(max_length, int) or isinstance(max_length, bool) or max_length < 1
        ):
            raise ConfigError(
                f"expected a positive integer or {spell_value(None)}, got {spell_value(max_length)}",
                param="max_length",
            )
        if overflow not in OVERFLOW:
            raise ConfigError(
                f"expected one of {', '.join(OVERFLOW)}, got {spell_value(overflow)}",
                param="overflow",
            )
        if system is not None and not isinstance(system, str):
            raise ConfigError(
                f"expected a string or {spell_value(None)}, got {type(system).__name__}",
                param="system",
            )
        self.max_length = max_length
        self.overflow = overflow
        self.system = system
        self.template_vars = dict(template_vars or {})
        self.media = MediaPlan(
            self.tokenizer,
            image_tokens=image_tokens,
            image_token=image_token,
            image_token_id=image_token_id,
            video_tokens=video_tokens,
            audio_tokens=audio_tokens,
            media_root=media_root,
            check_images=check_images,
            allow_urls=allow_urls,
            max_image_pixels=max_image_pixels,
            allowed_roots=media_allowed_roots,
        )
        self._reader = FormatReader(self.format)
        self._ctx = RenderContext(
            bos=self.tokenizer.bos_token,
            eos=self.tokenizer.eos_token,
            media_text=self.media.text,
            train_on=train_on,
            system=system,
            variables=self.template_vars,
            special=dict(self.tokenizer.special),
        )
        self.train_on = train_on

    # -- the pipeline ----------------------------------------------------------------------

    def __call__(self, record: Record | Any) -> dict[str, Any]:
        """The sample of a ``Record`` (or of an already-parsed record: a dict or list)."""
        if isinstance(record, Record):
            path, line = record.path, record.line
            try:
                return self._sample(record.data, path, line, record.index)
            except SampleError as exc:
                raise exc.with_location(path, line) from None
        return self.process(record)

    def process(
        self,
        data: Any,
        *,
        path: str | None = None,
        line: int | None = None,
        index: int | None = None,
    ) -> dict[str, Any]:
        """The sample of a parsed record (e.g. a dict); ``path`` also anchors media paths."""
        try:
            return self._sample(data, path, line, index)
        except SampleError as exc:
            if path is not None:
                exc.with_location(path, line)
            raise

    def batch(self, records: Iterable[Record | Any]) -> list[dict[str, Any] | SampleError]:
        """Samples of many records; a bad record gives its ``SampleError`` in its place.

        Same samples as one call per record, faster: the Python work (parse, convert, render)
        runs for all records first, then the tokenizer encodes every text back to back, so its
        tables stay in the CPU caches (a batch of 256 short records is ~10-15% faster on a busy
        machine). Use it where records come in groups: a DataLoader worker building a batch, a
        cache writer, a validation pass.

        Example:
            >>> out = recipe.batch(source[0:256])  # doctest: +SKIP
            >>> good = [s for s in out if not isinstance(s, SampleError)]  # doctest: +SKIP
        """
        out: list[Any] = []
        pending: list[tuple[int, Rendered, list[MediaSlot] | None, Any]] = []
        for record in records:
            where: tuple[str | None, int | None, int | None]
            if isinstance(record, Record):
                where = (record.path, record.line, record.index)
            else:
                where = (None, None, None)
            try:
                data = record.data if isinstance(record, Record) else record
                rendered = self.template.render(self._reader(data), self._ctx)
                slots = self.media.slots(rendered.media, where[0]) if rendered.media else None
            except SampleError as exc:
                out.append(exc.with_location(where[0], where[1]) if where[0] else exc)
                continue
            pending.append((len(out), rendered, slots, where))
            out.append(None)
        tok = self.tokenizer
        fast = tok.supports_offsets
        encoded = [
            tok.encode_spans(r.text, r.spans) if fast and not r.media else None
            for _, r, _, _ in pending
        ]
        for (k, rendered, slots, (path, line, index)), pre in zip(pending, encoded, strict=True):
            try:
                enc = encode(rendered, tok, self.media.tokens, slots, self.media.guard, pre=pre)
                out[k] = self._finish(enc, path, line, index)
            except SampleError as exc:
                out[k] = exc.with_location(path, line) if path else exc
        return out

    def format_of(self, record: Record | Any) -> str:
        """The format a record is read as (the detected one when ``format="auto"``)."""
        data = record.data if isinstance(record, Record) else record
        return self._reader.detect(data)

    def conversation(self, record: Record | Any) -> Conversation:
        """The canonical conversation of a record (format adapter only)."""
        data = record.data if isinstance(record, Record) else record
        return self._reader(data)

    def render(self, record: Record | Any) -> Rendered:
        """The rendered text and trained character spans of a record (before tokenizing)."""
        return self.template.render(self.conversation(record), self._ctx)

    def _sample(
        self, data: Any, path: str | None, line: int | None, index: int | None
    ) -> dict[str, Any]:
        conv = self._reader(data)
        rendered = self.template.render(conv, self._ctx)
        slots = self.media.slots(rendered.media, path) if rendered.media else None
        enc = encode(rendered, self.tokenizer, self.media.tokens, slots, self.media.guard)
        return self._finish(enc, path, line, index)

    def _finish(
        self, enc: Encoded, path: str | None, line: int | None, index: int | None
    ) -> dict[str, Any]:
        enc = fit_length(enc, self.max_length, self.overflow)
        images: list[dict[str, Any]] = []
        videos: list[dict[str, Any]] = []
        audios: list[dict[str, Any]] = []
        n_image_tokens = 0
        for item in enc.media:
            kind = item.pop("kind")
            if kind == "image":
                images.append(item)
                n_image_tokens += item["num_tokens"]
            elif kind == "video":
                videos.append(item)
            else:
                audios.append(item)
        return {
            "input_ids": enc.ids,
            "labels": enc.labels,
            "length": len(enc.ids),
            "index": index,
            "path": path,
            "line": line,
            "images": images,
            "videos": videos,
            "audios": audios,
            "num_image_tokens": n_image_tokens,
            "truncated": enc.truncated,
        }

    @property
    def media_root(self) -> str | None:
        """The folder relative media paths resolve against (``None``: the data file's)."""
        return self.media.media_root

    def resolve_media(self, source: str, data_path: str | None) -> str:
        """Where a media source points (see ``MediaPlan.resolve``).

        Example:
            >>> recipe.resolve_media("imgs/1.jpg", "/data/train.jsonl")  # doctest: +SKIP
            '/data/imgs/1.jpg'
        """
        return self.media.resolve(source, data_path)

    # -- identity --------------------------------------------------------------------------

    def fingerprint(self) -> dict[str, Any]:
        """Everything that shapes the samples, JSON-able; a cache keys on it field by field.

        Example:
            >>> sorted(recipe.fingerprint())  # doctest: +SKIP
            ['format', 'max_length', 'media', 'overflow', 'recipe_version', 'system', ...]
        """
        return {
            "recipe_version": RECIPE_VERSION,
            "format": self.format.to_json(),
            "template": self.template.spec(),
            "template_vars": {k: _jsonable(v) for k, v in sorted(self.template_vars.items())},
            "system": self.system,
            "train_on": self.train_on,
            "max_length": self.max_length,
            "overflow": self.overflow,
            "tokenizer": self.tokenizer.fingerprint(),
            "media": self.media.to_json(),
        }

    def __repr__(self) -> str:
        return (
            f"Recipe(format={self.format.name!r}, template={self.template.name!r}, "
            f"tokenizer={self.tokenizer!r}, max_length={self.max_length}, "
            f"overflow={self.overflow!r}, train_on={self.train_on!r})"
        )


def _jsonable(value: Any) -> Any:
    if value is None or isinstance(value, str | int | float | bool):
        return value
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    return repr(value)
