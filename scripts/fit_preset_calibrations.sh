#!/usr/bin/env bash
# Fit the shipped presets' calibrations for some models on each preset's own dataset (calibration
# split), then ship them as new preset versions (#14 lever 5; docs/evaluation.md, "Presets").
# Two separate steps, so the data change is its own reviewable step:
#
#   fit [MODEL ...]   for each shipped preset that names a dataset: `calibrate --preset NAME
#                     --to-preset $WORK/NAME.json` for the first model (a copy at version + 1), then
#                     `--preset $WORK/NAME.json` for the others (entries added, no further bump).
#                     Fit reports (every variant on both splits): $WORK/reports/. Default models:
#                     default default:int8.
#   ship              `presets register $WORK/NAME.json` for each fitted preset: writes
#                     typed_decisions/presets/data/NAME.json and its hash into _registry.json
#                     (old versions' hashes kept), then runs the preset tests.
#
# Env: LIMIT (calibration rows fitted on, default 100), TEST_LIMIT (test rows reported, default 150),
#      THREADS (default: all cores), PRESETS (names; default: every shipped preset with a dataset),
#      WORK (default benchmarks/results/preset-calibrations), PYTHON (default .venv/bin/python).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-.venv/bin/python}
WORK=${WORK:-benchmarks/results/preset-calibrations}
td() { "$PYTHON" -m typed_decisions.cli "$@"; }  # this checkout's package (ship writes into it)
step=${1:?usage: $0 fit [MODEL ...] | ship}
shift
names=${PRESETS:-$("$PYTHON" -c "
from typed_decisions.presets import list_presets, load_preset
print(' '.join(n for n in list_presets() if load_preset(n).dataset))")}

case $step in
fit)
  models=("$@")
  [ ${#models[@]} -gt 0 ] || models=(default default:int8)
  threads=()
  [ -n "${THREADS:-}" ] && threads=(--threads "$THREADS")
  mkdir -p "$WORK/reports"
  for name in $names; do
    out="$WORK/$name.json"
    src=$name
    rm -f "$out"
    for model in "${models[@]}"; do
      echo "== $name: fitting for $model" >&2
      td calibrate --model "$model" --preset "$src" --limit "${LIMIT:-100}" --test-limit "${TEST_LIMIT:-150}" \
        --to-preset "$out" --report "$WORK/reports/$name.${model//[:\/]/_}.json" ${threads[@]+"${threads[@]}"} -q
      src=$out
    done
  done
  echo "fitted into $WORK/ (nothing shipped yet); review, then: $0 ship" >&2
  ;;
ship)
  for name in $names; do
    td presets register "$WORK/$name.json"
  done
  "$PYTHON" -m pytest -q -p no:cacheprovider tests/test_presets.py tests/test_preset_calibration.py -m 'not model'
  echo "shipped: commit typed_decisions/presets/data/ and $WORK/" >&2
  ;;
*)
  echo "usage: $0 fit [MODEL ...] | ship" >&2
  exit 2
  ;;
esac
