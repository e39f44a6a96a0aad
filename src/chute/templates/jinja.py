r"""Jinja chat templates, rendered as ``apply_chat_template`` does, with robust label spans.

A template comes from a ``tokenizer_config.json``'s ``chat_template``, a ``.jinja`` file, or a
string. It renders the way ``transformers``' ``apply_chat_template`` renders it, and the
trained spans are found without relying on ``{% generation %}`` tags.

Rendering: a sandboxed jinja2 environment with ``trim_blocks``/``lstrip_blocks``, the
``loopcontrols`` extension, ``tojson`` (no ASCII escaping), ``raise_exception`` and
``strftime_now``; ``{% generation %}`` blocks render their body. Variables: ``messages``,
``tools``, ``add_generation_prompt=False``, ``bos_token``/``eos_token``/``pad_token``/
``unk_token``, and ``Recipe(template_vars=...)``. The compiled template is cached per process.

Finding what is trained. The text the model trains on is always the real rendering ``F`` of the
whole conversation, encoded once. Spans are found in it as follows:

1. **Markers** (one extra render). Render again with each trained message's content replaced
   by a unique marker. The text between markers is template text; find each piece of it in
   ``F`` in order, and what lies between is the message's content as the template wrote it
   (trimmed, reasoning split off, ...). A trained assistant turn's span then extends back over
   template text written after its generation header (e.g. Qwen3's empty ``<think>`` block) and
   forward through the end-of-turn token (with any tool calls before it). Two probe renders per
   template find the header (``add_generation_prompt`` output) and the end-of-turn text. Where
   the turn departs from that header (Qwen3 under ``enable_thinking: false`` prompts with an
   empty think block, and a turn that carries reasoning writes it there), the span starts after
   the role header the turn shares with it (``<|im_start|>assistant\n``): the model is taught
   what the turn writes, not a piece of it.
2. **Prefix renders**, for a message the markers cannot place (the template branched on the
   content): render the messages before it with ``add_generation_prompt=True`` and through it
   without; the difference is what the model generates for that turn; find it in ``F`` after
   the point where ``F`` and that prompt part (an empty turn is its end-of-turn token alone,
   which the text before it holds too).
3. **Diff render**: render with only that message's content replaced and diff against ``F``.

If all three fail the record is rejected as ``template_error`` (never silently mis-masked).
Step 1 costs one render per record; 2 and 3 cost O(turns) renders and happen only for the
messages that need them.

Rendering once per shape. ``F`` and the marker rendering are both filled in from a *skeleton*
(``chute.templates.jinja_skeleton``) where the template allows it: rendered once per
conversation shape (roles, empty contents, tool calls, tools, variables), it is reused for every
conversation of that shape whose contents pass the tests the template made on them. Most
records then cost no render at all, and the text and spans are exactly those of rendering.

Example:
    >>> t = JinjaTemplate("{% for m in messages %}<{{ m.role }}>{{ m.content }}</s>{% endfor %}")
    >>> from chute.sample.conversation import Conversation, Message
    >>> from chute.templates.base import RenderContext
    >>> r = t.render(Conversation([Message("user", "hi"), Message("assistant", "yo")]),
    ...              RenderContext())
    >>> r.text, r.trained_text()
    ('<user>hi</s><assistant>yo</s>', 'yo</s>')
"""

from __future__ import annotations

import hashlib
import itertools
import re
from dataclasses import dataclass
from typing import Any

import orjson
from jinja2 import TemplateError

from chute._internal.spelling import spell_set
from chute.errors import ConfigError, SampleError
from chute.sample.conversation import Conversation
from chute.templates.base import RenderContext, Rendered, Template, train_flags
from chute.templates.jinja_env import TemplateRaised, compile_template
from chute.templates.jinja_skeleton import Skeleton, Skeletons, apply_ops

__all__ = ["JinjaTemplate"]

_MARK = "\u27e6chute:{}\u27e7"  # ⟦chute:3⟧ — survives trim/strip/split and tojson
_MARK_RE = re.compile("\u27e6chute:(\\d+)\u27e7")
_MARK_OPEN = "\u27e6chute:"  # in a rendering of the data itself: markers cannot be used


