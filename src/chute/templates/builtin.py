r"""Built-in chat templates, written in Python for speed and for exact label spans.

Each renders straight into text plus trained spans (no Jinja, no second render). ``<s>`` and
``</s>`` below stand for the tokenizer's bos and eos tokens; ``[...]`` marks trained text.

============  ===============================================================================
name          one exchange (system S, user U, assistant A)
============  ===============================================================================
chatml        ``<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nU<|im_end|>\n``
              ``<|im_start|>assistant\n[A<|im_end|>]\n`` (Qwen2 / 2.5; Qwen's tool format)
qwen3         chatml plus Qwen3's think blocks: the assistant turns after the last user query
              get ``<think>\nR\n</think>\n\n`` (empty on the final turn without reasoning);
              reasoning of earlier turns is dropped. Byte-identical to Qwen3's own template.
qwen2-vl      chatml with Qwen2-VL's default system prompt ("You are a helpful assistant.")
              when the conversation has none; no tools, no think blocks
qwen2.5-vl    the same (Qwen2.5-VL's template renders a conversation as Qwen2-VL's does)
llama3        ``<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nU<|eot_id|>``
              ``<|start_header_id|>assistant<|end_header_id|>\n\n[A<|eot_id|>]`` (contents
              trimmed; tools as Llama 3.2 writes them; no date header, unlike Llama 3.1/3.2)
llama2        ``<s>[INST] <<SYS>>\nS\n<</SYS>>\n\nU [/INST] [A </s>]``
mistral       ``<s>[INST] S\n\nU [/INST][A</s>]``
vicuna        ``<s>S USER: U ASSISTANT: [A</s>]`` (FastChat v1.1; default S: "A chat between a
              curious user and an artificial intelligence assistant. ...")
llava-v1      vicuna with LLaVA's default system prompt ("... curious human ...")
alpaca        ``<s>S\n\n### Instruction:\nU\n\n### Response:\n[A</s>]\n\n`` (default S: "Below
              is an instruction that describes a task. ...")
raw           ``<s>`` + every message's text, back to back + ``</s>`` (no chat markup)
============  ===============================================================================

Pretraining documents (``text`` conversations) are ``<s>text</s>`` in every template.

Template variables (``Recipe(template_vars=...)``, ``--template-var``) that ``chatml`` and
``qwen3`` read, to reproduce LLaMA-Factory's renderings (docs/guides/migrate-llama-factory.md):
``enable_thinking`` (qwen3: ``false`` prompts with an empty think block, as Qwen3's template
does, so an empty one is not trained; one with reasoning is), ``think_every_turn`` (qwen3: a think
block in every assistant turn, trained), ``train_newline``
(the ``\n`` after a trained ``<|im_end|>`` is trained too), ``tools_blank_line`` (the blank
line before ``# Tools`` even without a system prompt).

Example:
    >>> from chute.sample.conversation import Conversation, Message
    >>> from chute.templates.base import RenderContext
    >>> conv = Conversation([Message("user", "Hi"), Message("assistant", "Hello!")])
    >>> r = BUILTIN["chatml"].render(conv, RenderContext())
    >>> r.text
    '<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nHello!<|im_end|>\n'
    >>> r.trained_text()
    'Hello!<|im_end|>'
"""

from __future__ import annotations

import json
from typing import Any

from chute.errors import SampleError
from chute.sample.conversation import Conversation, Message
from chute.templates.base import Builder, RenderContext, Rendered, Template, train_flags

__all__ = ["BUILTIN", "BuiltinTemplate"]

# Version of the built-in renderings; bump when any output changes (it is in the fingerprint).
BUILTIN_VERSION = 2  # 2: an empty system message before tools keeps its blank line


def _tojson(value: Any, indent: int | None = None) -> str:
    # Hugging Face's `tojson` filter: json.dumps without ASCII escaping.
    return json.dumps(value, ensure_ascii=False, indent=indent)


