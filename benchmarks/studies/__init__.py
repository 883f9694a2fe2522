"""Kept one-off experiments: each answered one question once (its result file under
benchmarks/results/<tool>/ and its section of docs/benchmarks.md or docs/evaluation.md say what it
found). They use the suite's harness and workloads and are not maintained as a suite: a study that
reaches into engine internals (prefill_chunks, packed_levels) says so at its top.
Run as ``python -m benchmarks.studies.<name> --help``."""