class JinjaTemplate(Template):
    """A Jinja chat template.

    Args:
        source: the template text.
        name: a label for reports (``jinja`` or where it came from).
        origin: the file it was read from, if any (informational; identity is the text hash).
    """

    supports_tools = True

    def __init__(self, source: str, name: str = "jinja", origin: str | None = None):
        if not isinstance(source, str) or not source.strip():
            raise ConfigError("the Jinja template text is empty", param="template")
        self.source = source
        self.name = name
        self.origin = origin
        self.sha256 = hashlib.sha256(source.encode()).hexdigest()
        try:
            self._compiled = compile_template(source)
        except TemplateError as exc:
            where = f" ({origin})" if origin else ""
            raise ConfigError(f"template{where}: not a valid Jinja template: {exc}") from None
        self._probes: dict[Any, _Headers] = {}
        self._skeletons = Skeletons(self._compiled)
        # the last context seen and what is derived from it (a recipe passes the same one)
        self._seen: tuple[RenderContext, dict[str, Any], dict[str, Any], _Context] | None = None

    def spec(self) -> dict[str, Any]:
        # spans 2: empty turns, turns departing from the generation header and marker-like
        # text are placed otherwise; caches built before had such labels wrong: refused
        return {"name": self.name, "kind": "jinja", "sha256": self.sha256, "spans": 2}

    def generation_prompt(self, before: str, ctx: RenderContext) -> str:
        heads = self._probe(ctx)
        return heads.prompt_after(before)

    def __getstate__(self) -> dict[str, Any]:
        return {"source": self.source, "name": self.name, "origin": self.origin}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["source"], state["name"], state["origin"])  # type: ignore[misc]

    # -- rendering ---------------------------------------------------------------------------

    def render_messages(
        self,
        messages: list[dict[str, Any]],
        ctx: RenderContext,
        *,
        tools: list[dict[str, Any]] | None = None,
        add_generation_prompt: bool = False,
    ) -> str:
        """The template's output for message dicts (what ``apply_chat_template`` would give).

        Raises:
            SampleError: ``template_error`` when the template raises.
        """
        variables = _variables(ctx)
        try:
            return self._compiled.render(
                messages=messages,
                tools=tools,
                add_generation_prompt=add_generation_prompt,
                **variables,
            )
        except TemplateRaised as exc:
            raise SampleError("template_error", f"the chat template refused: {exc}") from None
        except Exception as exc:
            raise SampleError(
                "template_error",
                f"the chat template failed: {type(exc).__name__}: {exc}",
            ) from None

    def _render(self, conv: Conversation, ctx: RenderContext) -> Rendered:
        msgs = [_as_dict(m, ctx) for m in conv.messages]
        flags = train_flags(conv, ctx.train_on)
        if ctx.system is not None and msgs[0]["role"] != "system":
            msgs.insert(0, {"role": "system", "content": ctx.system})
            flags.insert(0, ctx.train_on == "all")
        tools = conv.tools
        skeleton = self._skeleton(msgs, tools, ctx)
        contents = [m["content"] for m in msgs]
        filled: list[tuple[int, int]] | None = None  # where the skeleton's holes lie in text
        if skeleton is not None and skeleton.holds(contents):
            text, filled = skeleton.fill_at(contents)
        else:
            text = self.render_messages(msgs, ctx, tools=tools)
        media = conv.media() if conv.has_media() else []
        if ctx.train_on == "all":
            masked = [i for i, f in enumerate(flags) if not f]
            if not masked:
                return Rendered(text, [(0, len(text))] if text else [], media)
            holes = sorted(self._locate(text, msgs, masked, tools, ctx, skeleton, filled).values())
            spans, pos = [], 0
            for a, b in holes:
                if a > pos:
                    spans.append((pos, a))
                pos = max(pos, b)
            if pos < len(text):
                spans.append((pos, len(text)))
            return Rendered(text, spans, media)
        wanted = [i for i, f in enumerate(flags) if f]
        if not wanted:
            return Rendered(text, [], media)
        located = self._locate(text, msgs, wanted, tools, ctx, skeleton, filled)
        return Rendered(text, sorted(located.values()), media)

    def _skeleton(
        self, msgs: list[dict[str, Any]], tools: Any, ctx: RenderContext
    ) -> Skeleton | None:
        """The skeleton of this conversation's shape, or ``None`` (no shape key, or refused)."""
        context = self._context(ctx)
        key = _shape(msgs, tools, context.key)
        return None if key is None else self._skeletons.get(msgs, tools, context.variables, key)

    def _context(self, ctx: RenderContext) -> _Context:
        """What the skeletons and probes need of ``ctx``, derived once while it stays the same."""
        seen = self._seen
        if (
            seen is not None
            and seen[0] is ctx
            and seen[1] == ctx.variables
            and seen[2] == ctx.special
        ):
            return seen[3]
        context = _Context(
            (
                tuple(sorted((k, repr(v)) for k, v in ctx.variables.items())),
                tuple(ctx.special.items()),
            ),
            _variables(ctx),
        )
        self._seen = (ctx, dict(ctx.variables), dict(ctx.special), context)
        return context

    # -- span finding ------------------------------------------------------------------------

    def _probe(self, ctx: RenderContext) -> _Headers:
        """The generation header, role header and end-of-turn text of the template under ``ctx``."""
        key = self._context(ctx).key
        found = self._probes.get(key)
        if found is not None:
            return found
        u, a, u2 = _MARK.format(900001), _MARK.format(900002), _MARK.format(900003)
        header = eot = role = ""
        try:
            one = [{"role": "user", "content": u}]
            with_gen = self.render_messages(one, ctx, add_generation_prompt=True)
            without = self.render_messages(one, ctx)
            if with_gen.startswith(without):
                header = with_gen[len(without) :]
            two = [*one, {"role": "assistant", "content": a}]
            tail1 = self.render_messages(two, ctx).partition(a)[2]
            three = self.render_messages([*two, {"role": "user", "content": u2}], ctx)
            tail2 = three.partition(a)[2].partition(u2)[0]
            eot = tail1[: _common_prefix(tail1, tail2)].rstrip()
            # what the template writes before an assistant turn in the history, as far as the
            # generation header writes it too: the role header every turn starts with
            turn = three.partition(a)[0]
            if header and turn.startswith(without):
                turn = turn[len(without) :]
                role = header[: _common_prefix(header, turn)]
        except SampleError:
            pass  # a template that refuses the probes gets plain content spans
        found = _Headers(header, eot, role)
        self._probes[key] = found
        return found

    def _locate(
        self,
        text: str,
        msgs: list[dict[str, Any]],
        wanted: list[int],
        tools: Any,
        ctx: RenderContext,
        skeleton: Skeleton | None = None,
        filled: list[tuple[int, int]] | None = None,
    ) -> dict[int, tuple[int, int]]:
        heads = self._probe(ctx)
        if skeleton is not None and filled is not None:
            found = _by_plan(text, msgs, wanted, skeleton, filled, heads)
            if found is not None:
                return found
        located = self._by_markers(text, msgs, wanted, tools, ctx, heads, skeleton, filled)
        for i in wanted:
            if i in located:
                continue
            lower = max((e for j, (_, e) in located.items() if j < i), default=0)
            upper = min((s for j, (s, _) in located.items() if j > i), default=len(text))
            span = None
            if msgs[i]["role"] == "assistant":
                span = self._by_prefix(text, msgs, i, tools, ctx, heads, lower, upper)
            if span is None:
                span = self._by_diff(text, msgs, i, tools, ctx, heads, lower, upper)
            if span is None:
                raise SampleError(
                    "template_error",
                    f"cannot find message {i} ({msgs[i]['role']}) in the chat template's output; "
                    f"the template rewrites it in a way chute cannot align (try a built-in "
                    f"template, or {spell_set('train_on', 'all')})",
                )
            located[i] = span
        return located

    def _by_markers(
        self,
        text: str,
        msgs: list[dict[str, Any]],
        wanted: list[int],
        tools: Any,
        ctx: RenderContext,
        heads: _Headers,
        skeleton: Skeleton | None = None,
        filled: list[tuple[int, int]] | None = None,
    ) -> dict[int, tuple[int, int]]:
        if _MARK_OPEN in text:
            return {}  # the data writes marker-like text: a marker could not be told from it
        # An empty content stays empty: templates branch on it (Qwen3 writes a newline before a
        # tool call only after text), and a marker there would derail the alignment.
        wanted = [i for i in wanted if msgs[i]["content"]]
        contents = [m["content"] for m in msgs]
        for k, i in enumerate(wanted):
            contents[i] = _MARK.format(k)
        cut = None
        if skeleton is not None and filled is not None:
            cut = _marked_cut(text, skeleton, filled, wanted, [contents[i] for i in wanted])
        if cut is not None:
            order, templ = cut
        else:
            if skeleton is not None and skeleton.holds(contents):
                rendered = skeleton.fill(contents)  # what rendering the marked messages gives
            else:
                marked = list(msgs)
                for i in wanted:
                    marked[i] = {**msgs[i], "content": contents[i]}
                try:
                    rendered = self.render_messages(marked, ctx, tools=tools)
                except SampleError:
                    return {}
            pieces = _MARK_RE.split(rendered)
            order = [int(x) for x in pieces[1::2]]
            templ = pieces[0::2]
        located: dict[int, tuple[int, int]] = {}
        # Markers must come once each and in order; a template may drop a content (Llama 3
        # writes a tool-call turn without it): those messages are left to the fallbacks.
        if (
            any(b <= a for a, b in itertools.pairwise(order))
            or any(k >= len(wanted) for k in order)
            or not text.startswith(templ[0])
        ):
            return located
        pos = len(templ[0])
        for k, i in enumerate(wanted[j] for j in order):
            after = templ[k + 1]
            slot_start = pos
            if k == len(order) - 1:
                if not text.endswith(after) or len(text) - len(after) < slot_start:
                    break
                slot_end = len(text) - len(after)
            else:
                found = text.find(after, slot_start)
                if found < 0 or not after:
                    break
                slot_end = found
            content = msgs[i]["content"]
            if text[slot_start:slot_end] not in content:
                break  # the template rewrote the content (or a piece matched too early)
            start, end = slot_start, slot_end
            if msgs[i]["role"] == "assistant":
                before = templ[k]
                h = heads.end_in(before, 0, len(before))
                if h is not None:
                    start = slot_start - (len(before) - h)
                if heads.eot:
                    e = text.find(heads.eot, slot_end, slot_end + len(after))
                    if e >= 0:
                        end = e + len(heads.eot)
            located[i] = (start, end)
            pos = slot_end + len(after)
        return located

    def _by_prefix(
        self,
        text: str,
        msgs: list[dict[str, Any]],
        i: int,
        tools: Any,
        ctx: RenderContext,
        heads: _Headers,
        lower: int,
        upper: int,
    ) -> tuple[int, int] | None:
        eot = heads.eot
        try:
            prompt = self.render_messages(msgs[:i], ctx, tools=tools, add_generation_prompt=True)
            full = self.render_messages(msgs[: i + 1], ctx, tools=tools)
        except SampleError:
            return None
        if not full.startswith(prompt):
            return None
        generated = full[len(prompt) :]
        if eot and eot in generated:
            generated = generated[: generated.index(eot) + len(eot)]
        else:
            generated = generated.rstrip()
        if not generated:
            return None
        # The turn starts after its own header: an empty turn's text is its end-of-turn token
        # alone, which an earlier turn ends with too. Its header is the last one before the
        # point where the text departs from the prompt (that point may lie a character past
        # the turn's start: Qwen3's "<think>" and "<|im_end|>" share their "<").
        departs = _common_prefix(prompt, text)
        header_end = heads.end_in(text, lower, departs)
        at = text.find(generated, max(lower, departs if header_end is None else header_end), upper)
        return None if at < 0 else (at, at + len(generated))

    def _by_diff(
        self,
        text: str,
        msgs: list[dict[str, Any]],
        i: int,
        tools: Any,
        ctx: RenderContext,
        heads: _Headers,
        lower: int,
        upper: int,
    ) -> tuple[int, int] | None:
        marker = _MARK.format(0)
        marked = list(msgs)
        marked[i] = {**msgs[i], "content": marker}
        try:
            other = self.render_messages(marked, ctx, tools=tools)
        except SampleError:
            return None
        n = min(len(text), len(other))
        p = 0
        while p < n and text[p] == other[p]:
            p += 1
        s = 0
        while s < n - p and text[-1 - s] == other[-1 - s]:
            s += 1
        m_at = other.find(marker)
        if other.count(marker) != 1 or m_at < p or m_at + len(marker) > len(other) - s:
            return None  # the content is written more than once, or not where the text differs
        start, end = p, len(text) - s
        if start < lower or end > upper:
            return None
        if msgs[i]["role"] == "assistant":
            # back over template text after the turn's header (the text both renders share)
            h = heads.end_in(text, lower, start)
            if h is not None:
                start = h
            if heads.eot:
                e = text.find(heads.eot, end, upper)
                if e >= 0:
                    end = e + len(heads.eot)
        return start, end


