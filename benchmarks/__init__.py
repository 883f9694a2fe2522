"""The benchmark suite: run from the repository root as ``python -m benchmarks.<script>``.

``harness`` (machine record, timing, interleaving, common arguments, the one result writer),
``workloads`` (the shared requests), ``invariance`` (the one-answer-per-request probe), ``bench``
with ``peers/`` (reference, llama.cpp, free text), ``load`` (the HTTP server under concurrent
clients), ``sweep`` (accuracy over the dev bench), ``studies/`` (kept one-off experiments).
Results: ``results/<tool>/<model>-<cpuclass>-<date>.json`` with ``{"schema": 1, ...}``;
README.md maps each question to its script and file.
"""
