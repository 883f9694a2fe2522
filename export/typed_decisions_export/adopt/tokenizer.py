"""Tokenizer files and facts of a source folder, read without transformers.

The exporter gets these facts from a transformers tokenizer (tokenizer_files.py); here the same
manifest `tokenizer` block is read from the files transformers saved: `tokenizer.json` (the Rust
tokenizer, copied unchanged), `tokenizer_config.json` (special-token strings, the chat template
when it is not in its own file) and `chat_template.jinja`. Whether BOS is prepended is observed
from the Rust tokenizer's post-processor, as the exporter observes it from transformers.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from ..tokenizer_files import CHAT_TEMPLATE_FILE, TOKENIZER_FILE
from .errors import AdoptError


def _token_text(value: Any) -> str | None:
    """tokenizer_config.json spells a special token as a string or as an AddedToken dict."""
    if isinstance(value, dict):
        return value.get("content")
    return value if isinstance(value, str) else None


def _chat_template(root: Path, config: dict[str, Any]) -> str | None:
    """chat_template.jinja, else tokenizer_config.json's `chat_template` (a string, or a list of
    named templates of which 'default' is used), else None (a base model)."""
    if (root / CHAT_TEMPLATE_FILE).is_file():
        return (root / CHAT_TEMPLATE_FILE).read_text(encoding="utf-8")
    template = config.get("chat_template")
    if isinstance(template, list):
        named = {t.get("name"): t.get("template") for t in template if isinstance(t, dict)}
        template = named.get("default")
    return template or None


def write_tokenizer_files(root: Path, out_dir: Path, model_config: dict[str, Any]) -> dict[str, Any]:
    """Copy tokenizer.json (+ write chat_template.jinja) into out_dir; return the manifest's `tokenizer`."""
    from tokenizers import Tokenizer

    if not (root / TOKENIZER_FILE).is_file():
        raise AdoptError(f"{root}: no {TOKENIZER_FILE} (a fast tokenizer); save the tokenizer with "
                         "transformers' AutoTokenizer(...).save_pretrained into that folder")
    config_path = root / "tokenizer_config.json"
    config = json.loads(config_path.read_text(encoding="utf-8")) if config_path.is_file() else {}
    shutil.copyfile(root / TOKENIZER_FILE, out_dir / TOKENIZER_FILE)
    tok = Tokenizer.from_file(str(out_dir / TOKENIZER_FILE))
    template = _chat_template(root, config)
    if template is not None:
        with open(out_dir / CHAT_TEMPLATE_FILE, "w", encoding="utf-8", newline="") as f:
            f.write(template)  # newline="": the template is whitespace-sensitive

    def token(key: str) -> tuple[str | None, int | None]:
        text = _token_text(config.get(key))
        return text, (tok.token_to_id(text) if text is not None else None)

    bos, bos_id = token("bos_token")
    eos, eos_id = token("eos_token")
    pad, pad_id = token("pad_token")
    if pad_id is None and model_config.get("pad_token_id") is not None:
        pad_id = int(model_config["pad_token_id"])
        pad = tok.id_to_token(pad_id)
    with_special = tok.encode("hi", add_special_tokens=True).ids
    without = tok.encode("hi", add_special_tokens=False).ids
    add_bos = bos_id is not None and len(with_special) > len(without) and with_special[0] == bos_id
    special = {t.content: int(i) for i, t in sorted(tok.get_added_tokens_decoder().items()) if t.special}
    return {
        "file": TOKENIZER_FILE,
        "chat_template_file": CHAT_TEMPLATE_FILE if template is not None else None,
        "add_bos_token": add_bos,
        "bos_token": bos,
        "bos_token_id": bos_id,
        "eos_token": eos,
        "eos_token_id": eos_id,
        "pad_token": pad,
        "pad_token_id": pad_id,
        "special_tokens": special,
    }


__all__ = ["write_tokenizer_files"]
