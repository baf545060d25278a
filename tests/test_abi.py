"""The ABI across minor versions (include/tern.h, "Version and ABI"): a program built and linked for
libtern 1.0.0 runs unchanged on this library.

tests/abi/tern-1.0.0.h is the header Tern 1.0.0 shipped (v1.0.0's include/tern.h) and
tests/abi/client_1_0.c a program written for it. The program is linked against a stand-in
libtern.so.1 that has exactly 1.0.0's functions at symbol version TERN_1 (what linking against the
real 1.0.0 library records), then run on build/libtern.so: it must get the 1.0.0 layouts from the
structs returned by value that grew in 1.1 (tern_search_default_params, tern_request_default,
tern_model_info), with nothing written past them, and translate exactly as the same program built against the current header.
"""
import os
import re
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUILD = os.path.join(ROOT, "build")
OLD_HEADER = os.path.join(ROOT, "tests", "abi", "tern-1.0.0.h")
HEADER_1_2 = os.path.join(ROOT, "tests", "abi", "tern-1.2.0.h")  # v1.2.0's include/tern.h (e4bcd51)
CLIENT = os.path.join(ROOT, "tests", "abi", "client_1_0.c")
MODEL = os.path.join(ROOT, "models", "en-de")


def run(cmd, **kw):
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300, **kw)
    assert r.returncode == 0, (cmd, r.stdout, r.stderr)
    return r


def functions(header):
    names = run(["cc", "-E", "-P", header]).stdout
    return set(re.findall(r"\b(tern_[a-z0-9_]+)\s*\(", names))


def dynsyms(lib):
    """{(name, version)} of the functions lib defines; version in parentheses: not the default."""
    out = run(["objdump", "-T", lib]).stdout
    syms = set()
    for line in out.splitlines():
        m = re.match(r"^[0-9a-f]+ g\s+DF \.text\s+[0-9a-f]+\s+(\(?TERN_[0-9.]+\)?)\s+(tern_\w+)$", line)
        if m:
            syms.add((m.group(2), m.group(1)))
    return syms


def marked():
    """{name: (kind, [versions])} of the declarations include/tern.h marks TERN_SINCE_/TERN_CHANGED_
    (a function changed twice carries two marks: its versions in order, the last the default)."""
    with open(os.path.join(ROOT, "include", "tern.h"), encoding="utf-8") as f:
        out = {}
        for m in re.finditer(r"^\s*((?:TERN_(?:SINCE|CHANGED)_\d+_\d+\s+)+)[^(]*\b(tern_[a-z0-9_]+)\s*\(", f.read(),
                             re.M):
            marks = re.findall(r"TERN_(SINCE|CHANGED)_(\d+)_(\d+)", m.group(1))
            assert len({k for k, _, _ in marks}) == 1, m.group(0)
            out[m.group(2)] = (marks[0][0], [f"TERN_{a}.{b}" for _, a, b in marks])
        return out


def test_symbol_versions_keep_every_1_0_function():
    old = functions(OLD_HEADER)
    new = functions(os.path.join(ROOT, "include", "tern.h"))
    assert len(old) > 30 and old <= new, sorted(old - new)  # nothing of 1.0.0 is removed
    marks = marked()
    assert marks, "include/tern.h marks nothing TERN_SINCE_/TERN_CHANGED_"
    syms = dynsyms(os.path.join(BUILD, "libtern.so"))
    # every 1.0.0 function is still there at TERN_1 (the default version unless changed since)
    for name in old:
        if marks.get(name, ("", ""))[0] == "CHANGED":  # the older versions in parentheses, the last the default
            *older, last = marks[name][1]
            assert (name, "(TERN_1)") in syms and (name, last) in syms, name
            assert all((name, f"({v})") in syms for v in older), name
        else:
            assert (name, "TERN_1") in syms, name
    # what is new since 1.0.0 is marked TERN_SINCE_ (else a program using it would be recorded as
    # needing only 1.0.0), and carries that version only
    for name in new - old:
        assert marks.get(name, ("", ""))[0] == "SINCE", f"{name} is new since 1.0.0: mark it TERN_SINCE_1_<minor>"
        assert {v for n, v in syms if n == name} == set(marks[name][1]), name
    # a changed function was in 1.0.0
    assert all(name in old for name, (kind, _) in marks.items() if kind == "CHANGED")
    assert {n for n, _ in syms} == new


