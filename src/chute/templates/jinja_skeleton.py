r"""Jinja chat templates rendered once per conversation *shape*, then filled in.

A chat template's output depends on the messages' contents in few ways: it writes them (maybe
stripped), and it tests them (``'</think>' in content``, ``content.startswith(...)``). So a
conversation is rendered once with every non-empty content replaced by a marker that remembers
what happens to it (``Tracked``), and the result, a *skeleton*, is kept per shape: the roles,
which contents are empty, everything else the template reads (tool calls, reasoning, tools,
variables) by value. A later conversation of the same shape is the skeleton with its contents
written in, without rendering, provided every test the template made on a content gives the
same answer on the new content (the *guards*); then the template would have taken the same path
and written the same text around them.

A skeleton is only made when the template touched contents in ways understood here::

    written     'x' + content, content + 'x', {{ content }}   the marker goes in the output
    stripped    content.strip/lstrip/rstrip(chars), |trim      re-applied to the new content
    tested      in, ==, !=, startswith, endswith, bool, len,   the answer is a guard
                find, count, is...() methods

Anything else (``split``, ``replace``, slicing, iteration, hashing, ``tojson``, ``~``, a
content written by a path that loses the marker's identity) marks the shape as not fillable, and
such conversations are rendered as before. Every marker in the skeleton's output must be one the
tracking placed: a marker that reached the output another way refuses the skeleton too.

Example:
    >>> from chute.templates.jinja_env import compile_template
    >>> t = compile_template(
    ...     "{% for m in messages %}<{{ m.role }}>{{ m.content | trim }}"
    ...     "{% if m.content.endswith('?') %}(q){% endif %};{% endfor %}")
    >>> sk = Skeletons(t)
    >>> def chat(q, a):
    ...     return [{"role": "user", "content": q}, {"role": "assistant", "content": a}]
    >>> skeleton = sk.get(chat("Why not", "So."), None, {}, key="user+assistant")
    >>> skeleton.pieces
    ('<user>', ';<assistant>', ';')
    >>> skeleton.guards[0]  # slot 0, no strip before the test, endswith('?') was False
    (0, (), 'endswith', ('?',), False)
    >>> sk.fill(chat(" Hi ", " Yo"), None, {}, key="user+assistant")  # no render
    '<user>Hi;<assistant>Yo;'
    >>> sk.fill(chat("Hi?", "Yo"), None, {}, key="user+assistant") is None  # a guard fails
    True
"""

from __future__ import annotations

import re
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Skeleton", "Skeletons", "Tracked", "apply_ops"]

SLOT = "\u27e6chute-slot:{}\u27e7"  # ⟦chute-slot:3⟧
_SLOT_CHARS = re.compile("[\u27e6\u27e7]")
_STRIPS = frozenset({"strip", "lstrip", "rstrip"})
_TESTS = frozenset(
    {
        "__contains__",
        "__eq__",
        "__ne__",
        "__len__",
        "__bool__",
        "startswith",
        "endswith",
        "find",
        "rfind",
        "count",
        "isspace",
        "isdigit",
        "isalpha",
        "isalnum",
        "islower",
        "isupper",
        "istitle",
    }
)
# str methods that would let a content reach the output or a decision unseen.
_REFUSED = (
    "__getitem__",
    "__iter__",
    "__hash__",
    "__mod__",
    "__rmod__",
    "__mul__",
    "__rmul__",
    "__lt__",
    "__le__",
    "__gt__",
    "__ge__",
    "__format__",
    "__repr__",
    "__getnewargs__",
    "capitalize",
    "casefold",
    "center",
    "encode",
    "expandtabs",
    "format",
    "format_map",
    "index",
    "join",
    "ljust",
    "lower",
    "partition",
    "removeprefix",
    "removesuffix",
    "replace",
    "rindex",
    "rjust",
    "rpartition",
    "rsplit",
    "split",
    "splitlines",
    "swapcase",
    "title",
    "translate",
    "upper",
    "zfill",
    "isascii",
    "isdecimal",
    "isidentifier",
    "isnumeric",
    "isprintable",
)


class _Record:
    """What one skeleton render saw: the tests made on contents, and whether it must refuse."""

    def __init__(self) -> None:
        self.guards: list[tuple[int, tuple[tuple[str, tuple[Any, ...]], ...], str, Any, Any]] = []
        self.refused: str | None = None

    def refuse(self, why: str) -> None:
        if self.refused is None:
            self.refused = why