def _need(token: str | None, what: str, template: str) -> str:
    if not token:
        raise SampleError(
            "template_error",
            f"the {template!r} template writes the tokenizer's {what} token, but this tokenizer "
            f"has none; set it with special_tokens={{{what!r}: ...}}",
        )
    return token


class BuiltinTemplate(Template):
    """Base of the Python templates; ``_turns`` writes the chat, this class the bookkeeping."""

    default_system: str | None = None

    def __init__(self, name: str):
        self.name = name

    def _render(self, conv: Conversation, ctx: RenderContext) -> Rendered:
        b = Builder()
        msgs = conv.messages
        flags = train_flags(conv, ctx.train_on)
        system: str | None
        if msgs[0].role == "system":
            system, sys_train = ctx.content(msgs[0]), flags[0]
            start = 1
        else:
            system, sys_train = (ctx.system or self.default_system), ctx.train_on == "all"
            start = 0
        self._turns(b, conv, ctx, flags, system, sys_train, start)
        return b.result(conv)

    def _turns(
        self,
        b: Builder,
        conv: Conversation,
        ctx: RenderContext,
        flags: list[bool],
        system: str | None,
        sys_train: bool,
        start: int,
    ) -> None:
        raise NotImplementedError

    def spec(self) -> dict[str, Any]:
        return {"name": self.name, "kind": "builtin", "version": BUILTIN_VERSION}


# -- ChatML (Qwen2 / 2.5) and Qwen3 ----------------------------------------------------------

_QWEN_TOOLS_HEAD = (
    "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n<tools>"
)
_QWEN_TOOLS_TAIL = (
    "\n</tools>\n\nFor each function call, return a json object with function name and "
    "arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n"
    '{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call>'
)


def _qwen_tool_calls(m: Message, content: str) -> str:
    out = []
    for k, call in enumerate(m.tool_calls or ()):
        fn = call.get("function", call)
        if (k == 0 and content) or k > 0:
            out.append("\n")
        args = fn.get("arguments")
        args_text = args if isinstance(args, str) else _tojson(args)
        out.append(
            f'<tool_call>\n{{"name": "{fn["name"]}", "arguments": {args_text}}}\n</tool_call>'
        )
    return "".join(out)


