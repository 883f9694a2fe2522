"""The CPU this process runs on: its integer-kernel class and how many cores it may use.

ONNX Runtime's integer kernels (MLAS) pick their instructions from the CPU at run time:

- ``avx2``: u8·s8 products summed pairwise into a *saturating* int16 (VPMADDUBSW), so full 8-bit
  activations times 8-bit weights can be silently wrong; INT8 is about as fast as float32.
- ``avx512-vnni`` (and AVX-VNNI): VPDPBUSD accumulates in int32, exact; INT8 ~3-4x float32.
- ``amx``: AMX tiles, exact; INT8 several times float32.

The INT8 exports of this project store 8-bit activations and 8-bit weights: VNNI/AMX run them
through the u8·s8 kernel, every other class through a u8·u8 graph of the same weights, which
cannot saturate (export/…/int8/u8u8.py, write_u8u8_graph; quantized.graph_file), so every
class computes the same integers. The class is still recorded in the manifest and checked at load
(quantized.py), because speed differs and the float32 parts of the graph may round differently.

``TYPED_DECISIONS_CPU_CLASS`` (one of ``CLASSES``) makes this process act as that class: it picks
the graph that class runs and records that class. It exists to test the AVX2 path on a VNNI/AMX
machine: alone it checks the selection (the u8·u8 graph is loaded, nothing runs a u8·s8 graph of
8-bit weights); under ``qemu-x86_64 -cpu EPYC-Rome``, whose CPUID has no AVX-512, ONNX Runtime
also runs the real AVX2 kernels (docs/export.md, "Testing the AVX2 path"). /proc/cpuinfo cannot
say which: qemu-user shows the host's flags.
"""

from __future__ import annotations

import os
import platform
from pathlib import Path

CLASSES = ("amx", "avx512-vnni", "avx2", "other")
FORCE_ENV = "TYPED_DECISIONS_CPU_CLASS"


def cpu_flags() -> set[str]:
    """ISA flags from /proc/cpuinfo (Linux); empty where that is not available."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return set()
    for line in text.splitlines():
        if line.startswith("flags"):
            return set(line.split(":", 1)[1].split())
    return set()


def cpu_class(flags: set[str] | None = None) -> str:
    """The integer-kernel class of a CPU with these ISA flags (default: this CPU).

    >>> cpu_class({"avx2", "fma"}), cpu_class({"avx2", "avx512f", "avx512_vnni"}), cpu_class({"amx_int8", "avx2"})
    ('avx2', 'avx512-vnni', 'amx')
    >>> cpu_class({"avx2", "avx_vnni"})
    'avx512-vnni'

    With no flags given, ``TYPED_DECISIONS_CPU_CLASS`` (if set) is the answer (module docstring).
    """
    if flags is None:
        forced = forced_class()
        if forced is not None:
            return forced
        flags = cpu_flags()
    if "amx_int8" in flags:
        return "amx"
    if "avx512_vnni" in flags or "avx_vnni" in flags:
        return "avx512-vnni"
    if "avx2" in flags:
        return "avx2"
    return "other"


def forced_class() -> str | None:
    """The class ``TYPED_DECISIONS_CPU_CLASS`` names, None when unset; an unknown name is an error
    (a typo must not silently run the native class)."""
    value = os.environ.get(FORCE_ENV, "").strip()
    if not value:
        return None
    if value not in CLASSES:
        raise ValueError(f"{FORCE_ENV}={value!r}: expected one of {', '.join(CLASSES)}")
    return value


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def describe() -> dict[str, object]:
    """What a manifest records about the CPU a measurement ran on."""
    flags = cpu_flags()
    keep = ("avx2", "fma", "avx512f", "avx512bw", "avx512_vnni", "avx_vnni", "amx_int8", "amx_tile")
    found: dict[str, object] = {"class": cpu_class(), "model": cpu_model(), "flags": sorted(f for f in keep if f in flags)}
    if forced_class() is not None:
        found["forced_by"] = f"{FORCE_ENV} (the flags are the host's)"
    return found


THREADS_ENV = "TYPED_DECISIONS_THREADS"


def engine_threads(threads: int | None = None) -> int:
    """ONNX Runtime intra-op threads for an engine: ``threads`` if given, else the environment's
    ``TYPED_DECISIONS_THREADS`` (for every engine a process starts, e.g. several test or serving
    processes sharing the cores), else every usable core (``usable_cores``).

    >>> engine_threads(3)
    3
    """
    if threads:
        return threads
    raw = os.environ.get(THREADS_ENV, "").strip()
    if raw:
        try:
            n = int(raw)
        except ValueError:
            raise ValueError(f"{THREADS_ENV}={raw!r}: a whole number of threads >= 1") from None
        if n < 1:
            raise ValueError(f"{THREADS_ENV}={raw!r}: a whole number of threads >= 1")
        return n
    return usable_cores()


def usable_cores() -> int:
    """Cores this process may run on: its CPU affinity, capped by a cgroup v2 CPU quota.

    ``os.cpu_count()`` counts the machine's cores; a container limited to 2 of 64 would start 64
    ONNX Runtime threads and oversubscribe.
    """
    try:
        n = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        n = os.cpu_count() or 1
    try:
        quota, period = Path("/sys/fs/cgroup/cpu.max").read_text().split()[:2]
        if quota != "max":
            n = min(n, max(1, int(int(quota) // int(period))))
    except (OSError, ValueError):
        pass
    return max(1, n)


__all__ = ["CLASSES", "FORCE_ENV", "THREADS_ENV", "cpu_class", "cpu_flags", "cpu_model", "describe", "engine_threads",
           "forced_class", "usable_cores"]