class Tracked(str):
    """A string made of template text and (transformed) contents, knowing where each lies.

    ``parts`` lists ``(start, end, slot, ops)``: ``self[start:end]`` is slot ``slot``'s marker
    after ``ops`` (strip calls, which leave a marker as it is).
    """

    parts: tuple[tuple[int, int, int, tuple[tuple[str, tuple[Any, ...]], ...]], ...]
    record: _Record

    @classmethod
    def slot(cls, slot: int, record: _Record) -> Tracked:
        marker = SLOT.format(slot)
        value = cls(marker)
        value.parts = ((0, len(marker), slot, ()),)
        value.record = record
        return value

    def refuse_use(self, why: str) -> None:
        """Mark the skeleton being made as refused (the environment saw an unsafe use)."""
        self.record.refuse(why)

    def _make(self, text: str, parts: Any) -> Tracked:
        out = Tracked(text)
        out.parts = tuple(parts)
        out.record = self.record
        return out

    def _plain(self) -> str:
        return str.__str__(self)

    def _pure(self) -> tuple[int, tuple[tuple[str, tuple[Any, ...]], ...]] | None:
        """``(slot, ops)`` when the whole string is one content, else ``None``."""
        if len(self.parts) == 1 and self.parts[0][:2] == (0, str.__len__(self)):
            return self.parts[0][2], self.parts[0][3]
        return None

    # -- written: concatenation keeps the contents' places --------------------------------

    def __add__(self, other: Any) -> Any:
        if not isinstance(other, str):
            return NotImplemented
        n = str.__len__(self)
        theirs = [(a + n, b + n, s, o) for a, b, s, o in getattr(other, "parts", ())]
        return self._make(self._plain() + str.__str__(other), [*self.parts, *theirs])

    def __radd__(self, other: Any) -> Any:
        if not isinstance(other, str):
            return NotImplemented
        n = str.__len__(other)
        return self._make(
            other + self._plain(), [(a + n, b + n, s, o) for a, b, s, o in self.parts]
        )

    def __str__(self) -> str:
        return self  # Jinja writes str(value): keep the tracking into the output

    # -- stripped ---------------------------------------------------------------------------

    def _strip(self, name: str, chars: Any = None) -> str:
        plain = getattr(self._plain(), name)(chars)
        pure = self._pure()
        if pure is None or plain != self._plain() or not (chars is None or isinstance(chars, str)):
            self.record.refuse(f"{name} on a mix of text and content, or one that cuts a marker")
            return plain
        slot, ops = pure
        return self._make(plain, [(0, str.__len__(plain), slot, (*ops, (name, (chars,))))])

    def strip(self, chars: Any = None) -> str:
        return self._strip("strip", chars)

    def lstrip(self, chars: Any = None) -> str:
        return self._strip("lstrip", chars)

    def rstrip(self, chars: Any = None) -> str:
        return self._strip("rstrip", chars)


def _truth(value: str) -> bool:
    return str.__len__(value) > 0


def _ask(value: str, name: str, args: tuple[Any, ...]) -> Any:
    """``value.name(*args)``, with ``__bool__`` (which str does not define) as truth."""
    return _truth(value) if name == "__bool__" else getattr(str, name)(value, *args)


def _tested(name: str) -> Callable[..., Any]:

    def test(self: Tracked, *args: Any) -> Any:
        result = _ask(self._plain(), name, args)
        pure = self._pure()
        if pure is None or any(isinstance(a, Tracked) for a in args):
            self.record.refuse(f"{name} on a mix of text and content")
        elif result is not NotImplemented:
            self.record.guards.append((pure[0], pure[1], name, args, result))
        return result

    test.__name__ = name
    return test


def _refused(name: str) -> Callable[..., Any]:
    method = getattr(str, name)

    def refuse(self: Tracked, *args: Any, **kwargs: Any) -> Any:
        self.record.refuse(f"the template calls {name} on a content")
        return method(self._plain(), *args, **kwargs)

    refuse.__name__ = name
    return refuse


for _name in _TESTS:
    setattr(Tracked, _name, _tested(_name))
for _name in _REFUSED:
    setattr(Tracked, _name, _refused(_name))


def apply_ops(value: str, ops: tuple[tuple[str, tuple[Any, ...]], ...]) -> str:
    """``value`` with a hole's strips applied (``(("strip", (None,)),)``: ``value.strip()``)."""
    for name, args in ops:
        value = getattr(value, name)(*args)
    return value


_apply = apply_ops