class ChatML(BuiltinTemplate):
    supports_tools = True
    control_tokens = ("<|im_start|>", "<|im_end|>")

    def __init__(
        self,
        name: str = "chatml",
        think: bool = False,
        default_system: str | None = None,
        tools: bool = True,
    ):
        super().__init__(name)
        self.think = think
        self.default_system = default_system
        self.supports_tools = tools

    def _turns(
        self,
        b: Builder,
        conv: Conversation,
        ctx: RenderContext,
        flags: list[bool],
        system: str | None,
        sys_train: bool,
        start: int,
    ) -> None:
        t = ctx.train_on == "all"
        msgs = conv.messages
        options = ctx.variables
        if conv.tools:
            b.add("<|im_start|>system\n", t)
            # An empty system message keeps its blank line, as Qwen's templates write it;
            # LLaMA-Factory writes it with no system message at all (tools_blank_line).
            if system is not None or options.get("tools_blank_line"):
                b.add(system or "", sys_train)
                b.add("\n\n", t)
            b.add(_QWEN_TOOLS_HEAD, t)
            for tool in conv.tools:
                b.add("\n" + _tojson(tool), t)
            b.add(_QWEN_TOOLS_TAIL + "<|im_end|>\n", t)
        elif system is not None:
            b.add("<|im_start|>system\n", t)
            b.add(system, sys_train)
            b.add("<|im_end|>\n", t)
        last_query = self._last_query(msgs, ctx) if self.think else -1
        if self.think and options.get("think_every_turn"):
            last_query = -1  # every assistant turn gets its think block (LLaMA-Factory's qwen3)
        train_newline = bool(options.get("train_newline"))
        n = len(msgs)
        for i in range(start, n):
            m, f = msgs[i], flags[i]
            role = m.role
            if role == "user" or role == "system":
                b.add(f"<|im_start|>{role}\n", t)
                b.add(ctx.content(m), f)
                b.add("<|im_end|>\n", t)
            elif role == "assistant":
                content = ctx.content(m)
                b.add("<|im_start|>assistant\n", t)
                if self.think:
                    # under enable_thinking: false the generation prompt ends with an empty
                    # think block, as Qwen3's own template writes it: not trained where empty
                    prompted = options.get("enable_thinking") is False
                    think_flags = (f, t if prompted else f)
                    content = self._think(
                        b, m, content, i, last_query, n, think_flags, last_query < 0
                    )
                b.add(content, f)
                if m.tool_calls:
                    b.add(_qwen_tool_calls(m, content), f)
                b.add("<|im_end|>", f)
                b.add("\n", t or (f and train_newline))
            else:  # tool: consecutive results share one user turn
                if i == 0 or msgs[i - 1].role != "tool":
                    b.add("<|im_start|>user", t)
                b.add("\n<tool_response>\n", t)
                b.add(ctx.content(m), f)
                b.add("\n</tool_response>", t)
                if i == n - 1 or msgs[i + 1].role != "tool":
                    b.add("<|im_end|>\n", t)

    @staticmethod
    def _last_query(msgs: list[Message], ctx: RenderContext) -> int:
        for i in range(len(msgs) - 1, -1, -1):
            m = msgs[i]
            if m.role == "user":
                text = ctx.content(m)
                if not (text.startswith("<tool_response>") and text.endswith("</tool_response>")):
                    return i
        return len(msgs) - 1

    @staticmethod
    def _think(
        b: Builder,
        m: Message,
        content: str,
        i: int,
        last_query: int,
        n: int,
        train: tuple[bool, bool],
        every: bool = False,
    ) -> str:
        """Write the turn's think block, if it has one; ``train``: (with reasoning, empty)."""
        reasoning = ""
        if m.reasoning is not None:
            reasoning = m.reasoning
        elif "</think>" in content:
            reasoning = content.split("</think>")[0].rstrip("\n").split("<think>")[-1].lstrip("\n")
            content = content.split("</think>")[-1].lstrip("\n")
        if every or (i > last_query and (i == n - 1 or reasoning)):
            reasoning = reasoning.strip("\n")
            b.add("<think>\n" + reasoning + "\n</think>\n\n", train[0] if reasoning else train[1])
            return content.lstrip("\n")
        return content

    def generation_prompt(self, before: str, ctx: RenderContext) -> str:
        role = "<|im_start|>assistant\n"
        if self.think and ctx.variables.get("enable_thinking") is False and before.endswith(role):
            return before + "<think>\n\n</think>\n\n"  # Qwen3's prompt under it
        return before

    def spec(self) -> dict[str, Any]:
        # think 2: enable_thinking: false leaves an empty think block untrained (caches built
        # with it trained the block; with think, the spec differs from theirs, so they are refused)
        return {**super().spec(), "think": 2 if self.think else False}


# -- Llama 3 -------------------------------------------------------------------------------

_LLAMA3_TOOLS_INTRO = (
    "Given the following functions, please respond with a JSON for a function call with its "
    "proper arguments that best answers the given prompt.\n\n"
    'Respond in the format {"name": function name, "parameters": dictionary of argument name '
    "and its value}.Do not use variables.\n\n"
)


