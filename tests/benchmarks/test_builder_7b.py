"""benchmarks/builder_7b.py on a narrow Qwen2 (hidden 64): the folder writer's safetensors shards read
back by safetensors itself (every tensor, its dtype and shape, the index), seeded and independent of
the chunking, never holding a whole tensor; the watcher frees only the shards the builder has passed;
and (model tier) the whole benchmark: the graph builder exports the written folder, its self-check
passes with the passed shards deleted during the export, and the result file has the schema."""

from __future__ import annotations

import json
import tracemalloc
from pathlib import Path

import numpy as np
import pytest
from safetensors import safe_open

from benchmarks import builder_7b as b
from benchmarks.harness import problems, read_results

NARROW = {"hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4, "num_key_value_heads": 2,
          "head_dim": 16, "vocab_size": 512}
CHATML = ("{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + "
          "'<|im_end|>' + '\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}")


def expected(config: dict) -> dict[str, tuple[int, ...]]:
    """Every tensor of a Qwen2 checkpoint with an untied head, by transformers' names (written out
    here, not taken from the writer)."""
    h, i, v = config["hidden_size"], config["intermediate_size"], config["vocab_size"]
    q, kv = config["num_attention_heads"] * config["head_dim"], config["num_key_value_heads"] * config["head_dim"]
    out = {"model.embed_tokens.weight": (v, h), "model.norm.weight": (h,), "lm_head.weight": (v, h)}
    for n in range(config["num_hidden_layers"]):
        p = f"model.layers.{n}."
        out |= {p + "input_layernorm.weight": (h,), p + "post_attention_layernorm.weight": (h,),
                p + "self_attn.q_proj.weight": (q, h), p + "self_attn.q_proj.bias": (q,),
                p + "self_attn.k_proj.weight": (kv, h), p + "self_attn.k_proj.bias": (kv,),
                p + "self_attn.v_proj.weight": (kv, h), p + "self_attn.v_proj.bias": (kv,),
                p + "self_attn.o_proj.weight": (h, q), p + "mlp.gate_proj.weight": (i, h),
                p + "mlp.up_proj.weight": (i, h), p + "mlp.down_proj.weight": (h, i)}
    return out


