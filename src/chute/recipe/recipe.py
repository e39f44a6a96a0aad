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
window, windows     with ``overflow="split"``: the window's number and the document's count
chosen_length       with ``task="preference"``: where the rejected sequence starts
label               with ``task="kto"``: the completion is desirable
==================  ==========================================================================

Example:
    >>> recipe = Recipe(tokenizer="tokenizers/qwen3/tokenizer.json", template="qwen3",
    ...                 max_length=4096)  # doctest: +SKIP
    >>> sample = recipe({"instruction": "Say hi", "output": "Hi!"})  # doctest: +SKIP
    >>> tokenizer.decode(sample["input_ids"])  # doctest: +SKIP
    '<|im_start|>user\nSay hi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\nHi!<|im_end|>\n'
"""

from __future__ import annotations

import copy
import inspect
import logging
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from chute._internal.files import warn_once
from chute._internal.spelling import spell, spell_set, spell_value
from chute.errors import ConfigError, SampleError
from chute.formats import FormatReader, FormatSpec
from chute.formats.spec import MAX_TURNS
from chute.media.geometry import Geometry
from chute.media.refs import MediaSlot
from chute.media.timestamps import Timestamps
from chute.media.tokens import DynamicImageTokens
from chute.recipe.coordinates import move_coordinates, move_timestamps, objects_answer
from chute.recipe.encode import Encoded, encode, fit_length
from chute.recipe.length import LENGTH_KEYWORDS, OVERFLOW, LengthPolicy
from chute.recipe.options import (
    OPTION_NAMES,
    RecipeOptions,
    check_plain,
    keyword_parameters,
    keyword_problems,
    none_as_empty,
    option_defaults,
    options_doc,
)
from chute.recipe.preference import TASKS, response_rendered, train_after_prompt
from chute.recipe.restarts import RestartPoints
from chute.recipe.specs import MediaSpec, TemplateSpec, TokenizerSpec, group_of
from chute.recipe.tasks import TASK_STRATEGIES
from chute.recipe.truncate import TRUNCATION, check_policies, drop_exchanges
from chute.recipe.windows import (
    IGNORE,
    Windowed,
    cut_window,
    split_sample,
    untrained_window,
    window_counts,
)
from chute.sample.conversation import Conversation
from chute.sources.record import MAX_RECORD_BYTES, Record, check_size
from chute.templates import RenderContext, Rendered, get_template
from chute.tokenize import Tokenizer, load_tokenizer
from chute.tokenize.prefix import MIN_PREFIX_CHARS

log = logging.getLogger("chute.recipe")

__all__ = [
    "MAX_RECORD_BYTES",
    "MAX_TURNS",
    "OVERFLOW",
    "RECIPE_VERSION",
    "TASKS",
    "TRUNCATION",
    "Recipe",
]

# Bump when the same inputs would give different samples (the cache keys on it).
# 3: templates no longer read the clock (strftime_now is a fixed date)
# 4: an alpaca record with an empty instruction is its input alone (it began with "\n"); the
#    markers around a media token are not trained (<|vision_start|> in an assistant turn)
RECIPE_VERSION = 4
# where a record came from: path, line, index, window
_Where = tuple[str | None, int | None, int | None, int | None]


class Recipe:
    """Record -> training sample. Picklable (DataLoader workers, process pools) and cheap to call.

    Every keyword but the four groups below is an option declared once in
    ``chute.recipe.options.RecipeOptions`` (the same key in a config's ``recipe:`` section, the
    same ``--flag`` on the command line); each is listed, with its doc, under "Options" (written
    from the declarations when this module loads, as is the signature ``help(Recipe)`` shows).

    Args:
        tokenizer: a ``tokenizer.json`` path, a tokenizer folder, a tiktoken BPE file, a
            ``tokenizers`` / ``transformers`` tokenizer object (see ``chute.tokenize``), or a
            ``TokenizerSpec`` (then leave ``special_tokens``, ``tiktoken_pattern`` and
            ``tokenizer_backend`` out).
        template: a built-in name, a ``tokenizer_config.json`` or ``.jinja`` path, a Jinja
            string, ``None`` (the tokenizer's own chat template; ``raw`` for
            ``format="text"``), or a ``TemplateSpec`` (then leave ``system``,
            ``template_vars`` and ``train_on`` out).
        length: ``max_length``, ``overflow``, ``truncation``, ``stride`` and
            ``max_record_bytes`` as one ``LengthPolicy`` (then leave those keywords out).
        media: the media options (``image_tokens`` ... ``media_allowed_roots``) as one
            ``MediaSpec`` (then leave those keywords out); ``recipe.media`` is the
            ``MediaPlan`` built from it, as from the keywords.
        **options: the options below, by name; an unknown name is a ``TypeError`` naming the
            nearest one, a value of the wrong kind a ``ConfigError``.

    Options:
    """

    def __init__(
        self,
        *,
        tokenizer: Any,
        template: Any = None,
        length: LengthPolicy | None = None,
        media: MediaSpec | None = None,
        **options: object,
    ) -> None:
        unknown = keyword_problems(options)
        if unknown:
            raise TypeError("; ".join(unknown))
        options = none_as_empty(options)
        # the groups: each a spec, or made of its loose keywords (never both)
        tok = group_of(TokenizerSpec, tokenizer, options)
        tpl = group_of(TemplateSpec, template, options)
        med = group_of(MediaSpec, media, options)
        self.length = LengthPolicy.of(
            length, {k: options[k] for k in LENGTH_KEYWORDS if k in options}
        )
        # every option's value: given (loose or in its group) or its default
        o: dict[str, Any] = {
            **option_defaults(),
            **options,
            **tok.keywords(),
            **tpl.keywords(),
            **med.keywords(),
            **{k: getattr(self.length, k) for k in LENGTH_KEYWORDS},
        }
        self.options = o
        self.tokenizer: Tokenizer = load_tokenizer(
            tok.source,
            special_tokens=tok.special_tokens,
            tiktoken_pattern=tok.tiktoken_pattern,
            backend=tok.backend,
        )
        format, columns, tags, placeholders = (
            o["format"],
            o["columns"],
            o["tags"],
            o["placeholders"],
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
        template_source = tpl.source
        if template_source is None and self.format.name == "text":
            template_source = "raw"
        self.template = get_template(template_source, self.tokenizer)
        _warn_missing_control_tokens(self.template, self.tokenizer)
        max_length, overflow = self.length.max_length, self.length.overflow
        task = o["task"]
        check_policies(max_length, overflow, self.length.truncation, task)  # with the task
        self.truncation = self.length.truncation
        self.stride = self.length.stride
        self.task = task
        self.strategy = TASK_STRATEGIES[task]  # how a record becomes a sample (recipe/tasks.py)
        system = tpl.system
        if system is not None and not isinstance(system, str):
            raise ConfigError(
                f"expected a string or {spell_value(None)}, got {type(system).__name__}",
                param="system",
            )
        self.max_length = max_length
        self.overflow = overflow
        self.system = system
        self.template_vars = dict(tpl.variables or {})
        self.max_record_bytes = self.length.max_record_bytes
        max_turns = o["max_turns"]
        if max_turns is not None and (
            isinstance(max_turns, bool) or not isinstance(max_turns, int) or max_turns < 1
        ):
            raise ConfigError(
                f"expected a positive number of messages or {spell_value(None)} (no limit), got "
                f"{spell_value(max_turns)}",
                param="max_turns",
            )
        self.max_turns = max_turns
        self.media = med.plan(self.tokenizer)
        self._reader = FormatReader(self.format, max_turns=max_turns)
        self.geometry = Geometry.of(o["geometry"])
        self._widest = False  # the lengths pass of a Loader that crops or flips
        # the Loader's media stage's image transform, where it is not the rule's default one:
        # coordinates in the text follow the pixels it prepares (``with_image_transform``)
        self._stage_transform: Any = None
        self.timestamps = Timestamps.of(o["timestamps"])
        if self.timestamps is not None and task != "sft":
            raise ConfigError(
                f"times in the text are checked for {spell_set('task', 'sft')} only, got "
                f"{spell_value(task)}",
                param="timestamps",
            )
        if self.geometry is not None and task != "sft":
            raise ConfigError(
                f"coordinates follow the pixels for {spell_set('task', 'sft')} only, got "
                f"{spell_value(task)}",
                param="geometry",
            )
        _warn_grid_of_family(self.geometry, self.media.image_rule)
        self.train_on = tpl.train_on
        self._ctx = RenderContext(
            bos=self.tokenizer.bos_token,
            eos=self.tokenizer.eos_token,
            media_text=self.media.text,
            train_on=self.train_on,
            system=system,
            variables=self.template_vars,
            special=dict(self.tokenizer.special),
        )
        # an option no part above checks (one added by a declaration alone) is checked here,
        # by its declaration, when given as plain data
        problems = check_plain(options)
        if problems:
            name, message = problems[0]
            raise ConfigError(message, param=name)
        self._check_min_length_fits()
        # where this process's long documents can be encoded from again (windows, issue 21)
        self._restarts = RestartPoints()

    # -- the pipeline ----------------------------------------------------------------------

    def __call__(self, record: Record | Any, *, draw: Any = None) -> dict[str, Any]:
        """The sample of a ``Record`` (or of an already-parsed record: a dict or list).

        ``draw``: the sample's augmentation key (``chute.media.augment.SampleDraw``, given by
        the Loader): coordinates in the text follow its crops and flips (``geometry``).
        """
        if isinstance(record, Record):
            path, line = record.path, record.line
            try:
                self._check_size(record)
                return self._sample(record.data, path, line, record.index, record.window, draw)
            except SampleError as exc:
                raise exc.with_location(path, line) from None
        if isinstance(record, Windowed):  # a window of an in-memory record
            return self._sample(record.item, None, None, None, record.window, draw)
        if draw is not None:
            return self._sample(record, None, None, None, None, draw)
        return self.process(record)

    def process(
        self,
        data: Any,
        *,
        path: str | None = None,
        line: int | None = None,
        index: int | None = None,
        window: int | None = None,
    ) -> dict[str, Any]:
        """The sample of a parsed record (e.g. a dict); ``path`` also anchors media paths.

        ``window``: with ``overflow="split"``, that window of the record (see ``pieces``).
        """
        try:
            return self._sample(data, path, line, index, window)
        except SampleError as exc:
            if path is not None:
                exc.with_location(path, line)
            raise

    def pieces(self, sample: dict[str, Any]) -> list[dict[str, Any]]:
        """The samples one record's sample becomes (its windows with ``overflow="split"``).

        Without ``split`` that is the sample itself. The loader and ``chute preprocess`` deal
        each window as a sample of its own.

        Example:
            >>> windows = recipe.pieces(recipe(source[3]))  # doctest: +SKIP
            >>> [w["window"] for w in windows], [w["length"] for w in windows]  # doctest: +SKIP
            ([0, 1, 2], [4096, 4096, 1733])
        """
        if self.overflow != "split" or self.max_length is None:
            return [sample]
        return split_sample(sample, self.max_length, self.stride)

    def _window(self, sample: dict[str, Any], window: int) -> dict[str, Any]:
        if self.overflow != "split" or self.max_length is None:
            raise ConfigError(
                f"a record standing for window {window} reached a recipe with "
                f"{spell_set('overflow', self.overflow)}; windows come from "
                f"{spell_set('overflow', 'split')}"
            )
        try:
            piece = cut_window(sample, window, self.max_length, self.stride)
        except IndexError as exc:
            raise ConfigError(
                f"{exc}: the record changed since its windows were counted (stale lengths?)"
            ) from None
        error = untrained_window(piece)
        if error is not None:
            raise error
        return piece

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
        if not self.strategy.batched:  # pairs render several conversations each: one at a time
            for record in records:
                try:
                    out.append(self(record))
                except SampleError as exc:
                    out.append(exc.with_traceback(None))  # see below
            return out
        pending: list[
            tuple[int, Conversation, Rendered, list[MediaSlot] | None, _Where, str | None]
        ] = []
        sft = self.strategy.name == "sft"
        for record in records:
            where: _Where
            if isinstance(record, Record):
                where = (record.path, record.line, record.index, record.window)
            else:
                where = (None, None, None, None)
            try:
                if isinstance(record, Record):
                    self._check_size(record)
                data = record.data if isinstance(record, Record) else record
                meant = _pair_task(data) if sft else None
                if meant is not None:
                    _say_pairs_read_as_sft(meant, where[0])
                conv = self._reader(data)
                if self.geometry is not None:
                    conv = objects_answer(conv, data, self.geometry, self.media, where[0])
                    conv = self._coordinates(conv, where[0])[0]
                conv = move_timestamps(conv, self.timestamps, self.media, where[0])
                rendered = self.template.render(conv, self._ctx)
                slots = self.media.slots(rendered.media, where[0]) if rendered.media else None
            except SampleError as exc:
                # kept without its traceback: its frames would hold the record's parse (a
                # million turns) as cyclic garbage, alive until the next full collection
                exc = exc.with_traceback(None)
                out.append(exc.with_location(where[0], where[1]) if where[0] else exc)
                continue
            pending.append((len(out), conv, rendered, slots, where, meant))
            out.append(None)
        tok = self.tokenizer
        fast = tok.supports_offsets
        media, need = self.media, self._need
        # back to back for ordinary texts; a long one is encoded on its own, in pieces
        encoded = [
            tok.encode_spans_array(r.text, r.spans)
            if fast and not r.media and len(r.text) < MIN_PREFIX_CHARS
            else None
            for _, _, r, _, _, _ in pending
        ]
        for (k, conv, rendered, slots, where, meant), pre in zip(pending, encoded, strict=True):
            path, line, index, window = where
            try:
                enc = encode(rendered, tok, media.tokens, slots, media.guard, pre, need)
                sample = self._finish(self._fit(conv, enc, path), path, line, index)
                self._check_min_length(sample["length"])  # a window's: its whole document's
                out[k] = sample if window is None else self._window(sample, window)
            except SampleError as exc:
                exc = _with_pairs_hint(exc.with_traceback(None), meant)
                out[k] = exc.with_location(path, line) if path else exc
        return out

    def format_of(self, record: Record | Any) -> str:
        """The format a record is read as (the detected one when ``format="auto"``).

        A preference or KTO record in a shape no SFT format names (TRL's ``prompt``,
        ``chosen``, ``rejected``) is named by its task and keys.
        """
        data = record.data if isinstance(record, Record) else record
        try:
            return self._reader.detect(data)
        except SampleError:
            if self.strategy.name == "sft" or not isinstance(data, dict):
                raise
            return f"{self.strategy.name} ({', '.join(sorted(data))})"

    def conversation(self, record: Record | Any) -> Conversation:
        """The canonical conversation of a record (format adapter only)."""
        data = record.data if isinstance(record, Record) else record
        return self._reader(data)

    def render(self, record: Record | Any) -> Rendered:
        """The rendered text and trained character spans of a record (before tokenizing)."""
        return self.template.render(self.conversation(record), self._ctx)

    def _check_size(self, record: Record) -> None:
        """``record_too_large`` before reading or parsing: its size comes from the index."""
        check_size(record, self.max_record_bytes)

    def _sample(
        self,
        data: Any,
        path: str | None,
        line: int | None,
        index: int | None,
        window: int | None = None,
        draw: Any = None,
    ) -> dict[str, Any]:
        sample = self.strategy.sample(self, data, (path, line, index), window, draw)
        if window is None:  # a window's document was measured whole (_window_sample)
            self._check_min_length(sample["length"])
        return sample

    def _check_min_length_fits(self) -> None:
        """A ``min_length`` above ``max_length`` would reject every sample (windows aside)."""
        least, most = self.options["min_length"], self.max_length
        if least is not None and most is not None and least > most and self.overflow != "split":
            raise ConfigError(
                f"{least} is more than {spell_set('max_length', most)}: every sample would be "
                f"rejected as too_short",
                param="min_length",
            )

    def _check_min_length(self, length: int) -> None:
        """``too_short``: fewer tokens than ``min_length``."""
        least = self.options["min_length"]
        if least is not None and length < least:
            raise SampleError(
                "too_short",
                f"{length} tokens, fewer than {spell_set('min_length', least)}",
            )

    def _sft_sample(
        self, data: Any, path: str | None, line: int | None, index: int | None, draw: Any
    ) -> dict[str, Any]:
        """One sequence (``SftTask``): coordinates and times follow the draw, then encode."""
        meant = _pair_task(data)
        if meant is not None:
            _say_pairs_read_as_sft(meant, path)
        try:
            conv, flip_ok = self._placed(data, path, draw)
            sample = self._finish(
                self._fit(conv, self._encode(conv, path), path), path, line, index
            )
        except SampleError as exc:
            raise _with_pairs_hint(exc, meant) from None
        if not flip_ok:
            sample["no_flip"] = True  # the text says left or right: the stage does not flip
        return sample

    def _placed(self, data: Any, path: str | None, draw: Any) -> tuple[Conversation, bool]:
        """``(conversation, whether a flip is allowed)`` of a record, its coordinates placed.

        The record read, its boxes answered from its columns and moved (for the resize and the
        draw), its times checked. Every sequence goes through it, a window of a split document
        too: the pixels are resized (and cropped) whichever way the text was cut.
        """
        conv = self._reader(data)
        flip_ok = True
        if self.geometry is not None or draw is not None:
            conv = objects_answer(conv, data, self.geometry, self.media, path)
            conv, flip_ok = self._coordinates(conv, path, draw)
        return move_timestamps(conv, self.timestamps, self.media, path), flip_ok

    def _coordinates(
        self, conv: Conversation, path: str | None, draw: Any = None
    ) -> tuple[Conversation, bool]:
        return move_coordinates(
            conv, self.geometry, self.media, self._geometry_transform, path, draw, self._widest
        )

    def widest_coordinates(self) -> Recipe:
        """This recipe, writing each coordinate of the text at its widest form.

        The lengths pass of a Loader whose media stage crops or flips runs it: an augmented
        sample's boxes are only known per draw, so its planned length is counted with every
        coordinate as long as any draw could write it (``Geometry.rewrite(widest=True)``),
        and a packed row or a token budget planned from these lengths is never exceeded. Its
        ``fingerprint`` differs, so its lengths are cached apart.
        """
        if self.geometry is None or self.geometry.convention == "none" or self._widest:
            return self
        out = copy.copy(self)
        out._widest = True
        return out

    def with_image_transform(self, transform: Any) -> Recipe:
        """This recipe, moving coordinates in the text as ``transform`` prepares the pixels.

        The Loader gives it its media stage's image transform: without it, the text's boxes
        followed the rule's default stage (LLaVA-1.5's pad to a square, say) while the pixels
        came from another (a centre crop): boxes over other pixels, without a word. A
        transform like the default one (or a dynamic-resolution rule's, whose geometry the
        rule is) leaves the recipe as it is. Its ``fingerprint`` differs, so its lengths are
        cached apart.
        """
        if self.geometry is None or self.geometry.convention == "none" or transform is None:
            return self
        if isinstance(self.media.image_rule, DynamicImageTokens):
            return self
        spec = getattr(transform, "fingerprint", None)
        if not callable(spec) or spec() == _spec_of(self._geometry_transform()):
            return self
        out = copy.copy(self)
        out._stage_transform = transform
        return out

    def _geometry_transform(self) -> Any:
        """The prepared geometry of the media stage (coordinates without a draw)."""
        if self._stage_transform is not None:
            return self._stage_transform
        rule = self.media.image_rule
        if isinstance(rule, DynamicImageTokens):
            return rule
        # here: the media stage (transforms, tiles, the pixel store's readers) is for samples
        # with images, and every text recipe would import it
        from chute.media.stage import default_media_stage

        return default_media_stage(rule).image

    def _window_sample(
        self, conv: Conversation, window: int, path: str | None, line: int | None, index: int | None
    ) -> dict[str, Any]:
        """Window ``window`` of a long document, encoding only up to its end (issue 21).

        Only the window's tokens are kept (memory follows the window, not the document). The
        first window of a document this process builds encodes it all (the tokens after the
        window are counted, to say how many windows it has) and keeps where it was cut; later
        ones re-encode only the pieces that hold them (``chute.recipe.restarts``).
        """
        if self.overflow != "split" or self.max_length is None:
            raise ConfigError(
                f"a record standing for window {window} reached a recipe with "
                f"{spell_set('overflow', self.overflow)}; windows come from "
                f"{spell_set('overflow', 'split')}"
            )
        rendered = self.template.render(conv, self._ctx)
        if rendered.media:  # a document with media is never split (windows never cut an image)
            sample = self._finish(
                self._fit(conv, self._encode(conv, path), path), path, line, index
            )
            self._check_min_length(sample["length"])
            return self._window(sample, window)
        start = window * (self.max_length - self.stride)
        enc = self._restarts.window(
            rendered,
            self.tokenizer,
            self.media.guard,
            (start, start + self.max_length),
            (path, index),
        )
        total = enc.total if enc.total is not None else start + len(enc.ids)
        self._check_min_length(total)
        if not len(enc.ids) or (window and total <= self.max_length):
            raise ConfigError(
                f"window {window} of a {total}-token document: the record changed since its "
                f"windows were counted (stale lengths?)"
            )
        sample = self._finish(enc, path, line, index)
        context = self.stride if window else 0
        if context:
            sample["labels"] = sample["labels"].copy()
            sample["labels"][:context] = IGNORE
        sample["window"] = window
        sample["windows"] = int(window_counts(np.array([total]), self.max_length, self.stride)[0])
        sample["truncated"] = False
        error = untrained_window(sample)
        if error is not None:
            raise error
        return sample

    def _encode(
        self,
        conv: Conversation,
        path: str | None,
        side: str | None = None,
        prompts: dict[str, list[int]] | None = None,
    ) -> Encoded:
        rendered = self.template.render(conv, self._ctx)
        if side is not None:  # preference: trained from the response's start to the end
            rendered = response_rendered(rendered, self.media.tokens)
        slots = self.media.slots(rendered.media, path) if rendered.media else None
        enc = encode(
            rendered, self.tokenizer, self.media.tokens, slots, self.media.guard, need=self._need
        )
        if side is not None and rendered.spans:
            # the prompt as TRL encodes it: the generation prompt, which a turn with reasoning
            # under Qwen3's enable_thinking: false departs from
            text = self.template.generation_prompt(rendered.text[: rendered.spans[0][0]], self._ctx)
            prompt = None if prompts is None else prompts.get(text)
            if prompt is None:  # both sides of a pair share it: encoded once
                if rendered.media:  # they expand as in the whole text (all lie in the prompt)
                    prompt_only = Rendered(text, [], rendered.media)
                    prompt = encode(
                        prompt_only, self.tokenizer, self.media.tokens, slots, self.media.guard
                    ).ids.tolist()
                else:
                    prompt = self.tokenizer.encode(text)
                if prompts is not None:
                    prompts[text] = prompt
            enc = train_after_prompt(enc, prompt)
        return enc

    @property
    def _need(self) -> int | None:
        """Tokens that decide a sample when the rest would be cut away (``encode(need=)``).

        ``max_length + 1`` for the policies that keep the start (``truncate`` on the right,
        ``drop``): one token past the limit says the sample is too long. Others read the whole.
        """
        if self.max_length is None or not self.strategy.trims_early:
            return None
        if self.overflow == "drop" or (self.overflow == "truncate" and self.truncation == "right"):
            return self.max_length + 1
        return None

    def _fit(self, conv: Conversation, enc: Encoded, path: str | None, keep: int = 0) -> Encoded:
        """``max_length`` applied (``turns`` first drops earliest exchanges; see truncate.py)."""
        limit = self.max_length
        if self._drops_turns(enc) and conv.kind == "chat" and limit is not None:
            side = "completion" if keep else None
            shorter = drop_exchanges(
                [conv], keep, limit, lambda cs: (self._encode(cs[0], path, side),)
            )
            enc = shorter[0] if shorter else enc
        return fit_length(enc, limit, self.overflow, self.truncation)

    def _drops_turns(self, *encoded: Encoded) -> bool:
        limit = self.max_length
        return (
            self.truncation == "turns"
            and limit is not None
            and max(len(e.ids) for e in encoded) > limit
        )

    def _finish(
        self, enc: Encoded, path: str | None, line: int | None, index: int | None
    ) -> dict[str, Any]:
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
        sample = {
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
        if self.overflow == "split" and self.max_length is not None:
            counts = window_counts(np.array([len(enc.ids)]), self.max_length, self.stride)
            sample["windows"] = int(counts[0])
        return sample

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
        entries = {
            "recipe_version": RECIPE_VERSION,
            "format": self.format.to_json(),
            "template": self.template.spec(),
            "template_vars": {k: _jsonable(v) for k, v in sorted(self.template_vars.items())},
            "system": self.system,
            "train_on": self.train_on,
            "max_length": self.max_length,
            "overflow": self.overflow,
            # only when not the default, so caches built before these options stay valid
            **({"truncation": self.truncation} if self.truncation != "right" else {}),
            **({"stride": self.stride} if self.stride else {}),
            **({"task": self.task} if self.task != "sft" else {}),
            **(
                {"max_record_bytes": self.max_record_bytes}
                if self.max_record_bytes != MAX_RECORD_BYTES
                else {}
            ),
            **({"max_turns": self.max_turns} if self.max_turns != MAX_TURNS else {}),
            "tokenizer": self.tokenizer.fingerprint(),
            "media": self.media.to_json(),
            **({"geometry": self.geometry.fingerprint()} if self.geometry is not None else {}),
            **({"coordinates": "widest"} if self._widest else {}),
            **(
                {"coordinates_transform": _spec_of(self._stage_transform)}
                if self._stage_transform is not None
                else {}
            ),
            **({"timestamps": self.timestamps.fingerprint()} if self.timestamps else {}),
        }
        return {**entries, **self._options_by_name(entries)}

    def _options_by_name(self, entries: Mapping[str, Any]) -> dict[str, Any]:
        """Each option no entry holds, by its name, where it differs from its default.

        An option added by its declaration alone is in the fingerprint this way, so a cache
        built without it (or with another value) is a named mismatch; at its default it is left
        out, so caches built before the option existed stay valid.
        """
        within = {n for names in RecipeOptions.FINGERPRINTED_WITHIN.values() for n in names}
        skip = within | set(RecipeOptions.NOT_SHAPING) | set(entries)
        defaults = option_defaults()
        return {
            name: _jsonable(value)
            for name, value in self.options.items()
            if name not in skip and value != defaults[name]
        }

    def __repr__(self) -> str:
        return (
            f"Recipe(format={self.format.name!r}, template={self.template.name!r}, "
            f"tokenizer={self.tokenizer!r}, max_length={self.max_length}, "
            f"overflow={self.overflow!r}, train_on={self.train_on!r}"
            + (f", truncation={self.truncation!r}" if self.truncation != "right" else "")
            + (f", stride={self.stride}" if self.stride else "")
            + (f", task={self.task!r}" if self.task != "sft" else "")
            + ")"
        )


# The options' docs and keywords, from their declarations (so an option is declared once).
_OPTIONS = tuple(name for name in OPTION_NAMES if name not in ("tokenizer", "template"))
Recipe.__doc__ = f"{(Recipe.__doc__ or '').rstrip()}\n{options_doc(_OPTIONS)}\n"
_init = inspect.signature(Recipe.__init__)
Recipe.__init__.__signature__ = _init.replace(  # type: ignore[attr-defined]
    parameters=[
        *(p for p in _init.parameters.values() if p.kind != p.VAR_KEYWORD),
        *keyword_parameters(_OPTIONS),
    ]
)


def _jsonable(value: Any) -> Any:
    if value is None or isinstance(value, str | int | float | bool):
        return value
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    return repr(value)


def _pair_task(data: Any) -> str | None:
    """The task a record is written for when it is not SFT: DPO pairs or KTO labels."""
    if not isinstance(data, dict):
        return None
    if "chosen" in data and "rejected" in data:
        return "preference"
    if isinstance(data.get("label"), bool) and ("messages" in data or "completion" in data):
        return "kto"
    return None


def _warn_grid_of_family(geometry: Geometry | None, rule: Any) -> None:
    """Warn where the geometry reads boxes as another Qwen-VL generation writes them.

    Qwen2.5-VL and Qwen3-VL both write ``"bbox_2d": [...]``: in pixels of the image (2.5) and
    on a 0-1000 grid (3). The same text read the other way moves every box to other pixels.
    """
    family = getattr(rule, "family", None)
    wrong = {"qwen3-vl": "qwen2.5-vl", "qwen2.5-vl": "qwen3-vl"}.get(family or "")
    if geometry is not None and geometry.convention == wrong:
        warn_once(
            log,
            'geometry %r reads "bbox_2d" as %s, and image_tokens %r is the family that '
            "writes them %s: check which one the data was written for (geometry %r reads "
            "them as %s writes them)",
            geometry.convention,
            "pixels" if wrong == "qwen2.5-vl" else "a 0-1000 grid",
            family,
            "on a 0-1000 grid" if family == "qwen3-vl" else "in pixels",
            family,
            family,
        )


def _warn_missing_control_tokens(template: Any, tokenizer: Any) -> None:
    """Warn (once a process) when a built-in template's markup is text to this tokenizer."""
    lost = template.missing_control_tokens(tokenizer)
    if lost:
        warn_once(
            log,
            "template %r writes %s, which this tokenizer has no token for: they are encoded as "
            "text, and the model is never taught its end-of-turn token; pick the template made "
            "for this tokenizer (its own chat template: leave the template unset)",
            template.name,
            ", ".join(lost),
        )


def _pairs_hint(task: str) -> str:
    what = "preference pairs (chosen and rejected)" if task == "preference" else "KTO samples"
    return (
        f"the records are {what}, which {spell_set('task', 'sft')} trains as plain SFT on "
        f"their conversation alone: pass {spell_set('task', task)}"
    )


def _with_pairs_hint(exc: SampleError, meant: str | None) -> SampleError:
    """``no_trainable_tokens`` of a pair or KTO record read as SFT: say which task it is."""
    if meant is None or exc.kind != "no_trainable_tokens":
        return exc
    why = exc.message.split("; ", 1)[0]  # the SFT fix after it (roles, train_on) is not it
    return SampleError(
        exc.kind,
        f"{why}: {_pairs_hint(meant)}",
        path=exc.path,
        line=exc.line,
        field=exc.field,
    )


def _say_pairs_read_as_sft(task: str, path: str | None) -> None:
    """Warn once per process and file: the records' pairs or labels are not trained."""
    warn_once(log, "%s: %s", path or "records", _pairs_hint(task))


def _spec_of(transform: Any) -> Any:
    """A transform's fingerprint (its type's name where it has none)."""
    spec = getattr(transform, "fingerprint", None)
    return spec() if callable(spec) else type(transform).__name__
