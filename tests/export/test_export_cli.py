"""The command line: argument errors, exit codes, and that --help and import stay torch-free."""

from __future__ import annotations

import subprocess
import sys

import pytest

from typed_decisions_export.cli import main


def test_cli_errors(tmp_path, capsys):
    assert main(["/no/such/model.gguf", "--out", str(tmp_path / "o"), "--quiet"]) == 1
    assert "no such file" in capsys.readouterr().err
    with pytest.raises(SystemExit) as e:
        main(["x", "--out", str(tmp_path / "o"), "--quantize", "int4"])
    assert e.value.code == 2
    with pytest.raises(SystemExit) as e:
        main(["x"])  # --out is required
    assert e.value.code == 2


def test_import_and_help_do_not_import_torch():
    code = (
        "import sys, typed_decisions_export\n"
        "from typed_decisions_export.cli import main\n"
        "try:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
        "print('torch' in sys.modules, 'transformers' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert "--quantize {int8}" in out
    assert out.strip().splitlines()[-1] == "False False"