@pytest.fixture(scope="module")
def clients(tmp_path_factory):
    d = tmp_path_factory.mktemp("abi")
    # the stand-in for libtern.so.1 1.0.0: its functions (bodies do not matter, only the symbols
    # and their version are recorded at link time), version script from the same generator
    stub = d / "stub"
    stub.mkdir()
    (stub / "stub.c").write_text("".join(f"void {n}(void) {{}}\n" for n in sorted(functions(OLD_HEADER))))
    (stub / "stub.map").write_text(run(["sh", os.path.join(ROOT, "scripts", "export_map.sh"), "cc", OLD_HEADER,
                                        "TERN_1"]).stdout)
    run(["cc", "-shared", "-fPIC", "-o", str(stub / "libtern.so.1"), str(stub / "stub.c"),
         f"-Wl,--version-script={stub / 'stub.map'}", "-Wl,-soname,libtern.so.1"])
    os.symlink("libtern.so.1", stub / "libtern.so")
    inc = d / "inc"
    inc.mkdir()
    (inc / "tern.h").write_bytes(open(OLD_HEADER, "rb").read())
    old = d / "client_1_0"
    run(["cc", "-std=c11", "-Wall", "-Werror", f"-I{inc}", "-o", str(old), CLIENT, f"-L{stub}", "-ltern"])
    new = d / "client_current"
    run(["cc", "-std=c11", "-Wall", "-Werror", "-DCURRENT_HEADER", f"-I{os.path.join(ROOT, 'include')}", "-o",
         str(new), CLIENT, f"-L{BUILD}", "-ltern", f"-Wl,-rpath,{BUILD}"])
    return old, new


@pytest.fixture(scope="module")
def client_1_2(tmp_path_factory):
    """The same program built against 1.2.0's header (tests/abi/tern-1.2.0.h) and linked against a
    stand-in with 1.2.0's functions and symbol versions (its defaults at TERN_1.1 and TERN_1.2)."""
    d = tmp_path_factory.mktemp("abi12")
    stub = d / "stub"
    stub.mkdir()
    (stub / "stub.c").write_text("".join(f"void {n}(void) {{}}\n" for n in sorted(functions(HEADER_1_2))))
    # each function in its newest node only: a stub has one definition, which ld gives the first
    # node naming it (1.2.0's defaults are at TERN_1.1 and TERN_1.2, their default versions)
    lines = run(["sh", os.path.join(ROOT, "scripts", "export_map.sh"), "cc", HEADER_1_2, "TERN_1"]).stdout.splitlines()
    last = {ln.strip(): i for i, ln in enumerate(lines) if re.fullmatch(r"\s+tern_\w+;", ln)}
    (stub / "stub.map").write_text("".join(ln + "\n" for i, ln in enumerate(lines)
                                           if not re.fullmatch(r"\s+tern_\w+;", ln) or last[ln.strip()] == i))
    run(["cc", "-shared", "-fPIC", "-o", str(stub / "libtern.so.1"), str(stub / "stub.c"),
         f"-Wl,--version-script={stub / 'stub.map'}", "-Wl,-soname,libtern.so.1"])
    os.symlink("libtern.so.1", stub / "libtern.so")
    inc = d / "inc"
    inc.mkdir()
    (inc / "tern.h").write_bytes(open(HEADER_1_2, "rb").read())
    prog = d / "client_1_2"
    run(["cc", "-std=c11", "-Wall", "-Werror", f"-I{inc}", "-o", str(prog), CLIENT, f"-L{stub}", "-ltern"])
    return prog


