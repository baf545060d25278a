"""The CPU check that runs before tern's C extension is loaded.

libtern (and so this package's tern/libtern.so.MAJOR) is compiled for x86-64-v3 (the Makefile's
``-march=x86-64-v3``): the compiler may use AVX, AVX2, FMA, BMI1/2, F16C, LZCNT and MOVBE
instructions anywhere, so on an older CPU the library would die with SIGILL (an "illegal
instruction" crash of the whole interpreter) at its first call, or worse at an unlucky later one.
``check()`` reads the CPU's flags as the kernel reports them (the ``flags`` line of
/proc/cpuinfo) and raises ImportError naming what is missing instead.

``TERN_CPUINFO=PATH`` reads the flags from PATH instead of /proc/cpuinfo: a test hook to simulate
another CPU (tests/test_wheel.py writes a cpuinfo without avx2 and fma). Where the flags cannot be
read at all (no /proc, a non-Linux system) the check passes: it only refuses what it can see.
"""
import os
import platform

# x86-64-v3 beyond the baseline, as /proc/cpuinfo names them (abm is LZCNT on Intel and AMD alike),
# with the x86-64-v2 flags it implies
NEEDED = ("avx", "avx2", "fma", "bmi1", "bmi2", "f16c", "movbe", "abm", "xsave",
          "sse4_1", "sse4_2", "ssse3", "popcnt", "cx16")


def cpu_flags(path=None):
    """The set of flags of the first processor in a /proc/cpuinfo-style file, or None when the
    file has none (or cannot be read and is /proc/cpuinfo)."""
    given = path is not None or "TERN_CPUINFO" in os.environ
    path = path or os.environ.get("TERN_CPUINFO") or "/proc/cpuinfo"
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            for line in f:
                key, sep, value = line.partition(":")
                if sep and key.strip() == "flags":
                    return set(value.split())
    except OSError as e:
        if given:
            raise ImportError(f"tern: cannot read TERN_CPUINFO={path}: {e.strerror}") from None
    return None


def missing(flags):
    return [f for f in NEEDED if f not in flags]


def check():
    """Raises ImportError when this is not an x86-64 CPU with AVX2 and FMA (x86-64-v3)."""
    if "TERN_CPUINFO" not in os.environ:
        machine = platform.machine().lower()
        if machine and machine not in ("x86_64", "amd64"):
            raise ImportError(f"tern: this build of Tern is for x86-64 CPUs (x86-64-v3: AVX2 and FMA); "
                              f"this machine is {machine}")
    flags = cpu_flags()
    if flags is None:
        return
    lack = missing(flags)
    if lack:
        names = ", ".join("lzcnt (abm)" if f == "abm" else f for f in lack)
        raise ImportError("tern: Tern's wheel needs an x86-64 CPU with AVX2 and FMA (x86-64-v3: AVX, AVX2, "
                          "FMA, BMI1, BMI2, F16C, LZCNT, MOVBE; Intel Haswell / AMD Excavator or newer); "
                          f"this CPU lacks: {names}. Its library would stop with an illegal instruction "
                          "(SIGILL) here, so it is not loaded.")
