"""The graph builder at the 7B shape (issue #32): a Qwen2.5-7B-shaped model with random weights,
written as BF16 safetensors shards one tensor at a time, exported by the builder under
`/usr/bin/time -v` (peak RSS, wall and CPU seconds, bytes written, the bounded self-check's verdict).

    python -m benchmarks.builder_7b [--layers N] [--work /tmp/builder7b] [--free-shards] [--keep]

The source folder (WORK/hf) holds config.json (model_type qwen2, Qwen2.5-7B's shape: hidden 3584,
intermediate 18944, 28 layers, 28 heads, 4 KV heads, head_dim 128, vocab 152064, rope_theta 1e6,
rms_norm_eps 1e-6, q/k/v biases, untied lm_head; `--layers` shrinks it for a quick run), the default
model's tokenizer (tokenizer.json and chat template copied from its export in the cache, a
tokenizer_config.json written from that export's manifest facts) and the weights: normal(0, 0.02)
for matrices and biases, ones for norms, seeded per tensor name, rounded to BF16, in shards of about
`--shard-gb` with model.safetensors.index.json. The writer streams each tensor in 16M-value chunks
into a shard whose header it wrote first, so it never holds more than one chunk.

The first shard holds what the bounded self-check reads after the backbone is written (the
embedding, the final norm, lm_head, the first 2 layers); each later shard holds whole layers in
order. `--free-shards` deletes such a later shard while the export runs, once the export's
`model.onnx.data` has grown past the layer after that shard's last (the builder writes each tensor
after reading it, layers in order, so nothing reads that shard again): the whole BF16 source (15.2 GB at
7B) and the whole float32 export (30.5 GB) then never sit on the disk together. The export itself is the
same process either way; the result records the deletions.

A disk guard stops the export when the file system's free space falls below
`--min-free-gb`. WORK is deleted afterwards, the export failed or not, unless --keep; the time -v
log is kept beside it (WORK.log). Writes benchmarks/results/builder_7b/<model>-<cpuclass>-<date>.json.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import struct
import sys
import time
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks import harness

QWEN25_7B = {
    "hidden_size": 3584, "intermediate_size": 18944, "num_hidden_layers": 28, "num_attention_heads": 28,
    "num_key_value_heads": 4, "head_dim": 128, "vocab_size": 152064, "rope_theta": 1e6, "rms_norm_eps": 1e-6,
    "max_position_embeddings": 32768, "tie_word_embeddings": False,
}
FIRST_LAYERS = 2  # in the first shard: the bounded self-check's prefix of a Qwen2 (prefix_check.prefix_layers)
CHUNK = 1 << 24  # values generated and written at a time (64 MB of float32)
STD = 0.02
GB = 1e9
RSS_TARGET = 4 * GB  # issue #32
DEFAULT_EXPORT = Path.home() / ".cache" / "typed-decisions" / "exports" / "qwen2.5-coder-1.5b"


# --------------------------------------------------------------------------- the folder


def qwen2_config(layers: int | None = None, **shape: Any) -> dict[str, Any]:
    """config.json of a Qwen2 model of Qwen2.5-7B's shape (`shape` overrides, `layers` shrinks it).

    >>> c = qwen2_config(layers=2, hidden_size=64); c["num_hidden_layers"], c["hidden_size"], c["model_type"]
    (2, 64, 'qwen2')
    """
    c = dict(QWEN25_7B, **shape)
    if layers is not None:
        c["num_hidden_layers"] = layers
    return {"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", **c, "hidden_act": "silu",
            "attention_dropout": 0.0, "initializer_range": STD, "use_sliding_window": False,
            "sliding_window": c["max_position_embeddings"], "max_window_layers": c["num_hidden_layers"],
            "bos_token_id": 151643, "eos_token_id": 151645, "use_cache": True, "dtype": "bfloat16"}


def layer_tensors(config: dict[str, Any], i: int) -> list[tuple[str, tuple[int, ...]]]:
    """(Hugging Face name, shape) of decoder layer `i`'s tensors, Qwen2's names and [out, in] layout."""
    h, inter = config["hidden_size"], config["intermediate_size"]
    q, kv = config["num_attention_heads"] * config["head_dim"], config["num_key_value_heads"] * config["head_dim"]
    p = f"model.layers.{i}."
    return [(p + "input_layernorm.weight", (h,)),
            (p + "self_attn.q_proj.weight", (q, h)), (p + "self_attn.q_proj.bias", (q,)),
            (p + "self_attn.k_proj.weight", (kv, h)), (p + "self_attn.k_proj.bias", (kv,)),
            (p + "self_attn.v_proj.weight", (kv, h)), (p + "self_attn.v_proj.bias", (kv,)),
            (p + "self_attn.o_proj.weight", (h, q)),
            (p + "post_attention_layernorm.weight", (h,)),
            (p + "mlp.gate_proj.weight", (inter, h)), (p + "mlp.up_proj.weight", (inter, h)),
            (p + "mlp.down_proj.weight", (h, inter))]


def shard_plan(config: dict[str, Any], shard_bytes: float) -> list[list[tuple[str, tuple[int, ...]]]]:
    """The shards' tensors: first the embedding, final norm, lm_head and the first FIRST_LAYERS
    layers (all the self-check reads), then whole layers in order, a new shard when the next layer
    would take the current one past `shard_bytes` (BF16: 2 bytes a value).

    >>> [len(s) for s in shard_plan(qwen2_config(layers=5, hidden_size=64, vocab_size=512), 1e9)]
    [27, 36]
    """
    v, h, n = config["vocab_size"], config["hidden_size"], config["num_hidden_layers"]
    first = [("model.embed_tokens.weight", (v, h)), ("model.norm.weight", (h,))]
    if not config.get("tie_word_embeddings"):
        first.append(("lm_head.weight", (v, h)))
    shards = [first + [t for i in range(min(FIRST_LAYERS, n)) for t in layer_tensors(config, i)]]
    current: list[tuple[str, tuple[int, ...]]] = []
    for i in range(min(FIRST_LAYERS, n), n):
        layer = layer_tensors(config, i)
        if current and 2 * (_values(current) + _values(layer)) > shard_bytes:
            shards.append(current)
            current = []
        current += layer
    return shards + ([current] if current else [])


def _values(tensors: list[tuple[str, tuple[int, ...]]]) -> int:
    return sum(int(np.prod(shape)) for _, shape in tensors)


def to_bf16(x: np.ndarray) -> np.ndarray:
    """float32 -> BF16 bits (uint16), rounded to nearest even (finite inputs).

    >>> to_bf16(np.array([1.0, -2.0, 1 + 2 ** -8, 1 + 3 * 2 ** -8], np.float32)).tolist() == [
    ...     0x3F80, 0xC000, 0x3F80, 0x3F82]
    True
    """
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    return ((u + np.uint32(0x7FFF) + ((u >> np.uint32(16)) & np.uint32(1))) >> np.uint32(16)).astype(np.uint16)


def tensor_chunks(name: str, shape: tuple[int, ...], seed: int) -> Iterator[np.ndarray]:
    """The tensor's BF16 bits in chunks of at most CHUNK values: ones for a norm, else normal(0, STD)
    from a generator seeded by (seed, crc32(name)), so a tensor does not depend on the others."""
    n = int(np.prod(shape))
    if name.endswith("norm.weight"):
        one = to_bf16(np.ones(min(n, CHUNK), np.float32))
        for start in range(0, n, CHUNK):
            yield one[:min(CHUNK, n - start)]
        return
    rng = np.random.default_rng([seed, zlib.crc32(name.encode())])
    for start in range(0, n, CHUNK):
        x = rng.standard_normal(min(CHUNK, n - start), dtype=np.float32)
        x *= STD
        yield to_bf16(x)


def write_shard(path: Path, tensors: list[tuple[str, tuple[int, ...]]], seed: int) -> int:
    """One safetensors file (8-byte header length, the JSON header padded with spaces to 8 bytes, the
    tensors' bytes in order), each tensor streamed chunk by chunk; returns the file's bytes."""
    header: dict[str, Any] = {"__metadata__": {"format": "pt"}}
    offset = 0
    for name, shape in tensors:
        size = 2 * int(np.prod(shape))
        header[name] = {"dtype": "BF16", "shape": list(shape), "data_offsets": [offset, offset + size]}
        offset += size
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for name, shape in tensors:
            f.writelines(memoryview(chunk).cast("B") for chunk in tensor_chunks(name, shape, seed))
    return 8 + len(text) + offset


def write_weights(folder: Path, config: dict[str, Any], *, seed: int = 0, shard_bytes: float = 2 * GB,
                  log: Callable[[str], None] = print, between: Callable[[], None] | None = None) -> dict[str, Any]:
    """The shards and model.safetensors.index.json in `folder`; returns the index plus `shards`:
    each shard's file, bytes and the layers it holds. `between` runs after each shard (the disk guard)."""
    folder.mkdir(parents=True, exist_ok=True)
    plan = shard_plan(config, shard_bytes)
    weight_map, shards, total = {}, [], 0
    for k, tensors in enumerate(plan, 1):
        file = f"model-{k:05d}-of-{len(plan):05d}.safetensors"
        t0 = time.perf_counter()
        size = write_shard(folder / file, tensors, seed)
        total += size
        layers = sorted({int(n.split(".")[2]) for n, _ in tensors if n.startswith("model.layers.")})
        shards.append({"file": file, "bytes": size, "layers": layers})
        weight_map.update({name: file for name, _ in tensors})
        log(f"wrote {file}: {size / GB:.2f} GB, {len(tensors)} tensors, layers {layers[:1]}..{layers[-1:]} "
            f"in {time.perf_counter() - t0:.0f} s")
        if between is not None:
            between()
    index = {"metadata": {"total_size": 2 * sum(_values(t) for t in plan)}, "weight_map": weight_map}
    (folder / "model.safetensors.index.json").write_text(json.dumps(index, indent=2) + "\n")
    return {**index, "shards": shards, "bytes": total}


def copy_tokenizer(folder: Path, export_dir: Path) -> None:
    """tokenizer.json and the chat template of an export (docs/FORMAT.md), and a tokenizer_config.json
    with that export's special tokens (its manifest's `tokenizer` facts), so that transformers loads
    the same tokenizer from `folder` (PreTrainedTokenizerFast: the tokenizer.json decides)."""
    facts = json.loads((export_dir / "manifest.json").read_text(encoding="utf-8"))["tokenizer"]
    shutil.copyfile(export_dir / facts["file"], folder / "tokenizer.json")
    if facts.get("chat_template_file"):
        shutil.copyfile(export_dir / facts["chat_template_file"], folder / "chat_template.jinja")
    config = {"tokenizer_class": "PreTrainedTokenizerFast", "add_bos_token": facts["add_bos_token"],
              **{k: facts[k] for k in ("bos_token", "eos_token", "pad_token") if facts.get(k) is not None}}
    (folder / "tokenizer_config.json").write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")


def write_folder(folder: Path, config: dict[str, Any], tokenizer_export: Path, **weights: Any) -> dict[str, Any]:
    """config.json, the tokenizer and the weights (write_weights' keywords) of a Hugging Face folder."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    copy_tokenizer(folder, tokenizer_export)
    return write_weights(folder, config, **weights)


# --------------------------------------------------------------------------- the export


def tree_rss(pid: int) -> int:
    """Resident bytes of a process and its descendants (/proc; 0 once it is gone)."""
    total, stack = 0, [pid]
    while stack:
        p = stack.pop()
        try:
            with open(f"/proc/{p}/status") as f:
                total += next((int(line.split()[1]) * 1024 for line in f if line.startswith("VmRSS:")), 0)
            for task in Path(f"/proc/{p}/task").iterdir():
                stack += [int(c) for c in (task / "children").read_text().split()]
        except (OSError, ValueError):
            continue
    return total


def last_step(log: Path) -> str | None:
    """The message of the export's latest progress line (`[typed-decisions-export  12.3s] wrote ...`)
    in the log's last 8 kB; None when that tail holds none (a progress bar's updates only)."""
    try:
        with open(log, "rb") as f:
            f.seek(max(0, f.seek(0, 2) - 8192))
            tail = f.read().decode(errors="replace")
    except OSError:
        return None
    steps = re.findall(r"\[typed-decisions-export +[\d.]+s\] ([^\r\n\[]*)", tail)
    return steps[-1].strip()[:100] if steps else None


class Watcher:
    """Runs beside the export (harness.time_v's `watch`): the load average, the export's resident
    memory by step (the tree's RSS sampled, filed under the latest progress line of the log, so the
    step that reaches the peak shows; sampling misses peaks shorter than its interval, /usr/bin/time's
    figure does not), the disk guard (stops the export below `min_free` bytes free)
    and, with `free_shards`, the deletion of source shards the builder has passed (module docstring)."""

    def __init__(self, folder: Path, out: Path, config: dict[str, Any], shards: list[dict[str, Any]], *,
                 min_free: float, free_shards: bool, log: Callable[[str], None] = print, log_file: Path | None = None):
        self.folder, self.data, self.min_free, self.log = folder, out / "model.onnx.data", min_free, log
        self.log_file = log_file
        self.rss_by_step: dict[str, int] = {}
        self.step = "start (imports)"
        v, h, n = config["vocab_size"], config["hidden_size"], config["num_hidden_layers"]
        per_layer = _values(layer_tensors(config, 0))
        # shard -> data-file bytes once the layer after its last is written (padding only adds bytes)
        self.pending = [(s["file"], 4 * (v * h + (s["layers"][-1] + 2) * per_layer))
                        for s in shards[1:] if free_shards and s["layers"] and s["layers"][-1] + 1 < n]
        self.deleted: list[dict[str, Any]] = []
        self.loads: list[float] = []
        self.min_free_seen = shutil.disk_usage(folder).free
        self.stopped: str | None = None
        self.t0 = time.perf_counter()

    def __call__(self, proc: Any) -> None:
        self.loads.append(os.getloadavg()[0])
        if proc is not None and self.log_file is not None:
            self.step, rss = last_step(self.log_file) or self.step, tree_rss(proc.pid)
            self.rss_by_step[self.step] = max(self.rss_by_step.get(self.step, 0), rss)
        free = shutil.disk_usage(self.folder).free
        self.min_free_seen = min(self.min_free_seen, free)
        if free < self.min_free and self.stopped is None:
            self.stopped = f"stopped: {free / GB:.1f} GB free, below --min-free-gb {self.min_free / GB:.0f}"
            self.log(self.stopped)
            harness.stop(proc)
            return
        size = self.data.stat().st_size if self.data.exists() else 0
        while self.pending and size >= self.pending[0][1]:
            file, _ = self.pending.pop(0)
            (self.folder / file).unlink()
            self.deleted.append({"file": file, "at_seconds": round(time.perf_counter() - self.t0, 1),
                                 "data_bytes_then": size})
            self.log(f"deleted {file} (the export's data file is at {size / GB:.1f} GB)")

    def summary(self) -> dict[str, Any]:
        loads = self.loads or [os.getloadavg()[0]]
        return {"load_avg_1min_during": {"min": min(loads), "mean": round(float(np.mean(loads)), 2),
                                         "max": max(loads), "samples": len(loads)},
                "sampled_rss_bytes_by_step": self.rss_by_step,
                "sampled_peak_step": max(self.rss_by_step, key=self.rss_by_step.get, default=None),
                "min_free_disk_bytes": self.min_free_seen, "shards_deleted_during_export": self.deleted,
                "stopped": self.stopped}


def export_bytes(out: Path) -> dict[str, int]:
    """Bytes of each file the export left (the self-check's scratch folder is gone by then)."""
    return {p.relative_to(out).as_posix(): p.stat().st_size for p in sorted(out.rglob("*")) if p.is_file()}


def self_check_of(out: Path) -> dict[str, Any] | None:
    """The self-check's record: the manifest's, or the failure file a failed export leaves."""
    from typed_decisions_export.layout import SELF_CHECK_FAILURE_FILE

    if (out / "manifest.json").is_file():
        check = json.loads((out / "manifest.json").read_text())["self_check"]
    elif (out / SELF_CHECK_FAILURE_FILE).is_file():
        check = json.loads((out / SELF_CHECK_FAILURE_FILE).read_text())
    else:
        return None
    worst = {key: max(r[key] for r in check["results"].values() if isinstance(r, dict) and key in r)
             for key in ("hidden_rel", "logits_rel", "prob_abs")} if check.get("results") else None
    return {"passed": check["passed"], "failures": check.get("failures"), "prefix": check.get("prefix"),
            "worst": worst, "tolerances": check.get("tolerances"), "reference": check.get("reference")}


def disk_need(config: dict[str, Any], shards: list[int], free_shards: bool) -> dict[str, float]:
    """Bytes on disk at the fullest: the export (builder/disk.py's estimate, 5 % margin) and the source,
    and after the build the self-check's scratch prefix (its layers in float32). With free_shards the
    source is its first shard and, while the builder runs, the two largest others (the one being read,
    the one passed but not yet deleted), or after it the last (never deleted)."""
    from typed_decisions_export.builder import spec_of
    from typed_decisions_export.builder.disk import export_bytes as estimate

    export = estimate(spec_of(config))
    scratch = 4 * FIRST_LAYERS * _values(layer_tensors(config, 0))
    if free_shards and len(shards) > 2:
        during, after = shards[0] + sum(sorted(shards[1:])[-2:]), shards[0] + shards[-1] + scratch
    else:
        during, after = sum(shards), sum(shards) + scratch
    return {"export": export, "scratch": scratch, "source": during, "total": export + max(during, after)}


def mem_available() -> int | None:
    """MemAvailable of /proc/meminfo in bytes (what the rest of the machine leaves), None elsewhere."""
    try:
        with open("/proc/meminfo") as f:
            return next(int(line.split()[1]) * 1024 for line in f if line.startswith("MemAvailable:"))
    except (OSError, StopIteration):
        return None


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--layers", type=int, default=None, help="decoder layers (default 28, Qwen2.5-7B's)")
    p.add_argument("--shape", type=json.loads, default={},
                   help='config keys to override, as JSON (a narrow model for a quick run: \'{"hidden_size": 64, ...}\')')
    p.add_argument("--work", type=Path, default=Path("/tmp/builder7b"), help="source WORK/hf, export WORK/export")
    p.add_argument("--tokenizer-export", type=Path, default=DEFAULT_EXPORT,
                   help="an export whose tokenizer the folder gets (default: the default model's in the cache)")
    p.add_argument("--shard-gb", type=float, default=2.0,
                   help="BF16 GB a later shard holds at most (the first holds its tensors, whatever their size)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--free-shards", action="store_true",
                   help="delete the source shards the builder has passed while it runs (disk; module docstring)")
    p.add_argument("--min-free-gb", type=float, default=12.0, help="stop when the disk's free space falls below")
    p.add_argument("--keep", action="store_true", help="keep WORK (the source folder and the export)")
    p.add_argument("--out", type=Path, default=None, help="result file (default: benchmarks/results/builder_7b/…)")
    p.add_argument("--note", default=None, help="the result file's note (what else ran on the machine)")
    args = p.parse_args(argv)
    load_start, memory_start = os.getloadavg(), mem_available()
    config = qwen2_config(args.layers, **args.shape)
    n = config["num_hidden_layers"]
    model = "qwen2.5-7b-shape-random" + ("" if n == QWEN25_7B["num_hidden_layers"] else f"-{n}l") \
        + ("-narrowed" if args.shape else "")
    folder, out, log_path = args.work / "hf", args.work / "export", args.work.with_name(args.work.name + ".log")
    min_free = args.min_free_gb * GB
    plan = shard_plan(config, args.shard_gb * GB)
    shard_sizes = [2 * _values(s) for s in plan]
    need = disk_need(config, shard_sizes, args.free_shards)
    shutil.rmtree(args.work, ignore_errors=True)
    args.work.parent.mkdir(parents=True, exist_ok=True)
    free = shutil.disk_usage(args.work.parent).free
    print(f"disk: {free / GB:.1f} GB free; this run needs about {need['total'] / GB:.1f} GB at its fullest "
          f"(export {need['export'] / GB:.1f}, source {need['source'] / GB:.1f} on disk at once, self-check "
          f"scratch {need['scratch'] / GB:.1f}) and keeps {args.min_free_gb:.0f} GB free", flush=True)
    if free - need["total"] < min_free:
        hint = "" if args.free_shards else "; --free-shards keeps only part of the source on the disk"
        raise SystemExit(f"not enough disk: {free / GB:.1f} GB free, {need['total'] / GB:.1f} GB needed and "
                         f"{args.min_free_gb:.0f} GB to keep free{hint}")

    def guard() -> None:
        left = shutil.disk_usage(args.work.parent).free
        if left < min_free:
            raise SystemExit(f"stopped writing the source: {left / GB:.1f} GB free, below --min-free-gb")

    try:
        t0 = time.perf_counter()
        written = write_folder(folder, config, args.tokenizer_export, seed=args.seed, shard_bytes=args.shard_gb * GB,
                               log=lambda m: print(m, flush=True), between=guard)
        source = {"seconds": round(time.perf_counter() - t0, 1), "bytes": written["bytes"],
                  "shards": written["shards"], "parameters": written["metadata"]["total_size"] // 2}
        print(f"source: {source['parameters'] / 1e9:.2f} B parameters, {source['bytes'] / GB:.2f} GB in "
              f"{source['seconds']:.0f} s; exporting (log: {log_path}) ...", flush=True)
        cmd = [sys.executable, "-m", "typed_decisions_export.cli", str(folder), "--out", str(out), "--builder", "on"]
        watcher = Watcher(folder, out, config, written["shards"], min_free=min_free, free_shards=args.free_shards,
                          log=lambda m: print(m, flush=True), log_file=log_path)
        run = harness.time_v(cmd, log_path, watch=watcher, interval=0.5, check=False)
        files = export_bytes(out) if out.exists() else {}
        check = self_check_of(out) if out.exists() else None
        results = {
            "export_command": " ".join(["/usr/bin/time -v python -m typed_decisions_export.cli", str(folder),
                                        "--out", str(out), "--builder on"]),
            "shape": {k: config[k] for k in QWEN25_7B}, "mem_available_bytes_at_start": memory_start, "source": source,
            "export": {"returncode": run["returncode"], "wall_seconds": run["seconds"],
                       "user_seconds": run["user_seconds"], "system_seconds": run["system_seconds"],
                       "cpu_percent": run["cpu_percent"], "peak_rss_bytes": run["peak_rss_bytes"],
                       "peak_rss_kbytes": run["peak_rss_bytes"] // 1024, "manifest": (out / "manifest.json").is_file(),
                       "bytes_written": sum(files.values()), "files": files,
                       "disk_estimate_bytes": need["export"], **watcher.summary()},
            "self_check": check,
            "target": {"peak_rss_bytes_at_most": RSS_TARGET, "met": run["returncode"] == 0
                       and run["peak_rss_bytes"] <= RSS_TARGET},
        }
        path = harness.write_result("builder_7b", model, results, command=harness.command("benchmarks.builder_7b", argv),
                                    out=args.out, load_avg_start=load_start, **({"note": args.note} if args.note else {}))
        print(json.dumps({k: v for k, v in results.items() if k != "source"}, indent=1))
        print(f"wrote {path}")
    finally:
        if not args.keep:
            shutil.rmtree(args.work, ignore_errors=True)
    return 0 if run["returncode"] == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