def bf16_values(path: Path, name: str) -> np.ndarray:
    """A BF16 tensor widened to float32, from safetensors' own header offsets (numpy has no bfloat16)."""
    with open(path, "rb") as f:
        n = int.from_bytes(f.read(8), "little")
        start, stop = json.loads(f.read(n))[name]["data_offsets"]
    raw = np.fromfile(path, dtype=np.uint16, count=(stop - start) // 2, offset=8 + n + start)
    return (raw.astype(np.uint32) << 16).view(np.float32)


def test_the_writer_shards_read_back_by_safetensors_with_every_shape_and_dtype(tmp_path):
    config = b.qwen2_config(layers=5, **NARROW)
    # a layer is 37,120 BF16 values (74 kB): 150 kB shards hold two layers each after the first shard
    index = b.write_weights(tmp_path, config, shard_bytes=150e3, log=lambda m: None)
    want = expected(config)
    on_disk = json.loads((tmp_path / "model.safetensors.index.json").read_text())
    assert on_disk == {k: index[k] for k in ("metadata", "weight_map")}
    assert set(on_disk["weight_map"]) == set(want)
    assert on_disk["metadata"]["total_size"] == 2 * sum(int(np.prod(s)) for s in want.values())
    assert [s["layers"] for s in index["shards"]] == [[0, 1], [2, 3], [4]]
    first = {n for n, f in on_disk["weight_map"].items() if f == index["shards"][0]["file"]}
    assert {"model.embed_tokens.weight", "model.norm.weight", "lm_head.weight"} <= first  # what the self-check reads
    seen = set()
    for shard in index["shards"]:
        path = tmp_path / shard["file"]
        assert path.stat().st_size == shard["bytes"]
        with safe_open(str(path), framework="numpy") as f:
            names = set(f.keys())
            assert names == {n for n, file in on_disk["weight_map"].items() if file == shard["file"]}
            assert f.metadata() == {"format": "pt"}
            for name in names:
                s = f.get_slice(name)
                assert (s.get_dtype(), tuple(s.get_shape())) == ("BF16", want[name]), name
        for name in names:
            x = bf16_values(path, name)
            assert x.size == int(np.prod(want[name]))
            if name.endswith("norm.weight"):
                assert np.all(x == 1.0), name
            elif x.size >= 4096:
                assert abs(float(x.std()) - b.STD) < 0.1 * b.STD and abs(float(x.mean())) < 0.1 * b.STD, name
        seen |= names
    assert seen == set(want)


def test_the_writer_is_seeded_per_tensor_and_its_chunks_do_not_show(tmp_path, monkeypatch):
    config = b.qwen2_config(layers=2, **NARROW)
    b.write_weights(tmp_path / "a", config, seed=3, log=lambda m: None)
    monkeypatch.setattr(b, "CHUNK", 1001)  # every matrix in many odd-sized chunks
    tracemalloc.start()
    b.write_weights(tmp_path / "b", config, seed=3, log=lambda m: None)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    b.write_weights(tmp_path / "c", config, seed=4, log=lambda m: None)
    file = "model-00001-of-00001.safetensors"
    assert (tmp_path / "a" / file).read_bytes() == (tmp_path / "b" / file).read_bytes()
    assert (tmp_path / "a" / file).read_bytes() != (tmp_path / "c" / file).read_bytes()
    # the writer holds a chunk, never a tensor: the embedding alone is 512 x 64 float32 = 131 kB
    assert peak < 512 * 64 * 4 / 2, peak


def test_the_watcher_frees_only_shards_whose_layers_the_builder_has_passed(tmp_path):
    config = b.qwen2_config(layers=6, **NARROW)
    folder, out = tmp_path / "hf", tmp_path / "export"
    index = b.write_weights(folder, config, shard_bytes=150e3, log=lambda m: None)
    assert [s["layers"] for s in index["shards"]] == [[0, 1], [2, 3], [4, 5]]
    out.mkdir()
    watch = b.Watcher(folder, out, config, index["shards"], min_free=0, free_shards=True, log=lambda m: None)
    layer = b._values(b.layer_tensors(config, 0))
    data = out / "model.onnx.data"
    for written, files in [(0, 3), (512 * 64 + 4 * layer, 3), (512 * 64 + 5 * layer - 1, 3),
                           (512 * 64 + 5 * layer, 2), (512 * 64 + 6 * layer + 64, 2)]:
        with open(data, "wb") as f:
            f.truncate(4 * written)  # float32 bytes of the embedding and `written - embedding` layer values
        watch(None)
        assert len(list(folder.glob("*.safetensors"))) == files, written
    assert [d["file"] for d in watch.deleted] == [index["shards"][1]["file"]]  # the last shard: never needed
    assert not b.Watcher(folder, out, config, index["shards"], min_free=0, free_shards=False).pending


@pytest.fixture
def tokenizer_export(tmp_path) -> Path:
    """What copy_tokenizer reads of an export: a byte-level BPE with ChatML specials, the chat
    template, and the manifest's tokenizer facts."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=400, special_tokens=["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(["Is a whale a fish? A) yes B) no.", "Answer with the letter of one option."], trainer)
    d = tmp_path / "tok"
    d.mkdir()
    tok.save(str(d / "tokenizer.json"))
    (d / "chat_template.jinja").write_text(CHATML)
    facts = {"file": "tokenizer.json", "chat_template_file": "chat_template.jinja", "add_bos_token": False,
             "bos_token": None, "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"}
    (d / "manifest.json").write_text(json.dumps({"tokenizer": facts}))
    return d


@pytest.mark.model
def test_the_benchmark_exports_a_narrow_model_with_passed_shards_freed(tmp_path, tokenizer_export):
    work, result = tmp_path / "work", tmp_path / "result.json"
    code = b.main(["--layers", "6", "--shape", json.dumps(NARROW), "--shard-gb", "0.00015", "--free-shards",
                   "--min-free-gb", "0", "--work", str(work), "--tokenizer-export", str(tokenizer_export),
                   "--out", str(result), "--keep"])
    assert code == 0
    doc = json.loads(result.read_text())
    assert problems(doc) == [] and doc["tool"] == "builder_7b"
    res = read_results(result)
    assert res["export"]["returncode"] == 0 and res["export"]["manifest"] and res["target"]["met"]
    assert res["self_check"]["passed"], res["self_check"]
    assert res["self_check"]["prefix"]["layers"] == b.FIRST_LAYERS  # what the first shard holds
    assert res["export"]["peak_rss_bytes"] > 0 and res["export"]["user_seconds"] > 0
    assert res["export"]["sampled_peak_step"] in res["export"]["sampled_rss_bytes_by_step"]
    manifest = json.loads((work / "export" / "manifest.json").read_text())
    assert manifest["export"]["graph"] == "builder"
    assert res["export"]["bytes_written"] == sum(p.stat().st_size for p in (work / "export").rglob("*") if p.is_file())
    # shards of layers 2-3 freed while the export ran (the self-check after it needs only the first)
    assert [d["file"] for d in res["export"]["shards_deleted_during_export"]] == ["model-00002-of-00003.safetensors"]
    # safetensors' torch side reads the BF16 tensors the builder read
    import torch

    with safe_open(str(work / "hf" / "model-00001-of-00003.safetensors"), framework="pt") as f:
        assert f.get_tensor("lm_head.weight").dtype == torch.bfloat16
    b.main(["--layers", "2", "--shape", json.dumps(NARROW), "--min-free-gb", "0", "--work", str(work),
            "--tokenizer-export", str(tokenizer_export), "--out", str(tmp_path / "again.json")])
    assert not work.exists()  # deleted without --keep


def test_last_step_reads_the_latest_progress_line_and_not_a_progress_bar(tmp_path):
    log = tmp_path / "x.log"
    assert b.last_step(log) is None
    log.write_text("[typed-decisions-export    0.1s] disk: the export writes about 32 GB\n"
                   "[typed-decisions-export   41.1s] builder: writing a qwen2 backbone\n")
    assert b.last_step(log) == "builder: writing a qwen2 backbone"
    with open(log, "a") as f:
        f.write("\rbuilder: tensors: 7 tensors [00:13, model.layers.0.mlp.gate_proj.weight]" * 200)
    assert b.last_step(log) is None  # the watcher keeps its previous step
