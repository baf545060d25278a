"""Instruction-set dispatch (issue 8, points 1-2): one build runs on every x86-64-v3 CPU, the
faster paths are chosen at run time and can be capped from the outside (TERN_MAX_CPU_ISA for Tern's
own code, ONEDNN_MAX_CPU_ISA for oneDNN's), and int8 is exact under every cap.

- `tern cpu` reports what the CPU has and what runs; the caps it lists start at AVX2 and end at
  the detected level; an unknown cap name is refused with a message and treated as AVX2.
- Under every cap this CPU allows, the kernel tests pass (they check the int8 product exactly) and
  report the int8 GEMM that cap selects: Tern's AVX2 kernel below AVX512_CORE_VNNI (where oneDNN's
  u8*s8 GEMM saturates), oneDNN's at or above it.
- Under every cap, the shipped int8 model translates the first 300 lines of Multi30k
  test_2016_flickr like the uncapped run: the int32 products are exact everywhere, so only float32
  rounding in other kernels (oneDNN's sgemm differs by ISA) can move a line; at least 98% of lines
  identical, and BLEU within 0.5.
scripts/test.sh also runs the ASan/UBSan kernel tests and the CTranslate2 int8 agreement per cap.
"""
import os
import re
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TERN = os.environ.get("TERN_BIN", os.path.join(ROOT, "build", "tern"))
KERNELS = os.path.join(ROOT, "build", "tests", "test_kernels")
MODEL = os.path.join(ROOT, "models", "en-de")
LEVELS = ["AVX2", "AVX512_CORE", "AVX512_CORE_VNNI", "AVX512_CORE_BF16", "AVX512_CORE_AMX"]


def cpu(env=None, args=()):
    r = subprocess.run([TERN, "cpu", *args], capture_output=True, text=True, timeout=60,
                       env={**os.environ, **(env or {})})
    assert r.returncode == 0, r.stderr
    return r


def fields(out):
    return dict(line.split(": ", 1) for line in out.strip().split("\n"))


def caps():
    return cpu(args=["--caps"]).stdout.split()


def capped(cap):
    return {"TERN_MAX_CPU_ISA": cap, "ONEDNN_MAX_CPU_ISA": cap}


def test_cpu_report():
    # the report without a cap: TERN_MAX_CPU_ISA / ONEDNN_MAX_CPU_ISA of the suite's own run (an
    # AVX-512 machine running the suite as an AVX2-only one) are overridden by the top level
    f = fields(cpu(capped("ALL")).stdout)
    c = caps()
    assert c[0] == "AVX2" and c == LEVELS[:len(c)] and c[-1] == f["detected"]
    assert f["caps"] == " ".join(c)
    assert f["tern isa"].split()[0] == f["detected"]
    # whatever the CPU, capped at AVX2 both Tern and oneDNN take the AVX2 paths
    g = fields(cpu(capped("AVX2")).stdout)
    assert g["tern isa"].startswith("AVX2 ") and g["onednn isa"].startswith("avx2 ")
    assert g["int8 gemm"] == "Tern s8s8s32 (AVX2)"
    assert g["int8 packed linear"] == "Tern AVX2 int16 (gemm_s8p)"
    # with VNNI the packed int8 layers run on Tern's VNNI kernel (oneDNN's matmul on request)
    if "AVX512_CORE_VNNI" in c:
        assert fields(cpu(capped("AVX512_CORE_VNNI")).stdout)["int8 packed linear"] == "Tern VNNI (gemm_s8v)"
        v = fields(cpu({**capped("AVX512_CORE_VNNI"), "TERN_INT8_PACKED": "onednn"}).stdout)
        assert v["int8 packed linear"] == "oneDNN matmul (VNNI)"
    # float32 linear layers: oneDNN 2.6 has a blocked (brgemm) float32 matmul only from AVX512_CORE
    # up; below it Tern's own packed AVX2 kernel runs (docs/kernels.md), and above it too on a CPU
    # that runs 512-bit operations as two 256-bit halves (Zen 4); TERN_GEMM_PACKED picks either
    assert g["float32 linear"].startswith("Tern panels, AVX2 tiles")
    if "AVX512_CORE" not in c:
        assert f["avx512 width"] == "none"
    if "AVX512_CORE" in c:
        assert f["avx512 width"] in ("512-bit", "two 256-bit halves (AMD Zen 4)")
        h = fields(cpu(capped("AVX512_CORE")).stdout)
        halves = f["avx512 width"].startswith("two")
        assert h["float32 linear"].startswith("Tern panels, AVX2 tiles" if halves else "oneDNN brgemm"), h["float32 linear"]
        # the shapes oneDNN would pad run on Tern's panels, with 512-bit tiles where AVX-512 is full width
        if not halves:
            assert h["float32 linear"].endswith("Tern panels, AVX-512 tiles)"), h["float32 linear"]
        o = fields(cpu({**capped("AVX512_CORE"), "TERN_GEMM_PACKED": "onednn"}).stdout)
        assert o["float32 linear"].startswith("oneDNN brgemm")
        t = fields(cpu({**capped("AVX512_CORE"), "TERN_GEMM_PACKED": "tern"}).stdout)
        assert t["float32 linear"].startswith("Tern panels, AVX2 tiles" if halves else "Tern panels, AVX-512 tiles")
        w = fields(cpu({**capped("AVX512_CORE"), "TERN_GEMM_PACKED": "tern", "TERN_F32P_AVX2": "1"}).stdout)
        assert w["float32 linear"].startswith("Tern panels, AVX2 tiles")
    bad = cpu({"TERN_MAX_CPU_ISA": "avx9000"})
    assert "TERN_MAX_CPU_ISA=avx9000 is not one of" in bad.stderr
    assert fields(bad.stdout)["tern isa"].startswith("AVX2 ")


