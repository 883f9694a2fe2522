"""Tokenizer files and facts: tokenizer.json, chat_template.jinja and the manifest's `tokenizer`.

The runtime tokenizes with the Rust `tokenizers` library and renders the chat template itself, so
everything it needs is written here: the backend tokenizer, the template string, the special-token
ids, whether the tokenizer prepends BOS (observed, not read from a flag that may lie), and the
added special tokens (content -> id). Prompt encoding for the checks follows the same contract.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

TOKENIZER_FILE = "tokenizer.json"
CHAT_TEMPLATE_FILE = "chat_template.jinja"


def chat_template_of(tokenizer: Any) -> str | None:
    """The model's chat template string, or None (base models). A dict of named templates -> 'default'."""
    template = getattr(tokenizer, "chat_template", None)
    if isinstance(template, dict):
        template = template.get("default")
    return template or None


def observed_add_bos(tokenizer: Any) -> bool:
    """Does `tokenizer("hi")` prepend BOS? Read from behaviour, since `add_bos_token` flags vary.

    >>> observed_add_bos(llama_tokenizer)  # doctest: +SKIP
    True
    """
    bos = tokenizer.bos_token_id
    if bos is None:
        return False
    with_special = tokenizer("hi").input_ids
    without = tokenizer("hi", add_special_tokens=False).input_ids
    return len(with_special) > len(without) and with_special[0] == bos


def write_tokenizer_files(tokenizer: Any, out_dir: Path) -> dict[str, Any]:
    """Write tokenizer.json (+ chat_template.jinja) into out_dir; return the manifest's `tokenizer`."""
    tokenizer.backend_tokenizer.save(str(out_dir / TOKENIZER_FILE))
    template = chat_template_of(tokenizer)
    if template is not None:
        # newline="" keeps the template byte-exact: it is whitespace-sensitive.
        with open(out_dir / CHAT_TEMPLATE_FILE, "w", encoding="utf-8", newline="") as f:
            f.write(template)
    special = {
        tok.content: int(idx)
        for idx, tok in sorted(tokenizer.added_tokens_decoder.items())
        if getattr(tok, "special", False)
    }
    return {
        "file": TOKENIZER_FILE,
        "chat_template_file": CHAT_TEMPLATE_FILE if template is not None else None,
        "add_bos_token": observed_add_bos(tokenizer),
        "bos_token": tokenizer.bos_token,
        "bos_token_id": tokenizer.bos_token_id,
        "eos_token": tokenizer.eos_token,
        "eos_token_id": tokenizer.eos_token_id,
        "pad_token": tokenizer.pad_token,
        "pad_token_id": tokenizer.pad_token_id,
        "special_tokens": special,
    }


def render_chat(tokenizer: Any, user_text: str, system: str | None = None) -> str:
    """The prompt text for one user turn: through the chat template when there is one.

    Without a template (base models) the text is a plain 'Question/Answer' frame.
    """
    if chat_template_of(tokenizer) is None:
        return (f"{system}\n\n" if system else "") + f"Question: {user_text}\nAnswer:"
    messages = ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": user_text}]
    return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)


def encode_prompt(tokenizer: Any, text: str, add_bos: bool) -> list[int]:
    """Token ids as the runtime builds them: no automatic specials, then BOS if the model wants it
    and the template did not already write it."""
    ids = list(tokenizer(text, add_special_tokens=False).input_ids)
    bos = tokenizer.bos_token_id
    if add_bos and bos is not None and (not ids or ids[0] != bos):
        ids = [bos, *ids]
    return ids


def candidate_ids(tokenizer: Any, texts: list[str], *, fallback_vocab: int, want: int = 5) -> list[int]:
    """Distinct first-token ids of `texts` (e.g. 'A'..'E'), topped up with fixed ids when a tiny
    tokenizer maps several of them to one token. Order is kept; at most `want` ids."""
    ids: list[int] = []
    for text in texts:
        enc = tokenizer(text, add_special_tokens=False).input_ids
        if enc and enc[0] not in ids:
            ids.append(int(enc[0]))
    for filler in range(fallback_vocab // 2, fallback_vocab):  # away from the low special ids
        if len(ids) >= want:
            break
        if filler not in ids:
            ids.append(filler)
    return ids[:want]