@dataclass(frozen=True)
class Skeleton:
    """A rendering with holes: ``pieces[0] + fill(0) + pieces[1] + ...``, and its guards."""

    pieces: tuple[str, ...]
    holes: tuple[tuple[int, tuple[tuple[str, tuple[Any, ...]], ...]], ...]  # (slot, ops)
    guards: tuple[tuple[int, tuple[tuple[str, tuple[Any, ...]], ...], str, Any, Any], ...]
    # answers of ``holds_on`` already computed: (slots, their contents) -> bool
    _known: dict[Any, bool] = field(default_factory=dict, compare=False, repr=False)
    # what users of the skeleton derive from it once (the span finder's plans), by their key
    derived: dict[Any, Any] = field(default_factory=dict, compare=False, repr=False)

    def holds(self, contents: list[str]) -> bool:
        """Whether every test the template made gives the same answer on ``contents``."""
        for slot, ops, name, args, result in self.guards:
            if _ask(_apply(contents[slot], ops), name, args) != result:
                return False
        return True

    def holds_on(self, slots: tuple[int, ...], values: tuple[str, ...]) -> bool:
        """``holds`` for the guards on ``slots`` only, with ``values`` as their contents.

        Remembered per argument: the span finder asks it of the same markers on every
        conversation of a shape.
        """
        key = (slots, values)
        known = self._known.get(key)
        if known is None:
            given = dict(zip(slots, values, strict=True))
            known = all(
                _ask(_apply(given[slot], ops), name, args) == result
                for slot, ops, name, args, result in self.guards
                if slot in given
            )
            if len(self._known) < 64:
                self._known[key] = known
        return known

    def fill(self, contents: list[str]) -> str:
        """The text with ``contents`` written in."""
        return self.fill_at(contents)[0]

    def fill_at(self, contents: list[str]) -> tuple[str, list[tuple[int, int]]]:
        """``fill(contents)``, and where each hole's text lies in it (``[start, end)``)."""
        out = [self.pieces[0]]
        at: list[tuple[int, int]] = []
        pos = len(self.pieces[0])
        for (slot, ops), piece in zip(self.holes, self.pieces[1:], strict=True):
            value = _apply(contents[slot], ops) if ops else contents[slot]
            end = pos + len(value)
            at.append((pos, end))
            out.append(value)
            out.append(piece)
            pos = end + len(piece)
        return "".join(out), at


class Skeletons:
    """Skeletons of one compiled template, per conversation shape (a bounded cache).

    A refused shape costs its conversations a render more than no skeleton would (the skeleton
    render, then the two of the plain path). When most new shapes are refused (Llama 3.2's
    template on tool results: each record its own shape, each refused), no more are tried;
    shapes already made keep serving. This changes only the speed, never a rendering.

    Args:
        template: the compiled Jinja template (``jinja_env.compile_template``).
        size: shapes kept (least recently used dropped first).
    """

    # Stop making new skeletons once this many were refused and they outnumber the ones made.
    GIVE_UP_AFTER = 32

    def __init__(self, template: Any, size: int = 1024):
        self.template = template
        self.size = size
        self._cache: OrderedDict[Any, Skeleton | str] = OrderedDict()
        self.made = 0
        self.refused = 0

    def get(
        self, msgs: list[dict[str, Any]], tools: Any, variables: dict[str, Any], key: Any
    ) -> Skeleton | None:
        """The skeleton of this shape (rendered on first sight), or ``None`` when refused."""
        found = self._cache.get(key)
        if found is None:
            if self.refused >= self.GIVE_UP_AFTER and self.refused > self.made:
                return None
            found = self._make(msgs, tools, variables)
            if isinstance(found, Skeleton):
                self.made += 1
            else:
                self.refused += 1
            self._cache[key] = found
            if len(self._cache) > self.size:
                self._cache.popitem(last=False)
        else:
            self._cache.move_to_end(key)
        return found if isinstance(found, Skeleton) else None

    def fill(
        self, msgs: list[dict[str, Any]], tools: Any, variables: dict[str, Any], key: Any
    ) -> str | None:
        """The rendering of ``msgs``, or ``None`` when it must be rendered."""
        skeleton = self.get(msgs, tools, variables, key)
        contents = [m["content"] for m in msgs]
        if skeleton is None or not skeleton.holds(contents):
            return None
        return skeleton.fill(contents)

    def _make(
        self, msgs: list[dict[str, Any]], tools: Any, variables: dict[str, Any]
    ) -> Skeleton | str:
        record = _Record()
        marked = [
            {**m, "content": Tracked.slot(i, record)}
            if isinstance(m["content"], str) and m["content"]
            else m
            for i, m in enumerate(msgs)
        ]
        chunks: list[str] = []
        holes: list[tuple[int, int, int, Any]] = []
        n = 0
        try:
            for chunk in self.template.generate(
                messages=marked, tools=tools, add_generation_prompt=False, **variables
            ):
                for a, b, slot, ops in getattr(chunk, "parts", ()):
                    holes.append((n + a, n + b, slot, ops))
                plain = str.__str__(chunk)
                chunks.append(plain)
                n += len(plain)
        except Exception as exc:  # the template refused or failed: the plain path reports it
            return f"the template raised {type(exc).__name__}"
        if record.refused is not None:
            return record.refused
        text = "".join(chunks)
        # every marker character must belong to a hole the tracking placed
        places = {m.start() for m in _SLOT_CHARS.finditer(text)}
        edges = {a for a, _, _, _ in holes} | {b - 1 for _, b, _, _ in holes}
        if places != edges or any(text[a:b] != SLOT.format(s) for a, b, s, _ in holes):
            return "a content reached the output without its marker's tracking"
        pieces, pos = [], 0
        for a, b, _, _ in holes:
            pieces.append(text[pos:a])
            pos = b
        pieces.append(text[pos:])
        return Skeleton(
            tuple(pieces),
            tuple((s, o) for _, _, s, o in holes),
            tuple(record.guards),
        )
