"""The lock of the README's two commands: read it, check it against every pyproject.toml range, and
check an environment against it.

The lock (requirements/lock-py<XY>-linux-x86_64.txt) is what `pip` resolved for every distribution of
this repository, transitive dependencies included, on the day `scripts/lock.sh` ran. `scripts/setup.sh`
installs with it as a constraints file, so a new release on the index cannot change what a fresh clone
gets; the distributions themselves keep their ranges for users who install them elsewhere.

    python scripts/lockfile.py check-ranges LOCK    # every pyproject requirement is met by LOCK
    python scripts/lockfile.py check-env LOCK       # this interpreter's environment is exactly LOCK
"""

from __future__ import annotations

import sys
import tomllib
from collections.abc import Iterator
from importlib import metadata
from pathlib import Path

from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[1]
OWN = ("typed-decisions-runtime", "typed-decisions-export", "typed-decisions-langchain",
       "typed-decisions-dspy", "typed-decisions-ray")  # installed editable from the tree, never locked
UNLOCKED_EXTRAS = {("pyproject.toml", "gpu")}  # ONNX Runtime's CUDA build: setup.sh never installs it


def lock_path(python: tuple[int, int] | None = None) -> Path:
    """The lock for a Python version (default: this interpreter's) on Linux x86-64."""
    major, minor = python or sys.version_info[:2]
    return ROOT / "requirements" / f"lock-py{major}{minor}-linux-x86_64.txt"


def read_lock(path: Path) -> dict[str, Version]:
    """`name==version` lines (comments and blank lines skipped) → {canonical name: version}."""
    pins: dict[str, Version] = {}
    for n, line in enumerate(path.read_text().splitlines(), 1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        name, sep, version = line.partition("==")
        if not sep:
            raise ValueError(f"{path}:{n}: {line!r} is not a 'name==version' pin")
        pins[canonicalize_name(name)] = Version(version.strip())
    return pins


def pyprojects() -> list[Path]:
    return [ROOT / "pyproject.toml", ROOT / "export" / "pyproject.toml",
            *sorted((ROOT / "integrations").glob("*/pyproject.toml"))]


def requirements() -> Iterator[tuple[Path, Requirement, str | None]]:
    """Every requirement of every distribution, base and extras: (pyproject, requirement, extra)."""
    for path in pyprojects():
        project = tomllib.loads(path.read_text())["project"]
        for spec in project.get("dependencies", []):
            yield path, Requirement(spec), None
        for extra, specs in project.get("optional-dependencies", {}).items():
            for spec in specs:
                yield path, Requirement(spec), extra


def range_problems(pins: dict[str, Version], python: str | None = None) -> list[str]:
    """Each requirement the lock fails: a locked version outside its range, or a package the lock
    lacks (own distributions excepted: they are installed from the tree). Markers are evaluated for
    the lock's Python (default: this interpreter's) on Linux."""
    env = default_environment() | {"sys_platform": "linux", "platform_system": "Linux"}
    if python:
        env |= {"python_version": python, "python_full_version": f"{python}.0"}
    problems = []
    for path, req, extra in requirements():
        if req.marker and not req.marker.evaluate(env | {"extra": extra or ""}):
            continue
        name = canonicalize_name(req.name)
        where = f"{path.relative_to(ROOT)} ({extra or 'dependencies'}): {req}"
        if name in OWN or (str(path.relative_to(ROOT)), extra) in UNLOCKED_EXTRAS:
            continue
        if name not in pins:
            problems.append(f"{where}: not in the lock")
        elif not req.specifier.contains(pins[name], prereleases=True):
            problems.append(f"{where}: the lock has {pins[name]}")
    return problems


def env_problems(pins: dict[str, Version]) -> list[str]:
    """Each installed distribution whose version differs from the lock, or that the lock lacks."""
    problems = []
    for dist in metadata.distributions():
        name = canonicalize_name(dist.metadata["Name"])
        if name in OWN:
            continue
        got = Version(dist.version)
        if name not in pins:
            problems.append(f"{name} {got} is installed but not in the lock")
        elif Version(got.public) != pins[name]:  # torch 2.13.0+cpu is the lock's 2.13.0
            problems.append(f"{name} {got} is installed; the lock has {pins[name]}")
    return sorted(problems)


def main(argv: list[str]) -> int:
    if len(argv) != 2 or argv[0] not in ("check-ranges", "check-env"):
        print(__doc__, file=sys.stderr)
        return 2
    lock = Path(argv[1])
    pins = read_lock(lock)
    problems = range_problems(pins) if argv[0] == "check-ranges" else env_problems(pins)
    for p in problems:
        print(f"{lock.name}: {p}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
