r"""What every chat template shares.

The rendered result, the context it renders in, the label policy, and the rendering of
pretraining documents.

A template turns a ``Conversation`` into ``Rendered``: the full text, the character spans whose
tokens are trained, and the media parts in the order their placeholders appear. Tokenizing and
masking happen afterwards, once, over the whole text (``chute.recipe.encode``), so the ids are exactly
those of encoding the rendered text.

Which messages are trained (``train_on``):

* ``assistant`` (default): every assistant turn, from the end of its header (``<|im_start|>
  assistant\n``) through its end-of-turn token (``<|im_end|>``);
* ``last``: only the last assistant turn;
* ``all``: every token, template text included (``train_on_input``).

A message's ``loss`` flag (``True``/``False``) overrides the policy for that message.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from chute.errors import ConfigError, SampleError
from chute.sample.conversation import Conversation, Message, Part

__all__ = [
    "TRAIN_ON",
    "Builder",
    "RenderContext",
    "Rendered",
    "Template",
    "render_document",
    "train_flags",
]

TRAIN_ON = ("assistant", "last", "all")


@dataclass(slots=True)
class Rendered:
    """A rendered conversation: text, trained character spans ``[start, end)``, media in order."""

    text: str
    spans: list[tuple[int, int]]
    media: list[Part]

    def trained_text(self) -> str:
        """The trained characters, spans joined (for inspection and tests)."""
        return "".join(self.text[a:b] for a, b in self.spans)


@dataclass
class RenderContext:
    """What a template needs besides the conversation.

    Attributes:
        bos: the tokenizer's beginning-of-sequence token text, or ``None``.
        eos: its end-of-sequence token text, or ``None``.
        media_text: kind -> the text one media item renders as (e.g. ``"<|vision_start|>
            <|image_pad|><|vision_end|>"``); it contains the kind's media token once.
        train_on: ``assistant``, ``last`` or ``all``.
        system: a system prompt for conversations that have none (``None``: the template's
            default, if it has one).
        variables: extra variables for Jinja templates (``enable_thinking``, ``date_string``).
    """

    bos: str | None = None
    eos: str | None = None
    media_text: dict[str, str] = field(default_factory=dict)
    train_on: str = "assistant"
    system: str | None = None
    variables: dict[str, Any] = field(default_factory=dict)
    special: dict[str, str | None] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.train_on not in TRAIN_ON:
            raise ConfigError(
                f"expected one of {', '.join(TRAIN_ON)}, got {self.train_on!r}", param="train_on"
            )

    def content(self, message: Message) -> str:
        """A message's text with each media part written as its media text."""
        content = message.content
        if isinstance(content, str):
            return content
        media_text = self.media_text
        return "".join(p.value if p.kind == "text" else media_text[p.kind] for p in content)


class Builder:
    """Accumulates rendered text and the spans of it that are trained."""

    __slots__ = ("chunks", "flags")

    def __init__(self) -> None:
        self.chunks: list[str] = []
        self.flags: list[bool] = []

    def add(self, text: str, train: bool = False) -> None:
        self.chunks.append(text)
        self.flags.append(train)

    def result(self, conv: Conversation) -> Rendered:
        """Join the text; trained spans are merged runs of trained, non-empty chunks."""
        spans: list[tuple[int, int]] = []
        pos = 0
        start = -1
        for text, train in zip(self.chunks, self.flags, strict=True):
            if not text:
                continue
            if train:
                if start < 0:
                    start = pos
            elif start >= 0:
                spans.append((start, pos))
                start = -1
            pos += len(text)
        if start >= 0:
            spans.append((start, pos))
        return Rendered("".join(self.chunks), spans, conv.media() if conv.has_media() else [])


def train_flags(conv: Conversation, train_on: str) -> list[bool]:
    """Whether each message is trained, by policy then by its own ``loss`` flag.

    Example:
        >>> from chute.sample.conversation import Message
        >>> c = Conversation([Message("user", "a"), Message("assistant", "b"),
        ...                   Message("user", "c"), Message("assistant", "d", loss=False)])
        >>> train_flags(c, "assistant"), train_flags(c, "last")
        ([False, True, False, False], [False, False, False, False])
    """
    msgs = conv.messages
    if train_on == "assistant":
        flags = [m.role == "assistant" for m in msgs]
    elif train_on == "last":
        flags = [False] * len(msgs)
        for i in range(len(msgs) - 1, -1, -1):
            if msgs[i].role == "assistant":
                flags[i] = True
                break
    else:
        flags = [True] * len(msgs)
    for i, m in enumerate(msgs):
        if m.loss is not None:
            flags[i] = m.loss
    return flags


def render_document(conv: Conversation, ctx: RenderContext) -> Rendered:
    """A ``text`` conversation: ``bos + text + eos``, every token trained (unless ``loss=False``)."""
    b = Builder()
    train = conv.messages[0].loss is not False
    if ctx.bos:
        b.add(ctx.bos, train)
    for m in conv.messages:
        b.add(ctx.content(m), train)
    if ctx.eos:
        b.add(ctx.eos, train)
    return b.result(conv)


class Template:
    """A chat template: ``render(conv, ctx) -> Rendered`` plus an identity for fingerprints."""

    name = "template"
    supports_tools = False
    # the markup tokens the model is trained to emit and read: each one token in a vocabulary
    # made for this template (a Jinja template's are its own tokenizer's)
    control_tokens: tuple[str, ...] = ()

    def render(self, conv: Conversation, ctx: RenderContext) -> Rendered:
        if conv.kind == "text":
            rendered = render_document(conv, ctx)
        else:
            if not self.supports_tools:
                _refuse_tools(conv, self.name)
            rendered = self._render(conv, ctx)
        if rendered.media and rendered.spans:
            rendered = untrain_media_text(rendered, ctx.media_text)
        return rendered

    def _render(self, conv: Conversation, ctx: RenderContext) -> Rendered:
        raise NotImplementedError

    def spec(self) -> dict[str, Any]:
        """What identifies the template's output (for the recipe fingerprint)."""
        return {"name": self.name}

    def missing_control_tokens(self, tokenizer: Any) -> list[str]:
        """The template's markup tokens (``control_tokens``) ``tokenizer`` has no token for.

        A vocabulary without them encodes ``<|im_end|>`` as six text pieces: the model is never
        taught its real end-of-turn token; almost always the wrong template for the tokenizer.
        """
        return [t for t in self.control_tokens if tokenizer.token_to_id(t) is None]

    def generation_prompt(self, before: str, ctx: RenderContext) -> str:
        """The generation prompt of a turn whose trained text starts after ``before``.

        ``before`` itself, unless the turn departs from the generation header: Qwen3 under
        ``enable_thinking: false`` prompts with an empty think block, which a turn with
        reasoning does not write; its trained text starts after the role header
        (``<|im_start|>assistant``) and the prompt TRL encodes (``add_generation_prompt``) goes
        on with ``<think>...``.
        """
        return before

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r})"