def _as_dict(m: Any, ctx: RenderContext) -> dict[str, Any]:
    d: dict[str, Any] = {"role": m.role, "content": ctx.content(m)}
    if m.tool_calls:
        d["tool_calls"] = m.tool_calls
    if m.reasoning is not None:
        d["reasoning_content"] = m.reasoning
    return d


def _variables(ctx: RenderContext) -> dict[str, Any]:
    """The template's variables besides messages and tools: special tokens, ``template_vars``."""
    variables = {f"{k}_token": v for k, v in ctx.special.items() if v is not None and k != "image"}
    variables.update(ctx.variables)
    return variables


def _common_prefix(a: str, b: str) -> int:
    """The length of the longest common prefix of ``a`` and ``b`` (by halving: no char loop)."""
    n = min(len(a), len(b))
    if a[:n] == b[:n]:
        return n
    lo, hi = 0, n  # a[:lo] == b[:lo] and a[:hi] != b[:hi]
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if a[lo:mid] == b[lo:mid]:
            lo = mid
        else:
            hi = mid
    return lo


@dataclass(frozen=True)
class _Headers:
    """What a template writes around an assistant turn (probed once per context).

    ``header``: the generation header (what ``add_generation_prompt`` appends); ``eot``: the
    end-of-turn text; ``role``: the part of the header a turn in the history starts with too
    (all of it for most templates; ``<|im_start|>assistant`` and its newline of Qwen3's header under
    ``enable_thinking: false``).
    """

    header: str
    eot: str
    role: str

    def prompt_after(self, before: str) -> str:
        """``before`` completed to the generation header, where it ends at the role header."""
        header, role = self.header, self.role
        if role and header != role and before.endswith(role) and header.startswith(role):
            return before + header[len(role) :]
        return before

    def end_in(self, text: str, lo: int, hi: int) -> int | None:
        """Where the trained part of the turn whose content starts at ``hi`` may start.

        After the turn's generation header, if it lies in ``text[lo:hi]`` whole; after its role
        header where the turn departs from the generation header; ``None`` if neither is there.
        """
        if not self.role:  # no shared start known: the whole header, or nothing
            at = text.rfind(self.header, lo, hi) if self.header else -1
            return None if at < 0 else at + len(self.header)
        at = text.rfind(self.role, lo, hi)  # the turn's own: the nearest before its content
        if at < 0:
            return None
        if text.startswith(self.header, at) and at + len(self.header) <= hi:
            return at + len(self.header)
        return at + len(self.role)


