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


def _other_typed_decisions(site: Path) -> Path:
    """The metadata that another author's `typed-decisions` 0.1.0 wheel installs: the same import
    package `typed_decisions` and the same `typed-decisions` console script as ours."""
    info = site / "typed_decisions-0.1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: typed-decisions\nVersion: 0.1.0\n")
    (info / "top_level.txt").write_text("typed_decisions\n")
    (info / "entry_points.txt").write_text("[console_scripts]\ntyped-decisions = typed_decisions.cli:main\n")
    return info


def test_version_names_the_distribution_and_warns_of_the_other_typed_decisions(tmp_path):
    ours = subprocess.run([sys.executable, "-m", "typed_decisions.cli", "--version"],
                          capture_output=True, text=True, timeout=60)
    assert ours.returncode == 0 and ours.stdout.startswith(f"typed-decisions-runtime {typed_decisions.__version__} ")
    assert "warning" not in ours.stdout
    _other_typed_decisions(tmp_path)
    code = (f"import sys; sys.path.append({str(tmp_path)!r})\n"
            "from typed_decisions.cli import main; main(['--version'])")
    both = run_python(code)
    assert both.returncode == 0, both.stderr
    assert both.stdout.startswith("typed-decisions-runtime ")
    assert "warning: typed-decisions also installs the import package typed_decisions" in both.stdout
    assert "pip uninstall typed-decisions" in both.stdout


def test_setup_refuses_an_environment_with_the_other_typed_decisions(tmp_path):
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    site = next((venv / "lib").glob("python3.*/site-packages"))
    _other_typed_decisions(site)
    out = subprocess.run(["bash", str(ROOT / "scripts" / "setup.sh")], capture_output=True, text=True,
                         timeout=120, env={"PATH": "/usr/bin:/bin", "VENV": str(venv), "PYTHON": sys.executable})
    assert out.returncode == 2, out.stderr
    assert "'typed-decisions' 0.1.0 installed, another project" in out.stderr
    assert "'typed-decisions-runtime'" in out.stderr and "pip uninstall typed-decisions" in out.stderr
    assert not (venv / ".td-setup").exists()