@pytest.mark.parametrize("cap", LEVELS)
def test_kernels_under_cap(cap):
    if cap not in caps():
        pytest.skip(f"this CPU has no {cap} (caps it can run: {' '.join(caps())})")
    r = subprocess.run([KERNELS], capture_output=True, text=True, timeout=600, env={**os.environ, **capped(cap)})
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    line = next(x for x in r.stdout.split("\n") if x.startswith("int8 GEMM: "))
    print(f"\n{cap}: {line}; {r.stdout.strip().split(chr(10))[-1]}")
    vnni = LEVELS.index(cap) >= LEVELS.index("AVX512_CORE_VNNI")
    assert line.startswith("int8 GEMM: oneDNN" if vnni else "int8 GEMM: Tern s8s8s32 (AVX2)"), line
    assert f"effective {cap}" in line
    packed = next(x for x in r.stdout.split("\n") if x.startswith("int8 packed layers: "))
    assert packed == ("int8 packed layers: Tern VNNI (gemm_s8v)" if vnni else "int8 packed layers: Tern AVX2 int16 (gemm_s8p)")
    # the VNNI kernel's own exactness test runs exactly where VNNI is allowed
    assert bool(re.search(r"gemm_s8v \(packed VNNI kernel\): [1-9][0-9]* sums exact", r.stdout)) == vnni, r.stdout[-2000:]


@pytest.mark.parametrize("choice", ["onednn", "tern", "tern-avx2"])
def test_kernels_float32_either_kernel(choice):
    """Every float32 packed kernel stays tested where it can run: oneDNN's brgemm (from AVX512_CORE
    up; the default on most AVX-512 CPUs, not on Zen 4), Tern's panels with 512-bit tiles (shapes
    oneDNN would pad, on CPUs with full-width AVX-512) and with AVX2 tiles (the default below
    AVX512_CORE and on Zen 4; TERN_F32P_AVX2=1 elsewhere), chosen with TERN_GEMM_PACKED. Both tile
    widths are checked bit for bit against the same scalar fmaf chains (test_kernels)."""
    g = fields(cpu({}).stdout)
    if "AVX512_CORE" not in caps() or g["tern isa"].startswith("AVX2 "):
        pytest.skip(f"no AVX512_CORE here (caps: {' '.join(caps())}; effective {g['tern isa']}): oneDNN has no "
                    "float32 brgemm, Tern's panels run every layer with AVX2 tiles (test_kernels_under_cap)")
    halves = g["avx512 width"].startswith("two")  # Zen 4: the AVX2 tiles
    env = {**os.environ, "TERN_GEMM_PACKED": "onednn" if choice == "onednn" else "tern"}
    if choice == "tern-avx2":
        env["TERN_F32P_AVX2"] = "1"
    r = subprocess.run([KERNELS], capture_output=True, text=True, timeout=600, env=env)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    m = re.search(r"packed float32 linear: (\d+) layers on Tern's panels \((AVX2|AVX-512) tiles\), (\d+) on oneDNN's brgemm",
                  r.stdout)
    assert m, r.stdout[-2000:]
    tern, tiles, onednn = int(m.group(1)), m.group(2), int(m.group(3))
    print(f"\n{choice}: {m.group(0)}; {r.stdout.strip().split(chr(10))[-1]}")
    assert tiles == ("AVX2" if choice == "tern-avx2" or halves else "AVX-512")
    if choice != "onednn":
        assert onednn == 0 and tern > 0
    else:
        assert onednn > 0


def translate(env, src, out):
    r = subprocess.run([TERN, "translate", "-m", MODEL, "-b", "4", "-t", "1", "-q", src, out],
                       capture_output=True, timeout=600, env={**os.environ, **env})
    assert r.returncode == 0, r.stderr.decode()
    return open(out, encoding="utf-8").read().split("\n")[:-1]


def test_translation_under_every_cap(data_dir, tmp_path):
    sacrebleu = pytest.importorskip("sacrebleu")
    lines = open(os.path.join(data_dir, "multi30k", "test_2016_flickr.en"), encoding="utf-8").readlines()[:300]
    refs = [x.rstrip("\n") for x in open(os.path.join(data_dir, "multi30k", "test_2016_flickr.de"),
                                         encoding="utf-8").readlines()[:300]]
    src = tmp_path / "src.en"
    src.write_text("".join(lines), encoding="utf-8")
    base = translate({}, str(src), str(tmp_path / "base.de"))
    assert len(base) == 300
    base_bleu = sacrebleu.corpus_bleu(base, [refs]).score
    for cap in caps():
        got = translate(capped(cap), str(src), str(tmp_path / f"{cap}.de"))
        same = sum(a == b for a, b in zip(got, base))
        bleu = sacrebleu.corpus_bleu(got, [refs]).score
        print(f"\ncap {cap}: {same}/300 lines identical to the uncapped run, BLEU {bleu:.2f} (uncapped {base_bleu:.2f})")
        assert len(got) == 300 and same >= 294 and abs(bleu - base_bleu) <= 0.5