@dataclass(frozen=True)
class _Context:
    """Of a ``RenderContext``: a hashable key of what a rendering reads, the variables."""

    key: tuple[Any, Any]
    variables: dict[str, Any]


def _shape(msgs: list[dict[str, Any]], tools: Any, context: tuple[Any, Any]) -> Any:
    """What a rendering depends on besides the contents' text: a hashable key, or ``None``."""
    try:
        parts: list[Any] = [
            *context,
            orjson.dumps(tools, option=orjson.OPT_SORT_KEYS) if tools else None,
        ]
        for m in msgs:
            content = m["content"]
            if not isinstance(content, str):
                return None
            if len(m) == 2:
                parts.append((m["role"], bool(content)))
            else:
                rest = {k: v for k, v in m.items() if k != "content"}
                parts.append((bool(content), orjson.dumps(rest, option=orjson.OPT_SORT_KEYS)))
        return tuple(parts)
    except (TypeError, orjson.JSONEncodeError):
        return None


def _marked_cut(
    text: str,
    skeleton: Skeleton,
    filled: list[tuple[int, int]],
    wanted: list[int],
    markers: list[str],
) -> tuple[list[int], list[str]] | None:
    """The marker rendering cut at its markers, read off the skeleton's fill of ``text``.

    ``_MARK_RE.split`` of the skeleton filled with ``markers`` for the ``wanted`` messages
    (``(order, pieces between)``), without filling and searching it: that text is ``text``
    with each wanted message's hole replaced by its marker. ``None`` where that does not hold
    (the guards answer otherwise on a marker, a hole's strip changes its marker, or ``text``
    holds a bracket of the marker's kind): the caller then fills and splits.
    """
    if "\u27e6" in text or "\u27e7" in text:
        return None
    if not skeleton.holds_on(tuple(wanted), tuple(markers)):
        return None
    index = {slot: k for k, slot in enumerate(wanted)}
    order: list[int] = []
    templ: list[str] = []
    pos = 0
    for (slot, ops), (a, b) in zip(skeleton.holes, filled, strict=True):
        k = index.get(slot)
        if k is None:
            continue
        if ops and apply_ops(markers[k], ops) != markers[k]:
            return None
        templ.append(text[pos:a])
        order.append(k)
        pos = b
    templ.append(text[pos:])
    return order, templ


# A span plan: per located message ``(message, its hole, the next located one's hole or -1,
# how far the span starts before the hole, how far it ends after it)``.
_SpanPlan = tuple[tuple[int, int, int, int, int], ...]


def _by_plan(
    text: str,
    msgs: list[dict[str, Any]],
    wanted: list[int],
    skeleton: Skeleton,
    filled: list[tuple[int, int]],
    heads: _Headers,
) -> dict[int, tuple[int, int]] | None:
    """What ``_by_markers`` finds, from the hole positions of ``text``, or ``None``.

    ``_by_markers`` aligns the marker rendering with ``text``; on a skeleton's fill, all of that
    alignment but two searches depends only on the skeleton and which messages are wanted, so it
    is worked out once (``_make_span_plan``). Per conversation there remain the checks that the
    text after each slot is not found earlier, inside the content, and that ``text`` holds no
    bracket of the marker's kind. ``None`` where they fail, or where some wanted message is
    empty or the plan cannot be made: the caller then aligns as before.
    """
    if _MARK_OPEN in text or "\u27e7" in text:
        return None
    for i in wanted:
        if not msgs[i]["content"]:
            return None  # left to _locate's fallbacks
    assistant = tuple(msgs[i]["role"] == "assistant" for i in wanted)
    key = ("spans", tuple(wanted), assistant, heads)
    plans = skeleton.derived  # worked out once per skeleton and trained messages
    if key in plans:
        plan = plans[key]
    else:
        plan = _make_span_plan(skeleton, tuple(wanted), assistant, heads)
        if len(plans) < 64:
            plans[key] = plan
    if plan is None:
        return None
    located: dict[int, tuple[int, int]] = {}
    for i, hole, following, before, after in plan:
        a, b = filled[hole]
        if following >= 0:
            a_next = filled[following][0]
            if a_next == b or text.find(text[b:a_next], a) != b:
                return None  # nothing between two slots, or that text inside the content
        located[i] = (a - before, b + after)
    return located


