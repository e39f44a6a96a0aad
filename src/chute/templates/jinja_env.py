"""The Jinja environment chat templates render in: ``transformers``' sandbox and helpers.

``apply_chat_template`` renders in an ``ImmutableSandboxedEnvironment`` with ``trim_blocks``,
``lstrip_blocks``, the ``loopcontrols`` extension, a ``tojson`` filter that keeps non-ASCII
text, and the globals ``raise_exception`` and ``strftime_now``; ``{% generation %}`` blocks
render their body. One difference, on purpose: ``strftime_now`` formats a fixed date
(``TEMPLATE_DATE``, 26 Jul 2024), not today's, so a rendering does not change with the day. chute's environment is the same, plus fast paths for the attribute lookups
chat templates make most (``_Sandbox``), which return exactly what the sandbox returns.

Skeletons (``chute.templates.jinja_skeleton``) need to see every way a template reads a
message's content. Method calls, ``+`` and the str methods are seen by the content itself; three
things read a string without asking it, and the environment reports them when a content is
involved: ``x in text`` (compiled here to ``environment.contains_item``, the same test), a method
of another object called with a content as argument (``'abc'.startswith(content)``), and the
``int``, ``float``, ``wordcount`` filters and the ``in`` test. The results are unchanged.

Example:
    >>> compile_template("{{ messages[0].content | tojson }}").render(messages=[{"content": "é"}])
    '"é"'
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from jinja2 import nodes
from jinja2.compiler import CodeGenerator, Frame
from jinja2.ext import Extension, loopcontrols
from jinja2.runtime import LoopContext
from jinja2.sandbox import ImmutableSandboxedEnvironment
from jinja2.utils import Namespace

from chute.templates.jinja_skeleton import Tracked

__all__ = ["TEMPLATE_DATE", "TemplateRaised", "compile_template"]


class TemplateRaised(Exception):
    """``raise_exception(...)`` called by a template."""


def _raise_exception(message: str) -> None:
    raise TemplateRaised(message)


def _tojson(
    value: Any,
    ensure_ascii: bool = False,
    indent: int | None = None,
    separators: Any = None,
    sort_keys: bool = False,
) -> str:
    return json.dumps(
        value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys
    )


# Templates never read the clock, so the same data renders the same text (and the same cache)
# on any day. ``strftime_now`` formats this date, the one Llama 3.1-3.3 templates write when
# they have no other; a template variable (Llama's ``date_string``) sets another.
TEMPLATE_DATE = datetime(2024, 7, 26)


def _strftime_now(fmt: str) -> str:
    return TEMPLATE_DATE.strftime(fmt)


class _Generation(Extension):
    """``{% generation %}...{% endgeneration %}`` renders its body (spans are found otherwise)."""

    tags = {"generation"}  # noqa: RUF012  (jinja2's Extension API)

    def parse(self, parser: Any) -> list[nodes.Node]:
        next(parser.stream)
        return parser.parse_statements(("name:endgeneration",), drop_needle=True)


_DICT_ATTRIBUTES = frozenset(dir(dict))


class _CodeGenerator(CodeGenerator):
    """Jinja's code generator, with ``a in b`` / ``a not in b`` as ``environment.contains_item``."""

    def visit_Compare(self, node: nodes.Compare, frame: Frame) -> None:  # noqa: N802  (jinja2 API)
        if len(node.ops) != 1 or node.ops[0].op not in ("in", "notin"):
            super().visit_Compare(node, frame)
            return
        self.write("(environment.contains_item(" if node.ops[0].op == "in" else "(not ")
        if node.ops[0].op == "notin":
            self.write("environment.contains_item(")
        self.visit(node.expr, frame)
        self.write(", ")
        self.visit(node.ops[0].expr, frame)
        self.write("))")


def _watching(name: str, function: Any) -> Any:
    """A filter or test that reports a content it reads (its result is unchanged)."""

    def watched(value: Any, *args: Any, **kwargs: Any) -> Any:
        if type(value) is Tracked:
            value.refuse_use(f"the template applies {name} to a content")
        return function(value, *args, **kwargs)

    return watched


class _Sandbox(ImmutableSandboxedEnvironment):
    code_generator_class = _CodeGenerator

    """``transformers``' sandbox, with fast paths for the lookups chat templates make most.

    ``message.role`` on a dict, ``content.startswith`` on a str and ``loop.last`` are three
    quarters of a chat template's render time in the generic sandbox (an exception per dict
    key, abstract-base-class checks per attribute). The fast paths return exactly what the
    sandbox returns: a dict's item, or undefined, when no dict attribute has that name (the
    sandbox's own fallback); a listed plain str method or loop attribute, or a namespace
    variable, which the sandbox passes through unchanged. Everything else (``str.format``,
    which the sandbox wraps; any ``_`` name; dict methods) takes the sandbox's path.
    """

    def getattr(self, obj: Any, attribute: str) -> Any:
        kind = type(obj)
        if kind is dict:
            if attribute not in _DICT_ATTRIBUTES:
                if attribute in obj:
                    return obj[attribute]
                return self.undefined(obj=obj, name=attribute)
        elif (
            (kind is str and attribute in _STR_METHODS)
            or (kind is LoopContext and attribute in _LOOP_ATTRIBUTES)
            or (kind is Namespace and attribute[:1] != "_")
        ):
            value = getattr(obj, attribute, _ABSENT)
            if value is not _ABSENT:
                return value
        return super().getattr(obj, attribute)

    @staticmethod
    def contains_item(item: Any, container: Any) -> bool:
        """``item in container``; a content looked for in other text is reported."""
        if type(item) is Tracked and type(container) is not Tracked:
            item.refuse_use("the template looks for a content inside other text")
        return item in container

    def call(__self, __context: Any, __obj: Any, *args: Any, **kwargs: Any) -> Any:  # noqa: N805
        """The sandbox's call; a content passed to another object's method is reported."""
        for value in (*args, *kwargs.values()):
            if type(value) is Tracked and type(getattr(__obj, "__self__", None)) is not Tracked:
                value.refuse_use("the template passes a content to a function")
        return super().call(__context, __obj, *args, **kwargs)


_ABSENT = object()
# Attributes the sandbox passes through unchanged (it wraps str.format / format_map, so they,
# like anything not listed, take the sandbox's own path).
_STR_METHODS = frozenset(
    [
        "startswith",
        "endswith",
        "split",
        "rsplit",
        "splitlines",
        "strip",
        "lstrip",
        "rstrip",
        "lower",
        "upper",
        "title",
        "capitalize",
        "replace",
        "find",
        "rfind",
        "count",
        "partition",
        "rpartition",
        "join",
        "isdigit",
        "isspace",
    ]
)
_LOOP_ATTRIBUTES = frozenset(
    [
        "index",
        "index0",
        "revindex",
        "revindex0",
        "first",
        "last",
        "length",
        "depth",
        "depth0",
        "previtem",
        "nextitem",
    ]
)


def compile_template(source: str) -> Any:
    """Compile a chat template in chute's sandbox (raises ``jinja2.TemplateError``)."""
    env = _Sandbox(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols, _Generation])
    env.filters["tojson"] = _tojson
    for name in ("int", "float", "wordcount"):
        env.filters[name] = _watching(f"the {name} filter", env.filters[name])
    env.tests["in"] = _watching("the in test", env.tests["in"])
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = _strftime_now
    return env.from_string(source)