def test_program_linked_against_1_2_runs_on_this_library(client_1_2, clients, data_dir):
    """tern_request_t grew after 1.2.0 (no_sort, beams_apart): tern_request_default@TERN_1.1, what a program built
    for 1.2.0 calls, still fills 1.2.0's layout (struct_size its sizeof, 208 bytes on x86-64, nothing
    written past it), so the library does not read past the program's struct (a no_sort field read
    from beyond it refused every request); the program built against this header gets TERN_1.3's."""
    und = run(["objdump", "-T", str(client_1_2)]).stdout
    assert re.search(r"\*UND\*\s+[0-9a-f]+\s+\(?TERN_1\.1\)?\s+tern_request_default$", und, re.M), und
    new = run(["objdump", "-T", str(clients[1])]).stdout
    assert re.search(r"\*UND\*\s+[0-9a-f]+\s+\(?TERN_1\.3\)?\s+tern_request_default$", new, re.M), new
    with open(os.path.join(data_dir, "multi30k", "test_2016_flickr.en"), encoding="utf-8") as f:
        text = "".join(next(f) for _ in range(16))
    r12 = run([str(client_1_2), MODEL], input=text, env=dict(os.environ, LD_LIBRARY_PATH=BUILD))
    rnew = run([str(clients[1]), MODEL], input=text)
    head12, _, body12 = r12.stdout.split("\n", 2)
    head_new, _, body_new = rnew.stdout.split("\n", 2)
    sizes12 = [int(x) for x in re.findall(r"struct_size (\d+), sizeof \1", head12)]
    sizes_new = [int(x) for x in re.findall(r"struct_size (\d+), sizeof \1", head_new)]
    assert len(sizes12) == 2 and head12.endswith("canaries intact"), head12
    assert sizes12[1] == 208 and sizes_new[1] > 208, (head12, head_new)  # x86-64
    assert body12 == body_new and body12.count("\n") == 2 + 2 * 2 * 16


def test_program_linked_against_1_0_runs_on_this_library(clients, data_dir):
    old, new = clients
    # what the link recorded: the defaults at TERN_1 for the 1.0.0 program, TERN_1.1 for the new one
    # (tern_request_default: TERN_1.3, tern_request_t grew again after 1.2.0)
    for prog, want in ((old, "TERN_1"), (new, "TERN_1.1")):
        und = run(["objdump", "-T", str(prog)]).stdout
        for fn in ("tern_search_default_params", "tern_request_default", "tern_model_info"):
            v = "TERN_1.3" if prog == new and fn == "tern_request_default" else want
            assert re.search(rf"\*UND\*\s+[0-9a-f]+\s+\(?{re.escape(v)}\)?\s+{fn}$", und, re.M), (prog, fn, und)
    with open(os.path.join(data_dir, "multi30k", "test_2016_flickr.en"), encoding="utf-8") as f:
        text = "".join(next(f) for _ in range(16))
    env = dict(os.environ, LD_LIBRARY_PATH=BUILD)
    r_old = run([str(old), MODEL], input=text, env=env)
    r_new = run([str(new), MODEL], input=text)
    head_old, info_old, body_old = r_old.stdout.split("\n", 2)
    head_new, info_new, body_new = r_new.stdout.split("\n", 2)
    # 1.0.0's layouts (x86-64: 64, 160 and 88 bytes), filled exactly, nothing written past them
    assert head_old == ("search params: struct_size 64, sizeof 64; request: struct_size 160, sizeof 160; "
                        "canaries intact"), head_old
    sizes = [int(x) for x in re.findall(r"struct_size (\d+), sizeof \1", head_new)]
    assert len(sizes) == 2 and sizes[0] > 64 and sizes[1] > 160 and head_new.endswith("canaries intact"), head_new
    assert info_old == "model info: struct_size 88, sizeof 88; family transformer; canary intact", info_old
    m = re.fullmatch(r"model info: struct_size (\d+), sizeof \1; family transformer; canary intact", info_new)
    assert m and int(m.group(1)) > 88, info_new
    # the same translations, from the defaults' structs and from zeroed ones (struct_size 0)
    assert body_old == body_new
    passes = body_old.split("pass 1\n")
    assert len(passes) == 2 and passes[0].removeprefix("pass 0\n") == passes[1]
    assert passes[1].count("\n") == 2 * 16