class Llama3(BuiltinTemplate):
    supports_tools = True
    control_tokens = ("<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>")

    def _turns(
        self,
        b: Builder,
        conv: Conversation,
        ctx: RenderContext,
        flags: list[bool],
        system: str | None,
        sys_train: bool,
        start: int,
    ) -> None:
        t = ctx.train_on == "all"
        msgs = conv.messages
        b.add(ctx.bos or "<|begin_of_text|>", t)
        if system is not None or conv.tools:
            b.add("<|start_header_id|>system<|end_header_id|>\n\n", t)
            if conv.tools:
                b.add("Environment: ipython\n", t)
            b.add((system or "").strip(), sys_train)
            b.add("<|eot_id|>", t)
        first_user_with_tools = start if conv.tools else -1
        for i in range(start, len(msgs)):
            m, f = msgs[i], flags[i]
            if i == first_user_with_tools:
                b.add("<|start_header_id|>user<|end_header_id|>\n\n" + _LLAMA3_TOOLS_INTRO, t)
                for tool in conv.tools or ():
                    b.add(_tojson(tool, indent=4) + "\n\n", t)
                b.add(ctx.content(m).strip(), f)
                b.add("<|eot_id|>", t)
            elif m.role == "assistant":
                b.add("<|start_header_id|>assistant<|end_header_id|>\n\n", t)
                if m.tool_calls:
                    if len(m.tool_calls) != 1:
                        raise SampleError(
                            "template_error",
                            f"message {i}: Llama 3 writes one tool call per turn, this one has "
                            f"{len(m.tool_calls)}",
                        )
                    fn = m.tool_calls[0].get("function", m.tool_calls[0])
                    b.add(
                        f'{{"name": "{fn["name"]}", "parameters": {_tojson(fn.get("arguments"))}}}',
                        f,
                    )
                else:
                    b.add(ctx.content(m).strip(), f)
                b.add("<|eot_id|>", f)
            elif m.role == "tool":
                b.add("<|start_header_id|>ipython<|end_header_id|>\n\n", t)
                # Llama 3.2's template writes `content | tojson` (a string is iterable in Jinja).
                b.add(_tojson(ctx.content(m)), f)
                b.add("<|eot_id|>", t)
            else:
                b.add(f"<|start_header_id|>{m.role}<|end_header_id|>\n\n", t)
                b.add(ctx.content(m).strip(), f)
                b.add("<|eot_id|>", t)


# -- Llama 2, Mistral ----------------------------------------------------------------------


class Llama2(BuiltinTemplate):
    def _turns(
        self,
        b: Builder,
        conv: Conversation,
        ctx: RenderContext,
        flags: list[bool],
        system: str | None,
        sys_train: bool,
        start: int,
    ) -> None:
        t = ctx.train_on == "all"
        bos, eos = ctx.bos or "", _need(ctx.eos, "eos", self.name)
        msgs = conv.messages
        for i in range(start, len(msgs)):
            m, f = msgs[i], flags[i]
            if m.role == "user":
                b.add(bos + "[INST] ", t)
                if i == start and system:
                    b.add("<<SYS>>\n", t)
                    b.add(system.strip(), sys_train)
                    b.add("\n<</SYS>>\n\n", t)
                b.add(ctx.content(m).strip(), f)
                b.add(" [/INST]", t)
            else:
                b.add(" ", t)
                b.add(ctx.content(m).strip() + " " + eos, f)


class Mistral(BuiltinTemplate):
    def _turns(
        self,
        b: Builder,
        conv: Conversation,
        ctx: RenderContext,
        flags: list[bool],
        system: str | None,
        sys_train: bool,
        start: int,
    ) -> None:
        t = ctx.train_on == "all"
        eos = _need(ctx.eos, "eos", self.name)
        b.add(ctx.bos or "", t)
        msgs = conv.messages
        for i in range(start, len(msgs)):
            m, f = msgs[i], flags[i]
            if m.role == "user":
                b.add("[INST] ", t)
                if i == start and system:
                    b.add(system, sys_train)
                    b.add("\n\n", t)
                b.add(ctx.content(m), f)
                b.add(" [/INST]", t)
            else:
                b.add(ctx.content(m) + eos, f)


# -- Vicuna / LLaVA-v1, Alpaca, raw ----------------------------------------------------------


