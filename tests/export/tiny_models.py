"""Tiny random-weight models for the exporter tests, built offline (no hub, no download).

Every model has 2 layers and hidden size 64 so that an export plus self-check takes seconds on 2
cores. Tokenizers are byte-level BPEs trained here on a few sentences, with ChatML markers as
special tokens and a ChatML chat template; `llama` and `gemma3` also prepend a BOS token `<s>`.
"""

from __future__ import annotations

from pathlib import Path

CHATML = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
CORPUS = [
    "You are a careful assistant. Answer with the letter of one option.",
    "Is a whale a fish? A) yes B) no. Which is larger, 7 or 12?",
    "The build failed with an undefined reference to main. What is most likely wrong?",
    "Which planet is closest to the Sun? Mercury, Venus, Earth, Mars, Jupiter.",
    "What is 6 times 7? The answer is 42. Water boils at 100 C at sea level.",
    "Which language runs natively in web browsers? JavaScript. HTTP status 404 means not found.",
]
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<s>"]


def build_tokenizer(*, add_bos: bool):
    """A byte-level BPE (any text encodes, no UNK) with ChatML specials; optionally prepends <s>."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=400, special_tokens=SPECIALS, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(CORPUS, trainer)
    if add_bos:
        tok.post_processor = processors.TemplateProcessing(
            single="<s> $A", pair="<s> $A <s> $B", special_tokens=[("<s>", tok.token_to_id("<s>"))]
        )
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token="<s>" if add_bos else None,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
    )
    fast.chat_template = CHATML
    return fast


def tiny_config(arch: str, **overrides):
    """2 layers, hidden 64, vocab 512 (above the tokenizer's ~400), for each architecture under test;
    `overrides` replace any of the keyword arguments below (`layer_types=None`: the class derives them)."""
    config = _tiny_config(arch)
    if not overrides:
        return config
    return type(config)(**{**config.to_diff_dict(), **overrides})


def _tiny_config(arch: str):
    import transformers as tf

    common = dict(vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=2, max_position_embeddings=512)
    if arch == "llama":
        return tf.LlamaConfig(**common, num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=False)
    if arch == "qwen2":
        return tf.Qwen2Config(**common, num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=True)
    if arch == "qwen3":
        return tf.Qwen3Config(**common, num_attention_heads=4, num_key_value_heads=2, head_dim=16)
    if arch == "gemma3":
        # One sliding layer with a window far shorter than the prompts, one full layer, 1 KV head,
        # and a logit soft-cap so that the manifest's soft-cap path is exercised.
        return tf.Gemma3TextConfig(
            **common,
            num_attention_heads=2,
            num_key_value_heads=1,
            head_dim=32,
            sliding_window=8,
            layer_types=["sliding_attention", "full_attention"],
            final_logit_softcapping=30.0,
        )
    if arch == "mistral":
        return tf.MistralConfig(**common, num_attention_heads=4, num_key_value_heads=2, sliding_window=8)
    if arch == "phi3":
        return tf.Phi3Config(**common, num_attention_heads=4, num_key_value_heads=2, pad_token_id=0)
    raise ValueError(arch)


ARCHES = ["llama", "qwen2", "qwen3", "gemma3", "mistral", "phi3"]
ADD_BOS = {"llama": True, "gemma3": True}


def save_tiny_model(arch: str, folder: Path, *, spread_vectors: bool = False, vocab_from_tokenizer: bool = False,
                    config_overrides: dict | None = None) -> Path:
    """Random-weight model + tokenizer saved as a Hugging Face folder (seeded: same weights each run).

    `spread_vectors`: also randomize every 1-D parameter (norm weights around their init, biases),
    which random init leaves at exactly 1 or 0, so that a graph that skips a norm weight or a bias
    differs from one that does not (the graph builder's mutation tests). `vocab_from_tokenizer`: as
    many embedding rows as the tokenizer has tokens (a GGUF file's vocabulary is its token list).
    `config_overrides`: keyword arguments of tiny_config replaced (e.g. more layers)."""
    import torch
    from transformers import AutoModelForCausalLM

    tokenizer = build_tokenizer(add_bos=ADD_BOS.get(arch, False))
    config = tiny_config(arch, **(config_overrides or {}))
    if vocab_from_tokenizer:
        config.vocab_size = len(tokenizer)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config).eval()
    # Random init gives logits near 0 and flat probabilities, which would make the logit checks
    # weak; spread them (and give Gemma's soft-cap of 30 something to cap).
    with torch.no_grad():
        model.get_output_embeddings().weight.mul_(50.0 if arch == "gemma3" else 20.0)
        if spread_vectors:
            gen = torch.Generator().manual_seed(1)
            for param in model.parameters():
                if param.ndim == 1:
                    param.add_(0.3 * torch.randn(param.shape, generator=gen))
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder
