"""Adopting REAL Optimum exports: the adopted directory answers as our own export of the same weights.

Oracle: the same tiny random model (tiny_models.py, seeded) exported by our exporter from the same
Hugging Face folder, whose own self-check compared it with transformers. Optimum's graph comes from
`optimum-cli export onnx --task text-generation-with-past` in a throwaway venv with Optimum's pins
(tests/foreign_exports.py; venv and exports cached on disk). Two architectures: Llama (untied head
stored (H, V), BOS), Qwen2 (head tied to the embedding, read through a Transpose) and Mistral
(sliding window of 8, shorter than the prompts: the engine runs it one row per call).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest
from export_cache import STATES, Lazy, cached_export
from foreign_exports import optimum_export
from td_invariance import QUESTIONS, request, vector
from typed_decisions_export.adopt import adopt_onnx
from typed_decisions_export.adopt.check import CHECKS, TOLERANCES

from typed_decisions.artifacts import load_artifacts
from typed_decisions.decider import Decider

ARCHES = ["llama", "qwen2", "mistral"]
@pytest.fixture(scope="module")
def optimum_folders():
    """arch -> folder with hf/ and onnx/ (Optimum's export), cached on disk."""
    return Lazy(optimum_export)


@pytest.fixture(scope="module")
def adopted(optimum_folders, tmp_path_factory):
    """arch -> (adopted dir, manifest)."""
    root = tmp_path_factory.mktemp("adopted")
    return Lazy(lambda arch: (root / arch, adopt_onnx(optimum_folders[arch] / "onnx", root / arch,
                                                       name=f"adopted-{arch}", progress=False)))


@pytest.fixture(scope="module")
def own_exports(optimum_folders):
    """arch -> (dir, manifest): our exporter on the very HF folder Optimum exported (cached)."""
    from typed_decisions_export import export_model

    def make(arch):
        folder = optimum_folders[arch]
        out = cached_export(f"{folder.name}-own", lambda work: export_model(folder / "hf", work, name=f"own-{arch}", progress=False))
        return out, json.loads((out / "manifest.json").read_text())

    return Lazy(make)


@pytest.mark.parametrize("arch", ARCHES)
def test_adopted_directory_passes_its_self_check_and_loads(adopted, arch):
    out, manifest = adopted[arch]
    check = manifest["self_check"]
    assert check["passed"] and not check["failures"] and check["tolerances"] == TOLERANCES
    for name in CHECKS:
        assert check["results"][name]["rows"] == 3
        for key, bound in TOLERANCES.items():
            assert 0.0 <= check["results"][name][key] <= bound, (name, key)
    assert set(manifest["files"]) == {"model.onnx", "model.onnx.data", "lm_head.npy", "tokenizer.json", "chat_template.jinja"}
    art = load_artifacts(out)  # the runtime's loader verifies every hash
    assert art.lm_head.shape == (512, 64) and art.architecture.num_layers == 2

    import onnxruntime as ort

    session = ort.InferenceSession(str(out / "model.onnx"), providers=["CPUExecutionProvider"])
    layers = [f"{i}.{kv}" for i in range(2) for kv in ("key", "value")]
    assert [i.name for i in session.get_inputs()] == ["input_ids", "attention_mask", "position_ids",
                                                      *(f"past_key_values.{n}" for n in layers)]
    assert [o.name for o in session.get_outputs()] == ["last_hidden_state", *(f"present.{n}" for n in layers)]


@pytest.mark.parametrize("arch", ARCHES)
def test_manifest_names_the_source_and_its_head(adopted, optimum_folders, arch):
    _, manifest = adopted[arch]
    source = manifest["source"]
    assert source["kind"] == "onnx" and source["format"] == "optimum" and source["onnx_file"] == "model.onnx"
    assert source["path"] == str((optimum_folders[arch] / "onnx").resolve()) and len(source["sha256"]) == 64
    assert source["producer"].startswith("pytorch ") and source["transformers_version"] == "4.57.6"
    head = source["lm_head"]
    assert head["op_type"] == "MatMul" and head["tail"] == []
    assert head["tied"] is (arch == "qwen2") and head["stored_transposed"] is (arch == "qwen2")
    assert manifest["architecture"]["sliding_window"] == (8 if arch == "mistral" else None)
    assert manifest["export"]["road"] == "adopt" and manifest["export"]["peak_rss_bytes"] > 0
    assert "torch" not in manifest["versions"] and "transformers" not in manifest["versions"]


@pytest.mark.parametrize("arch", ARCHES)
def test_head_tokenizer_and_architecture_equal_our_export(adopted, own_exports, arch):
    """What the adopter read from Optimum's files is what our exporter read from transformers."""
    a_dir, a = adopted[arch]
    o_dir, o = own_exports[arch]
    np.testing.assert_array_equal(np.load(a_dir / "lm_head.npy"), np.load(o_dir / "lm_head.npy"))
    assert a["architecture"] == o["architecture"]
    assert a["tokenizer"] == o["tokenizer"]
    assert (a_dir / "chat_template.jinja").read_bytes() == (o_dir / "chat_template.jinja").read_bytes()


@pytest.mark.parametrize("arch", ARCHES)
def test_decider_answers_equal_our_export(adopted, own_exports, arch):
    """Every probability of three requests (choice, noul, score), one at a time and batched,
    within 1e-5 of our export of the same weights."""
    mine, theirs = Decider.load(own_exports[arch][0]), Decider.load(adopted[arch][0])
    requests = [request(s) for s in STATES]
    ref = np.stack([vector(r) for r in mine.run_many(requests, use_cache=False)])
    alone = np.stack([vector(theirs.run(r)) for r in requests])
    batched = np.stack([vector(r) for r in theirs.run_many(requests, use_cache=False)])
    assert ref.shape == (3, len(QUESTIONS["team"]["criteria"]) + 1 + len(QUESTIONS["severity"]["criteria"]))
    assert np.abs(alone - ref).max() <= 1e-5 and np.abs(batched - ref).max() <= 1e-5
    # Not a vacuous match: the answers are far from uniform and depend on the state, except under
    # Mistral's sliding window of 8 tokens, which hides the state from the question's readout.
    assert np.abs(ref[:, :3] - 1 / 3).max() > 0.1
    assert bool(np.abs(ref[0] - ref[1]).max() > 1e-3) == (arch != "mistral")


def test_cli_adopts_without_importing_torch(optimum_folders, tmp_path):
    """`typed-decisions adopt SRC --out DIR` in a fresh interpreter: a loadable directory, and
    neither torch nor transformers imported on the way."""
    src, out = optimum_folders["llama"] / "onnx", tmp_path / "cli"
    code = ("import sys; from typed_decisions.cli import main; "
            f"rc = main(['adopt', {str(src)!r}, '--out', {str(out)!r}, '--quiet']); "
            "print('IMPORTED', sorted({m.split('.')[0] for m in sys.modules} & {'torch', 'transformers'})); "
            "sys.exit(rc)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": ""})
    assert done.returncode == 0, done.stderr[-2000:]
    assert "IMPORTED []" in done.stdout
    summary = json.loads(done.stdout[: done.stdout.rindex("IMPORTED")])
    assert summary["self_check_passed"] is True and summary["source"]["format"] == "optimum"
    assert load_artifacts(out).manifest["source"]["lm_head"]["tied"] is False
