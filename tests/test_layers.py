"""The layer order of src/ (docs/architecture.md), read from the #include lines.

Each directory of src/ may include its own headers and those of the directories below it in
LAYERS (a lower index), never one above: so search/ never includes model/, model/ never train/,
and there is no cycle between directories. The Python extension and the examples use only the
public header. Every include of a project header inside src/ is written one way, relative to
src/ ("model/weights.h"), never "../model/weights.h" or a bare "weights.h".
"""
import os
import re

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SRC = os.path.join(ROOT, "src")
# Bottom first: a directory may include the ones before it (docs/architecture.md, "Layers").
LAYERS = ["base", "kernels", "text", "nn", "search", "model", "batch", "train", "serve"]
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def sources(top):
    for d, _, files in os.walk(top):
        for f in sorted(files):
            if f.endswith((".c", ".h", ".cc", ".cu", ".cuh")):
                yield os.path.join(d, f)


def includes(path):
    with open(path, encoding="utf-8") as f:
        return INCLUDE.findall(f.read())


def edges():
    """(from_dir, to_dir, file, include) for every project include in src/."""
    out = []
    for path in sources(SRC):
        here = os.path.relpath(os.path.dirname(path), SRC).split(os.sep)[0]
        for inc in includes(path):
            if inc == "tern.h":
                out.append((here, "include", path, inc))
                continue
            cands = [os.path.normpath(os.path.join(os.path.dirname(path), inc)), os.path.join(SRC, inc)]
            target = next((c for c in cands if os.path.exists(c)), None)
            if target is None or not target.startswith(SRC + os.sep):
                continue  # a system or generated header (serve_assets.h, cjson/cJSON.h)
            out.append((here, os.path.relpath(target, SRC).split(os.sep)[0], path, inc))
    return out


def test_every_directory_is_placed():
    dirs = sorted(d for d in os.listdir(SRC) if os.path.isdir(os.path.join(SRC, d)))
    assert sorted(LAYERS) == dirs, "a directory of src/ is missing from the layer order (docs/architecture.md)"


def test_no_include_points_up():
    rank = {d: i for i, d in enumerate(LAYERS)}
    rank["include"] = -1  # the public header is below everything
    bad = [f"{os.path.relpath(p, ROOT)}: #include \"{inc}\" ({a} may not include {b})"
           for a, b, p, inc in edges() if rank[b] > rank[a]]
    assert not bad, "includes against the layer order:\n" + "\n".join(bad)


def test_no_cycle_between_directories():
    graph = {}
    for a, b, _, _ in edges():
        if a != b:
            graph.setdefault(a, set()).add(b)
    state = {}

    def visit(n, stack):
        state[n] = 1
        for m in sorted(graph.get(n, ())):
            if state.get(m) == 1:
                pytest.fail("cycle between directories: " + " -> ".join(stack + [n, m]))
            if not state.get(m):
                visit(m, stack + [n])
        state[n] = 2

    for n in sorted(graph):
        if not state.get(n):
            visit(n, [])


def test_one_include_style():
    bad = []
    for path in sources(SRC):
        for inc in includes(path):
            if inc == "tern.h" or not (os.path.exists(os.path.join(os.path.dirname(path), inc)) or
                                       os.path.exists(os.path.join(SRC, inc))):
                continue
            if inc.startswith("..") or "/" not in inc or not os.path.exists(os.path.join(SRC, inc)):
                bad.append(f"{os.path.relpath(path, ROOT)}: #include \"{inc}\"")
    assert not bad, "write project includes relative to src/ (\"dir/file.h\"):\n" + "\n".join(bad)


def test_bindings_use_only_the_public_header():
    bad = []
    for top in ("python/tern", "examples"):
        for path in sources(os.path.join(ROOT, top)):
            bad += [f"{os.path.relpath(path, ROOT)}: #include \"{inc}\"" for inc in includes(path) if inc != "tern.h"]
    assert not bad, "the Python extension and the examples include only tern.h:\n" + "\n".join(bad)


def test_checker_catches_an_upward_include(tmp_path, monkeypatch):
    """The rule itself: a model/ file including train/ is reported."""
    fake = tmp_path / "src"
    for d in LAYERS:
        (fake / d).mkdir(parents=True)
    (fake / "train" / "x.h").write_text("int x;\n")
    (fake / "model" / "y.c").write_text('#include "train/x.h"\n')
    monkeypatch.setattr(__import__(__name__), "SRC", str(fake))
    with pytest.raises(AssertionError, match="model may not include train"):
        test_no_include_points_up()
