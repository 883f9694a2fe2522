"""Tokenizer and chat-template rendering, with template text and user content kept apart.

Injection safety lives here. A prompt is a list of segments: template pieces (written by the
model's chat template: ``<|im_start|>user\\n``) are tokenized with special-token parsing; content
(the system text, the state, the question) is tokenized with special-token parsing OFF, so a state
containing ``<|im_start|>`` or ``</s>`` stays plain text and cannot open a new turn.

The chat template is rendered once per prompt layout with sentinel strings in place of the
content; splitting the rendered text on the sentinels yields the template pieces, whatever the
model family (ChatML, Llama 3, Gemma, ...). The jinja environment mirrors transformers'
(sandboxed, ``trim_blocks``, ``lstrip_blocks``, ``loopcontrols``, ``raise_exception``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import jinja2
from jinja2.sandbox import ImmutableSandboxedEnvironment
from tokenizers import Tokenizer

from .errors import ArtifactError

# Used when a model has no chat template (base models): plain text, the answer after "Answer:".
PLAIN_TEMPLATE = (
    "{% for message in messages %}{{ message['content'] }}\n\n{% endfor %}"
    "{% if add_generation_prompt %}Answer:{% endif %}"
)


@dataclass(frozen=True)
class Segment:
    """A piece of prompt text; ``special`` = template text (special tokens recognised)."""

    text: str
    special: bool


class TextTokenizer:
    """Two views of one ``tokenizer.json``: with and without special-token parsing."""

    def __init__(self, path: str | Path, info: dict[str, Any] | None = None):
        info = info or {}
        self._special = Tokenizer.from_file(str(path))
        self._plain = Tokenizer.from_file(str(path))
        self._plain.encode_special_tokens = True  # "<|im_start|>" in content → ordinary text
        self.add_bos_token: bool = bool(info.get("add_bos_token", False))
        self.bos_token_id: int | None = info.get("bos_token_id")
        self.eos_token_id: int | None = info.get("eos_token_id")
        self.bos_token: str | None = info.get("bos_token")
        self.eos_token: str | None = info.get("eos_token")
        self.pad_token_id: int | None = info.get("pad_token_id")
        self.special_ids: frozenset[int] = frozenset(
            i for i, t in self._special.get_added_tokens_decoder().items() if t.special
        ) | frozenset(info.get("special_tokens", {}).values())

    def encode_plain(self, text: str) -> list[int]:
        """Tokens of user content: special-token strings are NOT recognised."""
        return self._plain.encode(text, add_special_tokens=False).ids

    def encode_template(self, text: str) -> list[int]:
        """Tokens of template text: ``<|im_start|>`` etc. become their special ids."""
        return self._special.encode(text, add_special_tokens=False).ids

    def encode_segments(self, segments: list[Segment]) -> list[list[int]]:
        return [self.encode_template(s.text) if s.special else self.encode_plain(s.text)
                for s in segments]

    def decode(self, ids: list[int]) -> str:
        return self._special.decode(ids, skip_special_tokens=False)

    def token_str(self, token_id: int) -> str | None:
        return self._special.id_to_token(token_id)


def _raise_exception(message: str) -> None:
    raise jinja2.exceptions.TemplateError(message)


def _tojson(value: Any, ensure_ascii: bool = False, indent: int | None = None,
            separators: Any = None, sort_keys: bool = False) -> str:
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                      sort_keys=sort_keys)


def _environment() -> ImmutableSandboxedEnvironment:
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                       extensions=["jinja2.ext.loopcontrols"])
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
    return env


class ChatTemplate:
    """The model's jinja chat template, rendered into template/content segments."""

    def __init__(self, source: str | None, tokenizer: TextTokenizer):
        self.source = source if source is not None else PLAIN_TEMPLATE
        self.is_chat = source is not None
        try:
            self._template = _environment().from_string(self.source)
        except jinja2.TemplateError as e:
            raise ArtifactError(f"the model's chat template does not compile: {e}") from e
        self._tokenizer = tokenizer

    def render_segments(self, messages: list[tuple[str, list[Segment]]]) -> list[Segment]:
        """Render ``[(role, content segments), ...]`` with the generation prompt on.

        Each content segment is replaced by a sentinel before rendering, then put back, so the
        template's own text comes out as ``special=True`` segments and ours as ``special=False``.
        With a ChatML template, one user message of two content pieces renders as (T = template,
        C = content)::

            T"<|im_start|>user\\n"  C"<state>..."  C"Question: ..."  T"<|im_end|>\\n<|im_start|>assistant\\n"

        (SmolLM2's template also puts its default system turn in front when there is none;
        ``tests/test_tokenization.py`` checks the exact segments.)
        """
        sentinels: dict[str, Segment] = {}
        rendered_messages = []
        for role, parts in messages:
            content = ""
            for part in parts:
                key = f"\u2063TD{len(sentinels)}\u2063"
                sentinels[key] = part
                content += key
            rendered_messages.append({"role": role, "content": content})
        tok = self._tokenizer
        try:
            text = self._template.render(
                messages=rendered_messages, add_generation_prompt=True, enable_thinking=False,
                bos_token=tok.bos_token or "", eos_token=tok.eos_token or "", tools=None,
            )
        except jinja2.TemplateError as e:
            raise ArtifactError(f"the model's chat template failed to render: {e}") from e
        segments: list[Segment] = []
        rest = text
        for key, part in sentinels.items():
            head, sep, rest = rest.partition(key)
            if not sep:
                raise ArtifactError("the model's chat template dropped or reordered message "
                                    "content; use a template that renders every message")
            if head:
                segments.append(Segment(head, special=True))
            segments.append(part)
        if rest:
            segments.append(Segment(rest, special=True))
        if tok.add_bos_token and tok.bos_token and not text.startswith(tok.bos_token):
            segments.insert(0, Segment(tok.bos_token, special=True))
        return segments


__all__ = ["ChatTemplate", "PLAIN_TEMPLATE", "Segment", "TextTokenizer"]
