"""Packaging promises: a torch-free runtime, a pinned public API, a CLI that explains what is missing."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import typed_decisions

RUNTIME_MODULES = ["typed_decisions", "typed_decisions.cli", "typed_decisions.engine",
                   "typed_decisions.decider", "typed_decisions.server", "typed_decisions.compiler",
                   "typed_decisions.models", "typed_decisions.artifacts", "typed_decisions.evaluation.cli",
                   "typed_decisions.presets.cli", "typed_decisions.client"]
ROOT = Path(__file__).resolve().parents[1]


def run_python(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)


def test_runtime_never_imports_torch_or_transformers():
    code = ("import importlib, sys\n"
            f"for m in {RUNTIME_MODULES!r}: importlib.import_module(m)\n"
            "from typed_decisions import Decider, Choice\n"
            "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'transformers'))\n"
            "print(','.join(bad))\n")
    out = run_python(code)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == ""


def test_public_api_is_pinned():
    assert typed_decisions.__all__ == sorted([
        "ArtifactError", "CalibrationFile", "Choice", "ChoiceAnswer", "ContextTooLongError",
        "Decider", "DecisionRequest", "DecisionResponse", "EngineError", "InvalidRequestError",
        "ModelNotFoundError", "Noul", "NoulAnswer", "NoulCriteria", "Score", "ScoreAnswer",
        "TokenizerBoundaryError", "TypedDecisionsError", "Usage", "load_artifacts",
        "parse_request"]) + ["__version__"]
    for name in typed_decisions.__all__:
        assert getattr(typed_decisions, name) is not None


def test_export_command_names_the_missing_distribution():
    code = ("import sys; sys.modules['typed_decisions_export'] = None\n"
            "from typed_decisions.cli import main\n"
            "sys.exit(main(['export', 'tiny', '--out', '/tmp/x']))\n")
    out = run_python(code)
    assert out.returncode == 2
    assert "pip install typed-decisions-export" in out.stderr


def test_cli_unknown_command_fails_with_usage():
    out = subprocess.run([sys.executable, "-m", "typed_decisions.cli", "frobnicate"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and "unknown command" in out.stderr and "decide" in out.stdout


def test_wheel_ships_the_subpackages_and_the_preset_files(tmp_path):
    """Built from a copy of the sources (nothing written into the checkout), without build isolation
    (no index needed): server/, evaluation/, presets/ and the presets' JSON data are in the wheel."""
    src = tmp_path / "src"
    shutil.copytree(ROOT / "typed_decisions", src / "typed_decisions", ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    out = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                          str(src), "-w", str(tmp_path / "dist")], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    (wheel,) = (tmp_path / "dist").glob("typed_decisions_runtime-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    presets = {p.name for p in (ROOT / "typed_decisions" / "presets" / "data").glob("*.json")}
    assert presets >= {"_registry.json", "sms-spam.json"}
    assert {f"typed_decisions/presets/data/{n}" for n in presets} <= names
    assert {"typed_decisions/server/app.py", "typed_decisions/spec.py", "typed_decisions/presets/answer.py",
            "typed_decisions/evaluation/datasets.py", "typed_decisions/py.typed",
            "typed_decisions/pinned.py"} <= names


def test_adopt_command_names_the_missing_distribution():
    code = ("import sys; sys.modules['typed_decisions_export'] = None\n"
            "from typed_decisions.cli import main\n"
            "sys.exit(main(['adopt', '/tmp/src', '--out', '/tmp/x']))\n")
    out = run_python(code)
    assert out.returncode == 2
    assert "pip install typed-decisions-export" in out.stderr


def test_adopt_help_is_torch_free_and_its_api_pinned():
    code = ("import sys\n"
            "from typed_decisions.cli import main\n"
            "try:\n    main(['adopt', '--help'])\nexcept SystemExit as e:\n    assert e.code == 0\n"
            "import typed_decisions_export.adopt as a\n"
            "print(a.__all__, sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'transformers')))\n")
    out = run_python(code)
    assert out.returncode == 0, out.stderr
    assert "--out" in out.stdout and "Optimum" in out.stdout
    assert out.stdout.strip().endswith("['AdoptError', 'adopt_onnx'] []")
