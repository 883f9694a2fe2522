"""pinned.py, the one fetcher for pinned wheels and sdists: a sha256 mismatch is refused with a
message naming the file and both hashes and leaves nothing behind, a verified file is reused
without download or rehash, members come out of wheels and sdists alike. No network: the archives
are built in tmp_path, and the one test that runs the real pip points it at a local folder
(``--no-index --find-links file://...``)."""

from __future__ import annotations

import hashlib
import io
import tarfile
import zipfile
from pathlib import Path

import pytest

from typed_decisions import pinned
from typed_decisions.errors import ModelDownloadError, ModelIntegrityError
from typed_decisions.pinned import PinnedFile

DATA = b"label,text\nspam,WIN NOW\nham,see you at 6\n"
SHA = hashlib.sha256(DATA).hexdigest()


def _wheel(folder: Path, name: str = "td_fixture", version: str = "1.0", members: dict[str, bytes] | None = None) -> Path:
    """A real (installable) wheel: the member, plus METADATA / WHEEL / RECORD."""
    folder.mkdir(parents=True, exist_ok=True)
    members = {f"{name}/data/file.csv": DATA} if members is None else members
    dist = f"{name}-{version}.dist-info"
    path = folder / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as zf:
        for member, data in members.items():
            zf.writestr(member, data)
        zf.writestr(f"{dist}/METADATA", f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
        zf.writestr(f"{dist}/WHEEL", "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        zf.writestr(f"{dist}/RECORD", "")
    return path


def _sdist(folder: Path, members: dict[str, bytes]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "td-fixture-1.0.tar.gz"
    with tarfile.open(path, "w:gz") as tf:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    return path


class CopyDownloader:
    """Copies the archives of ``source`` into the download folder; records each call."""

    def __init__(self, source: Path):
        self.source, self.calls = source, []

    def __call__(self, requirements, dest: Path, progress: bool) -> None:
        self.calls.append(list(requirements))
        for p in self.source.iterdir():
            (dest / p.name).write_bytes(p.read_bytes())


def _no_download(requirements, dest, progress):
    raise AssertionError(f"downloader called for {requirements}")


def test_fetch_a_wheel_member_verify_and_reuse_without_download_or_rehash(tmp_path, monkeypatch):
    _wheel(tmp_path / "index")
    f = PinnedFile("td-fixture==1.0", "td_fixture/data/file.csv", SHA)
    dl = CopyDownloader(tmp_path / "index")
    target = tmp_path / "files" / "file.csv"
    (path,) = pinned.fetch_files([f], tmp_path / "dl", lambda _: target, downloader=dl)
    assert path == target and path.read_bytes() == DATA and dl.calls == [["td-fixture==1.0"]]
    assert not (tmp_path / "dl").exists()  # the archive is deleted
    assert sorted(p.name for p in target.parent.iterdir()) == ["file.csv", "file.csv.verified"]
    # cached: no download, and the stamp spares the rehash
    monkeypatch.setattr(pinned, "sha256_file", lambda p: pytest.fail("rehashed a verified file"))
    assert pinned.fetch_files([f], tmp_path / "dl", lambda _: target, downloader=_no_download) == [target]


def test_a_sha256_mismatch_is_refused_naming_file_and_both_hashes(tmp_path):
    _wheel(tmp_path / "index")
    wrong = "ab" * 32
    f = PinnedFile("td-fixture==1.0", "td_fixture/data/file.csv", wrong)
    target = tmp_path / "files" / "file.csv"
    with pytest.raises(ModelIntegrityError) as e:
        pinned.fetch_files([f], tmp_path / "dl", lambda _: target, downloader=CopyDownloader(tmp_path / "index"))
    msg = str(e.value)
    assert "td_fixture/data/file.csv" in msg and SHA in msg and f"expected {wrong}" in msg
    assert not target.parent.exists() or list(target.parent.iterdir()) == []  # nothing written, no temp file


def test_a_tampered_cached_file_is_refetched(tmp_path):
    _wheel(tmp_path / "index")
    f = PinnedFile("td-fixture==1.0", "td_fixture/data/file.csv", SHA)
    target = tmp_path / "file.csv"
    dl = CopyDownloader(tmp_path / "index")
    pinned.fetch_files([f], tmp_path / "dl", lambda _: target, downloader=dl)
    target.write_bytes(b"tampered")  # size and mtime change: the stamp no longer holds
    assert not pinned.is_verified(target, SHA)
    pinned.fetch_files([f], tmp_path / "dl", lambda _: target, downloader=dl)
    assert target.read_bytes() == DATA and len(dl.calls) == 2


def test_a_file_without_a_stamp_is_rehashed_once_then_stamped(tmp_path):
    target = tmp_path / "file.csv"
    target.write_bytes(DATA)
    assert not pinned.is_verified(target, SHA)
    assert pinned.is_verified(target, SHA, rehash=True) and pinned.is_verified(target, SHA)
    assert not pinned.is_verified(target, "0" * 64, rehash=True)


def test_sdist_members_come_out_in_one_download(tmp_path):
    a, b = b'{"a": 1}', b'{"b": 2}'
    _sdist(tmp_path / "index", {"td-fixture-1.0/x/task.json": a, "td-fixture-1.0/y/task.json": b,
                                "td-fixture-1.0/setup.py": b""})
    files = [PinnedFile("td-fixture==1.0", f"td-fixture-1.0/{d}/task.json", hashlib.sha256(x).hexdigest(),
                        archive="sdist") for d, x in (("x", a), ("y", b))]
    dl = CopyDownloader(tmp_path / "index")
    paths = pinned.fetch_files(files, tmp_path / "dl", lambda f: tmp_path / "out" / f.member.split("/")[1], downloader=dl)
    assert [p.read_bytes() for p in paths] == [a, b] and len(dl.calls) == 1
    missing = PinnedFile("td-fixture==1.0", "td-fixture-1.0/z.json", "0" * 64, archive="sdist")
    with pytest.raises(ModelIntegrityError, match="has no member 'td-fixture-1.0/z.json'"):
        pinned.fetch_files([missing], tmp_path / "dl", lambda _: tmp_path / "out" / "z", downloader=dl)


def test_open_member_streams_and_names_what_is_missing(tmp_path):
    wheel = _wheel(tmp_path)
    stream, size = pinned.open_member(wheel, "td_fixture/data/file.csv")
    with stream:
        assert size == len(DATA) and stream.read() == DATA
    with pytest.raises(ModelIntegrityError, match=f"{wheel.name} has no member 'nope'"):
        pinned.open_member(wheel, "nope")
    (tmp_path / "bad-1.0-py3-none-any.whl").write_bytes(b"not a zip")
    with pytest.raises(ModelIntegrityError, match="not a readable archive"):
        pinned.open_member(tmp_path / "bad-1.0-py3-none-any.whl", "x")


def test_write_verified_leaves_an_old_file_alone_on_mismatch(tmp_path):
    target = tmp_path / "f.bin"
    pinned.write_verified(target, [b"ab", b"c"], hashlib.sha256(b"abc").hexdigest())
    assert target.read_bytes() == b"abc" and pinned.is_verified(target, hashlib.sha256(b"abc").hexdigest())
    with pytest.raises(ModelIntegrityError, match="expected " + "0" * 64):
        pinned.write_verified(target, [b"xyz"], "0" * 64, hint="delete the cache")
    assert target.read_bytes() == b"abc" and sorted(p.name for p in tmp_path.iterdir()) == ["f.bin", "f.bin.verified"]


def test_pins_are_exact(tmp_path):
    with pytest.raises(ValueError, match="name==version"):
        PinnedFile("td-fixture>=1.0", "m", SHA)
    with pytest.raises(ValueError, match="64 lowercase hex"):
        PinnedFile("td-fixture==1.0", "m", SHA.upper())
    with pytest.raises(ModelDownloadError, match="no wheel for td-fixture==1.0"):
        pinned.ensure_archives(["td-fixture==1.0"], tmp_path, downloader=lambda reqs, dest, progress: None)


def test_the_real_pip_from_a_local_file_index(tmp_path, monkeypatch):
    """``pip_download`` itself, with no network: pip reads a local ``file://`` folder as its index."""
    _wheel(tmp_path / "index")
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", (tmp_path / "index").as_uri())
    monkeypatch.setenv("PIP_DISABLE_PIP_VERSION_CHECK", "1")
    f = PinnedFile("td-fixture==1.0", "td_fixture/data/file.csv", SHA)
    (path,) = pinned.fetch_files([f], tmp_path / "dl", lambda _: tmp_path / "file.csv")
    assert path.read_bytes() == DATA
    with pytest.raises(ModelDownloadError, match="td-fixture==2.0"):
        pinned.pip_download(["td-fixture==2.0"], tmp_path / "dl2", progress=False)
