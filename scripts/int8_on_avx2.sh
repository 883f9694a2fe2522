#!/usr/bin/env bash
# The INT8 tests on ONNX Runtime's real AVX2 kernels, on any x86-64 machine (docs/export.md, "Which
# integer formats are exact where"): qemu-user with an AVX2-only CPU model (EPYC-Rome: no AVX-512,
# no VNNI) and TYPED_DECISIONS_CPU_CLASS=avx2, since qemu-user shows the host's /proc/cpuinfo.
# About 50x slower than the host: for a change to the INT8 writer, not the suite. Arguments go to
# pytest (default: tests/export/test_int8_direct.py). It first checks that the kernels are AVX2's:
# there, and only there, the u8*s8 format with 8-bit weights saturates and comes out wrong.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v qemu-x86_64 >/dev/null || { echo "needs qemu-x86_64 (Debian: apt-get install qemu-user)" >&2; exit 2; }
avx2() {  # qemu warns once per CPUID feature its TCG lacks; those lines say nothing about the run
  TYPED_DECISIONS_CPU_CLASS=avx2 qemu-x86_64 -cpu EPYC-Rome "$@" 2> >(grep -v "TCG doesn't support" >&2)
}
kernels=$(avx2 .venv/bin/python -m benchmarks.studies.int8_kernels --m 16 --k 256 --n 256 --repeat 1 --threads 1)
if ! grep -Eq "u8s8 \(a 8-bit, w 8-bit\) +WRONG" <<<"$kernels"; then
  echo "$kernels" >&2
  echo "qemu did not run ONNX Runtime's AVX2 kernels: the u8*s8 8-bit format came out exact" >&2
  exit 1
fi
echo "ONNX Runtime runs its AVX2 kernels under qemu-x86_64 -cpu EPYC-Rome (u8*s8 with 8-bit weights saturates)"
[ $# -gt 0 ] || set -- tests/export/test_int8_direct.py
avx2 .venv/bin/python -m pytest -q -n 0 -p no:cacheprovider "$@"
