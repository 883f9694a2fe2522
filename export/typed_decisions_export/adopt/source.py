"""What a source folder holds, and whether its graph is one the runtime can drive.

Recognised layouts:

- **Optimum** (`optimum-cli export onnx --task text-generation-with-past`, `ORTModelForCausalLM`):
  `model.onnx` (+ `model.onnx_data`) with inputs `input_ids`, `attention_mask`, `position_ids`,
  `past_key_values.{i}.key|value` and outputs `logits`, `present.{i}.key|value`, beside
  `config.json`, `tokenizer.json`, `tokenizer_config.json`. These names are the format's own
  (docs/FORMAT.md), so nothing is renamed: only `logits` becomes `last_hidden_state`.
- **onnxruntime-genai** (its model builder: `genai_config.json`; inputs `input_ids`,
  `attention_mask`, past; no `position_ids`; GroupQueryAttention): refused, with what it would
  take (see `_GENAI_REFUSAL`).

`inspect_source` only reads the graph's structure (`load_external_data=False`): every refusal
comes before any weight is read or any file is written.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .errors import AdoptError
from .graph import PAST_RE, PRESENT_RE

# Attention kernels of ONNX Runtime's contrib domain. Each takes its own masking inputs
# (seqlens_k / total_sequence_length, key_padding_mask, a packed layout) in place of the padded
# (B, past + seq) attention_mask the engine feeds, with zeros anywhere (docs/FORMAT.md).
FUSED_ATTENTION = {
    "GroupQueryAttention", "MultiHeadAttention", "Attention", "PackedAttention", "PackedMultiHeadAttention",
    "DecoderMaskedMultiHeadAttention", "DecoderMaskedSelfAttention", "PagedAttention", "SparseAttention",
}
REQUIRED_INPUTS = ("input_ids", "attention_mask", "position_ids")
_GENAI_REFUSAL = (
    "onnxruntime-genai builder output ({what}) cannot be adopted yet: its graphs use "
    "GroupQueryAttention, which takes no position_ids and derives each row's positions and valid "
    "length from the attention_mask (seqlens_k / total_sequence_length: one contiguous run of "
    "ones per row), while the engine's batched steps put padding zeros anywhere in the mask (left "
    "padding of a prefill, right padding of earlier suffix steps) and feed explicit positions. "
    "Adopting it needs an engine driver that feeds each row its own lengths with no padding "
    "inside the past, and a float LM head (builder -p fp32 or fp16, not int4's MatMulNBits). "
    "Export the model with Optimum instead (optimum-cli export onnx --task "
    "text-generation-with-past), or from its weights with typed-decisions export."
)


@dataclass
class Source:
    """An adoptable source folder: its graph file, config and tokenizer files."""

    root: Path
    format: str  # "optimum"
    onnx_path: Path
    data_files: list[Path]  # external-data files the graph references
    config: dict[str, Any]
    num_layers: int
    num_kv_heads: int
    head_dim: int
    kv_dtype: str  # "float32" / "float16"
    opset: int
    producer: str  # the graph's producer_name and producer_version


def _dims(value_info) -> list[int | str]:
    return [d.dim_value if d.HasField("dim_value") else d.dim_param for d in value_info.type.tensor_type.shape.dim]


def _read_json(path: Path) -> dict[str, Any]:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise AdoptError(f"{path}: not readable JSON: {e}") from e


def _find_graph(root: Path) -> Path:
    if (root / "genai_config.json").is_file():
        raise AdoptError(_GENAI_REFUSAL.format(what=f"{root / 'genai_config.json'}"))
    for name in ("model.onnx", "decoder_model_merged.onnx", "decoder_with_past_model.onnx"):
        if (root / name).is_file():
            if name != "model.onnx":
                raise AdoptError(f"{root / name}: an older Optimum layout (decoder_model_merged / "
                                 "decoder_with_past, two graphs or an If on use_cache_branch); re-export "
                                 "with a current Optimum, which writes one model.onnx with past inputs")
            return root / name
    found = sorted(p.name for p in root.glob("*.onnx"))
    raise AdoptError(f"{root}: no model.onnx (found: {', '.join(found) or 'no .onnx file'}); pass the "
                     "folder written by optimum-cli export onnx --task text-generation-with-past")


def _check_inputs(path: Path, graph, model_type: str | None = None) -> list[str]:
    """The past input names; refuses missing or unknown inputs, naming them."""
    names = [i.name for i in graph.input]
    init = {i.name for i in graph.initializer}
    names = [n for n in names if n not in init]  # old IR: initializers may be listed as inputs
    past = [n for n in names if PAST_RE.match(n)]
    if not past:
        raise AdoptError(f"{path}: no past_key_values.* inputs (inputs: {', '.join(names)}): the graph "
                         "was exported without its KV cache; re-export with --task text-generation-with-past")
    missing = [n for n in REQUIRED_INPUTS if n not in names]
    if missing:
        why = {"position_ids": " (the graph derives positions from attention_mask, which goes wrong when "
                               "the mask has zeros inside, as the engine's batched suffix steps have; "
                               f"Optimum's export of model_type {model_type!r} omits position_ids: export "
                               "this model from its weights with typed-decisions export)"}
        raise AdoptError(f"{path}: no {', '.join(missing)} input{'s' if len(missing) > 1 else ''}"
                         f"{''.join(why.get(m, '') for m in missing)}; inputs are {', '.join(names)}")
    unknown = [n for n in names if n not in REQUIRED_INPUTS and not PAST_RE.match(n)]
    if unknown:
        raise AdoptError(f"{path}: input{'s' if len(unknown) > 1 else ''} {', '.join(unknown)} that the "
                         "engine does not feed (it feeds input_ids, attention_mask, position_ids and "
                         "past_key_values.*)")
    return past


def _check_layers(path: Path, graph, past: list[str]) -> tuple[int, int, int, str]:
    """(num_layers, num_kv_heads, head_dim, kv dtype) from the past inputs; every layer must have a
    key and a value of one shape, and a matching present output."""
    from onnx import helper

    layers = sorted({int(PAST_RE.match(n).group(1)) for n in past})
    if layers != list(range(len(layers))) or len(past) != 2 * len(layers):
        raise AdoptError(f"{path}: past inputs {', '.join(sorted(past)[:6])} are not a key and a value for "
                         "each of layers 0..N-1 (a cache layout other than per-layer KV: unsupported architecture)")
    presents = {o.name for o in graph.output if PRESENT_RE.match(o.name)}
    want = {f"present.{i}.{kv}" for i in layers for kv in ("key", "value")}
    if presents != want:
        raise AdoptError(f"{path}: outputs {', '.join(sorted(want - presents)[:4]) or '(none missing)'} missing"
                         f"{'; unexpected ' + ', '.join(sorted(presents - want)[:4]) if presents - want else ''}: "
                         "each past_key_values.{i}.key|value needs its present.{i}.key|value")
    by_name = {i.name: i for i in graph.input}
    shapes = {tuple(_dims(by_name[n])) for n in past}
    elem = {by_name[n].type.tensor_type.elem_type for n in past}
    first = _dims(by_name[past[0]])
    if len(shapes) != 1 or len(first) != 4 or not all(isinstance(d, int) for d in (first[1], first[3])):
        raise AdoptError(f"{path}: past inputs of shapes {sorted(map(list, shapes))[:3]}; expected one "
                         "shape (batch, num_kv_heads, past_sequence_length, head_dim) for every layer")
    dtype = str(helper.tensor_dtype_to_np_dtype(elem.pop()))
    if dtype not in ("float32", "float16"):
        raise AdoptError(f"{path}: past inputs of type {dtype}; the engine feeds float32 or float16")
    return len(layers), int(first[1]), int(first[3]), dtype


def _check_ops(path: Path, graph) -> None:
    fused: dict[str, int] = {}
    for node in graph.node:
        if node.op_type in FUSED_ATTENTION and node.domain == "com.microsoft":
            fused[node.op_type] = fused.get(node.op_type, 0) + 1
    if fused:
        found = ", ".join(f"{n} x{c}" for n, c in sorted(fused.items()))
        raise AdoptError(f"{path}: fused attention ops ({found}, com.microsoft) take their own masking "
                         "inputs (sequence lengths, key padding) instead of the padded (batch, past + seq) "
                         "attention_mask the engine feeds with zeros anywhere; adopt the unfused graph "
                         "(optimum-cli export onnx without ORT optimisation, or before onnxruntime's "
                         "transformers optimizer fused it)")


def _check_config(root: Path, config: dict[str, Any]) -> None:
    if config.get("is_encoder_decoder"):
        raise AdoptError(f"{root / 'config.json'}: an encoder-decoder model ({config.get('model_type')}); "
                         "only decoder-only causal LMs are supported")
    if "text_config" in config:
        raise AdoptError(f"{root / 'config.json'}: a multimodal model ({config.get('model_type')}, with a "
                         "text_config); adopt an export of its text decoder alone")


def inspect_source(src: str | Path) -> Source:
    """Recognise `src` and check, from the graph's structure alone, that it can be adopted."""
    import onnx

    root = Path(src).expanduser().resolve()
    if not root.is_dir():
        raise AdoptError(f"{root}: not a folder; pass the folder an ONNX export was written to")
    path = _find_graph(root)
    if not (root / "config.json").is_file():
        raise AdoptError(f"{root}: no config.json beside {path.name}; the adopter reads the architecture from it")
    config = _read_json(root / "config.json")
    _check_config(root, config)
    model = onnx.load(str(path), load_external_data=False)
    _check_ops(path, model.graph)  # first: a fused kernel explains missing inputs (position_ids) too
    past = _check_inputs(path, model.graph, config.get("model_type"))
    num_layers, kv_heads, head_dim, kv_dtype = _check_layers(path, model.graph, past)
    locations = sorted({
        entry.value for init in model.graph.initializer for entry in init.external_data if entry.key == "location"
    })
    opset = max((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), default=0)
    return Source(root=root, format="optimum", onnx_path=path, data_files=[root / loc for loc in locations],
                  config=config, num_layers=num_layers, num_kv_heads=kv_heads, head_dim=head_dim,
                  kv_dtype=kv_dtype, opset=opset,
                  producer=f"{model.producer_name} {model.producer_version}".strip())


__all__ = ["FUSED_ATTENTION", "Source", "inspect_source"]