def _make_span_plan(
    skeleton: Skeleton,
    wanted: tuple[int, ...],
    assistant: tuple[bool, ...],
    heads: _Headers,
) -> _SpanPlan | None:
    """The content-independent part of ``_by_markers`` on this skeleton, or ``None``."""
    markers = tuple(_MARK.format(k) for k in range(len(wanted)))
    if not skeleton.holds_on(wanted, markers):
        return None  # the marker rendering takes another path than the fill
    index = {slot: k for k, slot in enumerate(wanted)}
    holes = [h for h, (slot, _) in enumerate(skeleton.holes) if slot in index]
    slots = [skeleton.holes[h][0] for h in holes]
    if slots != list(wanted):
        return None  # a content written twice, or out of order: markers out of order
    plan = []
    for k, hole in enumerate(holes):
        slot, ops = skeleton.holes[hole]
        if ops and apply_ops(markers[k], ops) != markers[k]:
            return None
        if any(name not in ("strip", "lstrip", "rstrip") for name, _ in ops):
            return None  # the slot's text must be a piece of the content
        before = after = 0
        if assistant[k]:
            # the generation header: the last one before the slot, which is in the piece right
            # before the hole when there is one there (else it depends on the contents)
            if heads.header:
                piece = skeleton.pieces[hole]
                found = heads.end_in(piece, 0, len(piece))
                if found is None:
                    return None
                before = len(piece) - found
            # the end of turn: the first one after the slot, in the piece right after the hole
            if heads.eot:
                found = skeleton.pieces[hole + 1].find(heads.eot)
                if found < 0:
                    return None
                after = found + len(heads.eot)
        plan.append((slot, hole, holes[k + 1] if k + 1 < len(holes) else -1, before, after))
    return tuple(plan)
