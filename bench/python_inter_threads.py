"""One large translate_batch call on inter_threads=2 replicas against inter_threads=1.

    .venv/bin/python bench/python_inter_threads.py [MODEL_DIR] [LINES] [BEAM] [REPS]

Builds the package from python/ into a temporary folder (against build/libtern.so), then
translates the first LINES (default 1000) lines of Multi30k test_2016_flickr.en with models/en-de
(beam BEAM, default 4; one intra-op thread per replica) in ONE call, on a Translator with
inter_threads=1 and on one with inter_threads=2 (the call is cut into two contiguous parts that
run at once on the two replicas, as CTranslate2 spreads one call over its replicas), REPS times
each (default 3), the two interleaved so that a change of load hits both. Prints every time, the
medians, the speed-up of the medians, whether the outputs are identical and the load average
(the machine may be shared). Data: $TERN_DATA or ../shared/data.
"""
import glob
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def main():
    model = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "models", "en-de")
    n = int(sys.argv[2]) if len(sys.argv) > 2 else 1000
    beam = int(sys.argv[3]) if len(sys.argv) > 3 else 4
    reps = int(sys.argv[4]) if len(sys.argv) > 4 else 3
    data = os.environ.get("TERN_DATA", os.path.join(ROOT, "..", "shared", "data"))
    with open(os.path.join(data, "multi30k", "test_2016_flickr.en"), encoding="utf-8") as f:
        src = [next(f).rstrip("\n") for _ in range(n)]
    tmp = tempfile.mkdtemp()
    env = dict(os.environ, TERN_NO_MAKE="1")
    subprocess.run([sys.executable, "setup.py", "-q", "build", "--build-base", tmp], cwd=os.path.join(ROOT, "python"),
                   env=env, check=True, capture_output=True)
    sys.path.insert(0, glob.glob(os.path.join(tmp, "lib*"))[0])
    import tern
    tr = {k: tern.Translator(model, inter_threads=k, intra_threads=1) for k in (1, 2)}
    out, secs = {}, {1: [], 2: []}
    for k in (1, 2):
        tr[k].translate_batch(src[:8], beam_size=beam)  # warm-up
    for _ in range(reps):
        for k in (1, 2):
            t0 = time.perf_counter()
            out[k] = [r.hypotheses[0] for r in tr[k].translate_batch(src, beam_size=beam)]
            secs[k].append(time.perf_counter() - t0)
    med = {k: statistics.median(v) for k, v in secs.items()}
    for k in (1, 2):
        print(f"inter_threads={k}: " + ", ".join(f"{x:.2f}" for x in secs[k]) + f" s (median {med[k]:.2f} s)")
    print(f"{n} lines in one call, beam {beam}: speed-up {med[1] / med[2]:.2f}x (medians), "
          f"same outputs: {out[1] == out[2]}")
    with open("/proc/loadavg") as f:
        print("load average:", f.read().split()[0], "on", os.cpu_count(), "cores")


if __name__ == "__main__":
    main()
