"""Two Python threads translating at once against one (tern.Translator, inter_threads=2).

    .venv/bin/python bench/bench_python_threads.py [MODEL_DIR] [LINES]

Builds the package from python/ into a temporary folder (against build/libtern.so), then
translates the first LINES (default 200) lines of Multi30k test_2016_flickr.en with
models/en-de (beam 4, one intra-op thread per translation): once in one thread (both halves one
after the other), once in two threads (one half each) on a Translator with inter_threads=2. The
GIL is released while Tern translates, so the two threads overlap. Prints the wall times, the
speed-up and whether both runs gave the same outputs. Data: $TERN_DATA or ../shared/data.
"""
import glob
import os
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def main():
    model = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "models", "en-de")
    n = int(sys.argv[2]) if len(sys.argv) > 2 else 200
    data = os.environ.get("TERN_DATA", os.path.join(ROOT, "..", "shared", "data"))
    with open(os.path.join(data, "multi30k", "test_2016_flickr.en"), encoding="utf-8") as f:
        src = [next(f).rstrip("\n") for _ in range(n)]
    tmp = tempfile.mkdtemp()
    env = dict(os.environ, TERN_NO_MAKE="1")
    subprocess.run([sys.executable, "setup.py", "-q", "build", "--build-base", tmp], cwd=os.path.join(ROOT, "python"),
                   env=env, check=True, capture_output=True)
    sys.path.insert(0, glob.glob(os.path.join(tmp, "lib*"))[0])
    import tern
    tr = tern.Translator(model, inter_threads=2, intra_threads=1)
    halves = [src[: n // 2], src[n // 2:]]
    tr.translate_batch(src[:8], beam_size=4)  # warm-up
    t0 = time.perf_counter()
    one = [[r.hypotheses[0] for r in tr.translate_batch(h, beam_size=4)] for h in halves]
    t1 = time.perf_counter()
    two = [None, None]

    def work(k):
        two[k] = [r.hypotheses[0] for r in tr.translate_batch(halves[k], beam_size=4)]
    th = [threading.Thread(target=work, args=(k,)) for k in range(2)]
    t2 = time.perf_counter()
    for t in th:
        t.start()
    for t in th:
        t.join()
    t3 = time.perf_counter()
    print(f"{n} lines, beam 4: one thread {t1 - t0:.2f} s, two threads {t3 - t2:.2f} s, "
          f"speed-up {(t1 - t0) / (t3 - t2):.2f}x, same outputs: {one == two}")
    with open("/proc/loadavg") as f:
        print("load average:", f.read().split()[0], "on", os.cpu_count(), "cores")


if __name__ == "__main__":
    main()