def untrain_media_text(rendered: Rendered, media_text: dict[str, str]) -> Rendered:
    """``rendered`` with the whole text of each media item out of its trained spans.

    A media item's text is more than its token (Qwen2-VL: ``<|vision_start|><|image_pad|>
    <|vision_end|>``); the tokens are never trained, and neither are the markers around them:
    an image in an assistant turn or a caption record trained the markers alone.

    Example:
        >>> r = Rendered("a<s><i></s>b", [(0, 12)], [Part("image", "x.jpg")])
        >>> untrain_media_text(r, {"image": "<s><i></s>"}).spans
        [(0, 1), (11, 12)]
    """
    cuts = []
    for text in {t for t in media_text.values() if t}:
        at = rendered.text.find(text)
        while at >= 0:
            cuts.append((at, at + len(text)))
            at = rendered.text.find(text, at + len(text))
    if not cuts:
        return rendered
    cuts.sort()
    spans = []
    for a, b in rendered.spans:
        for c, d in cuts:
            if d <= a or c >= b:
                continue
            if c > a:
                spans.append((a, c))
            a = max(a, d)
        if a < b:
            spans.append((a, b))
    return Rendered(rendered.text, spans, rendered.media)


def _refuse_tools(conv: Conversation, name: str) -> None:
    if conv.tools or any(m.role == "tool" or m.tool_calls for m in conv.messages):
        raise SampleError(
            "template_error",
            f"the {name!r} template has no way to write tools, tool calls or tool results; use "
            f"'chatml', 'qwen3', 'llama3' or the model's own Jinja template for tool-use data",
        )