class Vicuna(BuiltinTemplate):
    def __init__(self, name: str, default_system: str):
        super().__init__(name)
        self.default_system = default_system

    def _turns(
        self,
        b: Builder,
        conv: Conversation,
        ctx: RenderContext,
        flags: list[bool],
        system: str | None,
        sys_train: bool,
        start: int,
    ) -> None:
        t = ctx.train_on == "all"
        eos = _need(ctx.eos, "eos", self.name)
        b.add(ctx.bos or "", t)
        if system:
            b.add(system, sys_train)
            b.add(" ", t)
        msgs = conv.messages
        for i in range(start, len(msgs)):
            m, f = msgs[i], flags[i]
            if m.role == "user":
                b.add("USER: ", t)
                b.add(ctx.content(m), f)
                b.add(" ", t)
            else:
                b.add("ASSISTANT: ", t)
                b.add(ctx.content(m) + eos, f)

    def spec(self) -> dict[str, Any]:
        return {**super().spec(), "default_system": self.default_system}


class Alpaca(BuiltinTemplate):
    default_system = (
        "Below is an instruction that describes a task. "
        "Write a response that appropriately completes the request."
    )

    def _turns(
        self,
        b: Builder,
        conv: Conversation,
        ctx: RenderContext,
        flags: list[bool],
        system: str | None,
        sys_train: bool,
        start: int,
    ) -> None:
        t = ctx.train_on == "all"
        eos = _need(ctx.eos, "eos", self.name)
        b.add(ctx.bos or "", t)
        if system:
            b.add(system, sys_train)
            b.add("\n\n", t)
        msgs = conv.messages
        for i in range(start, len(msgs)):
            m, f = msgs[i], flags[i]
            if m.role == "user":
                b.add("### Instruction:\n", t)
                b.add(ctx.content(m), f)
                b.add("\n\n### Response:\n", t)
            else:
                b.add(ctx.content(m) + eos, f)
                if i < len(msgs) - 1:
                    b.add("\n\n", t)


class Raw(BuiltinTemplate):
    def _turns(
        self,
        b: Builder,
        conv: Conversation,
        ctx: RenderContext,
        flags: list[bool],
        system: str | None,
        sys_train: bool,
        start: int,
    ) -> None:
        t = ctx.train_on == "all"
        b.add(ctx.bos or "", t)
        if system:
            b.add(system, sys_train)
        msgs = conv.messages
        for i in range(start, len(msgs)):
            b.add(ctx.content(msgs[i]), flags[i])
        if ctx.eos:
            b.add(ctx.eos, flags[-1] or t)


_VICUNA_SYSTEM = (
    "A chat between a curious user and an artificial intelligence assistant. "
    "The assistant gives helpful, detailed, and polite answers to the user's questions."
)
_LLAVA_SYSTEM = (
    "A chat between a curious human and an artificial intelligence assistant. "
    "The assistant gives helpful, detailed, and polite answers to the human's questions."
)

_QWEN_VL_SYSTEM = "You are a helpful assistant."

BUILTIN: dict[str, Template] = {
    "chatml": ChatML("chatml"),
    "qwen3": ChatML("qwen3", think=True),
    # Qwen2-VL's and Qwen2.5-VL's own template: ChatML, "You are a helpful assistant." when the
    # conversation has no system message, no tools, no think blocks
    "qwen2-vl": ChatML("qwen2-vl", default_system=_QWEN_VL_SYSTEM, tools=False),
    "qwen2.5-vl": ChatML("qwen2.5-vl", default_system=_QWEN_VL_SYSTEM, tools=False),
    "llama3": Llama3("llama3"),
    "llama2": Llama2("llama2"),
    "mistral": Mistral("mistral"),
    "vicuna": Vicuna("vicuna", _VICUNA_SYSTEM),
    "llava-v1": Vicuna("llava-v1", _LLAVA_SYSTEM),
    "alpaca": Alpaca("alpaca"),
    "raw": Raw("raw"),
}
