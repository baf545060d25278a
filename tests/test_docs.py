"""Every command that README.md and docs/*.md show works as written (issue 14).

* `test_doc_commands[DOC]`: every shell command of DOC's fenced blocks runs, in a scratch
  directory holding a Multi30k slice, the shipped model models/en-de, a vocabulary, a tiny
  trained model and a CTranslate2 model, with only file names and sizes substituted through
  tests/docs_commands.toml (which says how commands are cut out of the Markdown). Commands that
  cannot run in a test are listed there with the reason; their `tern` parts are run with
  `--help` appended (the options must parse) and the scripts they name must exist. A failure
  names the doc file and line.
* `test_help_reachable`: every subcommand the dispatcher in tools/tern.c knows is listed by
  `tern --help`, and `tern SUB --help` exits 0 and prints a usage line.
* `test_doc_options_in_help`: every option written next to `tern SUB` in the docs — in a fenced
  command or an inline code span — appears in `tern SUB --help`; so does every long option
  written alone in a code span of a paragraph that names `tern SUB` (or under a heading that
  does), e.g. the option lists of docs/training.md.
* `test_extractor`, `test_parse_check`, `test_runner`: the Markdown-to-commands rules on a
  hand-written document (exact steps), the parse check (a rejected option fails naming the doc
  line), and the runner (a process left behind cannot hang the test; servers are stopped).
* `test_table_entries_used`: every [[parse_only]] / [[background]] entry still matches a step.

`python tests/test_docs.py` lists every step with what the test does with it.
Binary: $TERN_BIN (default build/tern); data: conftest.py's data_dir ($TERN_DATA or ../shared/data).
"""
import fnmatch
import glob
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import tomllib

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TERN = os.path.abspath(os.environ.get("TERN_BIN") or os.path.join(ROOT, "build", "tern"))
TABLE_PATH = os.path.join(ROOT, "tests", "docs_commands.toml")
DOCS = ["README.md"] + sorted(os.path.relpath(p, ROOT) for p in glob.glob(os.path.join(ROOT, "docs", "*.md")))
SHELL_LANGS = {"sh", "bash", "shell", "console", "zsh"}
# Entries of the repository linked into every scratch directory (build/ is the binary's directory).
MIRROR = ["models", "bench", "scripts", "recipes", "tests", "tools", "src", "include", "examples",
          "fuzz", "docs", "python", "Makefile", ".venv"]

with open(TABLE_PATH, "rb") as _f:
    TABLE = tomllib.load(_f)


# ------------------------------------------------------------------------------------------------
# Markdown -> steps

class Step:
    """One command of a doc: `text` as the doc writes it (continuations joined with a space,
    comments dropped), the 1-based `line` where it starts, and the index of its fenced block."""

    def __init__(self, doc, line, text, block):
        self.doc, self.line, self.text, self.block = doc, line, text, block

    def where(self):
        return f"{self.doc}:{self.line}"

    def __repr__(self):
        return f"Step({self.where()}, {self.text!r})"


def fenced_blocks(md):
    """Yields (info string, first content line number, list of lines) for each fenced block."""
    lines = md.split("\n")
    i = 0
    while i < len(lines):
        m = re.match(r"^(\s*)(`{3,}|~{3,})\s*([\w+-]*)", lines[i])
        if not m:
            i += 1
            continue
        fence, lang = m.group(2), m.group(3).lower()
        body, start = [], i + 2
        i += 1
        while i < len(lines) and not lines[i].strip().startswith(fence):
            body.append(lines[i])
            i += 1
        i += 1
        yield lang, start, body


def strip_comment(line):
    """The line without a shell comment (`#` at a word start, outside quotes)."""
    q = None
    for j, c in enumerate(line):
        if q:
            if c == q:
                q = None
            elif c == "\\" and q == '"':
                continue
        elif c in "'\"":
            q = c
        elif c == "#" and (j == 0 or line[j - 1] in " \t"):
            return line[:j].rstrip()
    return line.rstrip()


def is_tern_word(w):
    return "=" not in w and os.path.basename(w) == "tern"


def starts_with_tern(text):
    """Does the command start (after VAR=value assignments) with the tern binary?"""
    try:
        words = shlex.split(text, comments=False)
    except ValueError:
        return False
    for w in words:
        if re.match(r"^[A-Za-z_]\w*=", w):
            continue
        return is_tern_word(w)
    return False


OPEN_WORDS = {"for": 1, "while": 1, "until": 1, "if": 1, "case": 1, "done": -1, "fi": -1, "esac": -1}
WORD_RE = re.compile(r"(for|while|until|if|case|done|fi|esac)(?=$|[\s;&|()])")


def compound_depth(text):
    depth = 0
    for m in WORD_RE.finditer(text):
        if m.start() == 0 or text[m.start() - 1] in " \t\n;&|(":
            depth += OPEN_WORDS[m.group(1)]
    return depth


def block_commands(lang, lines):
    """(offset, text) of each command of a block: continuations joined, comments dropped,
    prompts stripped, compounds (for/while/until/if/case ... done/fi/esac) kept whole."""
    out, cur, cur_start, depth = [], None, 0, 0
    console = lang == "console"
    for k, raw in enumerate(lines):
        line = raw
        if cur is None:
            s = line.strip()
            if lang in SHELL_LANGS and not console:
                if s.startswith("$ "):
                    s = s[2:]
            else:
                if s.startswith("$ "):
                    s = s[2:]
                elif console or not starts_with_tern(s):
                    continue
            line = s
        elif console and re.match(r"^\s*> ", line):
            line = re.sub(r"^\s*> ", "", line)
        code = strip_comment(line)
        if cur is None and not code.strip():
            continue
        cont = code.endswith("\\")
        piece = code[:-1].rstrip() if cont else code.strip()
        if cur is None:
            cur, cur_start = piece, k
        else:
            sep = "\n" if depth > 0 and not cur.endswith(" ") else " "
            cur = (cur + sep + piece.strip()) if piece.strip() else cur
        if cont:
            continue
        depth = compound_depth(cur)
        if depth > 0:
            continue
        out.append((cur_start, cur.strip()))
        cur, depth = None, 0
    if cur is not None:
        out.append((cur_start, cur.strip()))
    return out


def split_steps(text):
    """Splits a command at top-level `&&` and `;` (outside quotes, $(...) and compounds)."""
    steps, buf, q, paren, depth, i = [], "", None, 0, 0, 0
    while i < len(text):
        c = text[i]
        if q:
            buf += c
            if c == q:
                q = None
            i += 1
            continue
        if c in "'\"":
            q = c
        elif text.startswith("$(", i):
            paren += 1
            buf += "$("
            i += 2
            continue
        elif c == ")" and paren:
            paren -= 1
        elif (i == 0 or text[i - 1] in " \t\n;&|(") and WORD_RE.match(text, i):
            depth += OPEN_WORDS[WORD_RE.match(text, i).group(1)]
        if not paren and depth <= 0:
            if text.startswith("&&", i) or (c == ";" and not text.startswith(";;", i)) or \
                    (c == "\n"):
                if buf.strip():
                    steps.append(buf.strip())
                buf = ""
                i += 2 if text.startswith("&&", i) else 1
                continue
        buf += c
        i += 1
    if buf.strip():
        steps.append(buf.strip())
    return steps


def extract(doc, md):
    """Every step of a Markdown document, in order."""
    steps = []
    for b, (lang, start, lines) in enumerate(fenced_blocks(md)):
        if lang and lang not in SHELL_LANGS:
            continue
        for off, cmd in block_commands(lang, lines):
            for s in split_steps(cmd):
                steps.append(Step(doc, start + off, s, b))
    return steps


def doc_steps(doc):
    with open(os.path.join(ROOT, doc), encoding="utf-8") as f:
        return extract(doc, f.read())


# ------------------------------------------------------------------------------------------------
# Synopsis notation, elided options

def expand_synopsis(text):
    """`[X]` -> without X and with X (inner groups expanded too); `[a|b]` -> a, b.
    A `[` counts only at a word start and followed by a non-space (not `[ -f x ]`)."""
    m = None
    q = None
    for i, c in enumerate(text):
        if q:
            if c == q:
                q = None
            continue
        if c in "'\"":
            q = c
        elif c == "[" and (i == 0 or text[i - 1] in " \t") and i + 1 < len(text) and text[i + 1] not in " [":
            m = i
            break
    if m is None:
        return [text]
    depth, j = 0, m
    while j < len(text):
        if text[j] == "[":
            depth += 1
        elif text[j] == "]":
            depth -= 1
            if depth == 0:
                break
        j += 1
    inner, before, after = text[m + 1:j], text[:m].rstrip(), text[j + 1:]
    options = []
    if "[" not in inner and "|" in inner:
        # "--quantize int8|float16": the word holding the |'s gives each alternative
        words = inner.split(" ")
        k = next(k for k, w in enumerate(words) if "|" in w)
        alts = [" ".join(words[:k] + [a] + words[k + 1:]) for a in words[k].split("|")]
    else:
        alts = [inner]
    variants = [(before + after).strip()]
    for a in alts:
        variants.append((before + " " + a + after).strip())
    out = []
    for v in variants:
        for e in expand_synopsis(re.sub(r"\s+", " ", v) if "\n" not in v else v):
            if e not in out:
                out.append(e)
    return out


def tern_invocations(text):
    """(subcommand, [args]) of each `tern SUB ARGS` in a command (shell words, operators end it)."""
    lex = shlex.shlex(text, posix=True, punctuation_chars=";&|()<>")
    lex.whitespace_split = True
    lex.commenters = ""
    try:
        toks = list(lex)
    except ValueError:
        return []
    out, i = [], 0
    while i < len(toks):
        if is_tern_word(toks[i]) and i + 1 < len(toks) and re.match(r"^[a-z][\w-]*$", toks[i + 1]):
            j = i + 2
            while j < len(toks) and not re.match(r"^[;&|()<>]+$", toks[j]):
                j += 1
            out.append((toks[i + 1], toks[i + 2:j]))
            i = j
        else:
            i += 1
    return out


def fill_ellipsis(step, steps):
    """`tern SUB ... X` -> `tern SUB <options of the last complete tern SUB step of the block> X`."""
    if not re.search(r"(^|\s)\.\.\.(\s|$)", step.text):
        return step.text
    inv = tern_invocations(step.text)
    if len(inv) != 1:
        return step.text
    sub = inv[0][0]
    prev = None
    for s in steps:
        if s is step:
            break
        if s.block == step.block and "..." not in s.text.split():
            for sub2, args in tern_invocations(s.text):
                if sub2 == sub:
                    prev = args
    if prev is None:
        return step.text
    return re.sub(r"(^|\s)\.\.\.(?=\s|$)", lambda m: m.group(1) + " ".join(shlex.quote(a) for a in prev),
                  step.text, count=1)


# ------------------------------------------------------------------------------------------------
# Substitution

def words_for(doc):
    table = dict(TABLE.get("doc_words", {}).get(doc, {}))
    for k, v in TABLE.get("words", {}).items():
        table.setdefault(k, v)
    return table


def substitute(text, doc):
    for word, repl in words_for(doc).items():
        text = re.sub(r"(?<![\w-])" + re.escape(word) + r"(?![\w-])", lambda m: repl, text)
    for opt, val in TABLE.get("sizes", {}).items():
        text = re.sub(r"(?<![\w-])(" + re.escape(opt) + r")(\s+|=)(\S+)", lambda m: m.group(1) + m.group(2) + val,
                      text)
    return text


def table_entry(kind, step):
    for e in TABLE.get(kind, []):
        if fnmatch.fnmatch(step.doc, e["doc"]) and re.search(e["match"], step.text):
            return e
    return None


def parse_only_entry(step):
    return table_entry("parse_only", step)


def start_background(step, text, cwd, env, entry):
    """Starts a long-running step (a server) in its own process group and waits until its
    `ready` command succeeds. Returns (process, error or None)."""
    log = open(os.path.join(cwd, f".background-{step.line}.log"), "wb")
    p = subprocess.Popen(["bash", "-c", text], cwd=cwd, env=env,
                         stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + entry.get("ready_timeout", 30)
    while time.monotonic() < deadline:
        if p.poll() is not None:
            log.close()
            with open(log.name, "rb") as f:
                out = f.read().decode(errors="replace").strip().split("\n")[-6:]
            return p, f"{step.where()}: `{step.text}` (run as `{text}`) exited {p.returncode} before it was ready:\n    " \
                + "\n    ".join(out)
        r = subprocess.run(["bash", "-c", entry["ready"]], cwd=cwd, env=env, capture_output=True, timeout=10)
        if r.returncode == 0:
            return p, None
        time.sleep(0.2)
    return p, f"{step.where()}: `{step.text}` not ready (`{entry['ready']}`) after {entry.get('ready_timeout', 30)} s"


def stop_background(procs):
    for p in procs:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGTERM)
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()


# ------------------------------------------------------------------------------------------------
# Scratch directories

def run_bash(cmd, cwd, env, timeout, stdin_path=None):
    """Runs cmd with bash in its own process group; output goes to files, so that a process the
    command leaves behind (`cmd &`) cannot hold the test; the group is killed when bash returns
    or the timeout passes (subprocess.TimeoutExpired)."""
    with open(stdin_path, "rb") if stdin_path else open(os.devnull, "rb") as stdin, \
            tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        p = subprocess.Popen(["bash", "-o", "pipefail", "-c", cmd], cwd=cwd, env=env, stdin=stdin,
                             stdout=out, stderr=err, start_new_session=True)
        try:
            rc = p.wait(timeout=timeout)
        finally:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            p.wait()
        out.seek(0)
        err.seek(0)
        return subprocess.CompletedProcess(p.args, rc, out.read(), err.read())


def make_env(bindir):
    env = dict(os.environ)
    env["PATH"] = bindir + os.pathsep + env.get("PATH", "")
    env["OMP_WAIT_POLICY"] = "passive"
    env["TERN_BIN"] = TERN
    return env


def mirror_repo(d):
    for name in MIRROR:
        src = os.path.join(ROOT, name)
        if os.path.exists(src) and not os.path.lexists(os.path.join(d, name)):
            os.symlink(src, os.path.join(d, name))
    if not os.path.lexists(os.path.join(d, "build")):
        os.symlink(os.path.dirname(TERN), os.path.join(d, "build"))


@pytest.fixture(scope="session")
def docs_env(tmp_path_factory, data_dir):
    assert os.path.exists(TERN), f"{TERN} is missing: run make (or set TERN_BIN)"
    base = tmp_path_factory.mktemp("docs")
    bindir = base / "bin"
    bindir.mkdir()
    os.symlink(TERN, bindir / "tern")
    (bindir / "python").write_text(f'#!/bin/sh\nexec {shlex.quote(sys.executable)} "$@"\n')
    (bindir / "python").chmod(0o755)
    env = make_env(str(bindir))
    seed = base / "seed"
    seed.mkdir()
    for name, (path, n) in TABLE["data"].items():
        with open(os.path.join(data_dir, path), encoding="utf-8") as f:
            lines = [next(f) for _ in range(n)]
        (seed / name).write_text("".join(lines), encoding="utf-8")
    mirror_repo(seed)
    for cmd in TABLE.get("setup", []):
        r = run_bash(cmd, seed, env, 120)
        assert r.returncode == 0, f"setup `{cmd}` (tests/docs_commands.toml) failed:\n{r.stderr.decode()[-2000:]}"
    return {"base": base, "seed": seed, "env": env}


def scratch_dir(docs_env, doc):
    d = docs_env["base"] / ("doc-" + re.sub(r"\W", "_", doc))
    shutil.copytree(docs_env["seed"], d, symlinks=True)
    return d


# ------------------------------------------------------------------------------------------------
# The checks

def repo_paths(text):
    """Repository paths a command names (bench/x.py, scripts/y.sh, build/tests/z, ...)."""
    top = set(MIRROR) | {"build"}
    out = []
    for w in re.findall(r"[\w./-]+", text):
        w2 = w[2:] if w.startswith("./") else w
        if "/" in w2 and w2.split("/")[0] in top and not w2.endswith("/"):
            out.append(w2)
    return out


def parse_check(step, text, cwd, env, entry):
    """The checks of a step that cannot run: tern options parse, named files exist."""
    errors = []
    for var, val in entry.get("vars", {}).items():
        text = text.replace("${" + var + "}", val).replace("$" + var, val)
    for sub, args in tern_invocations(text):
        args = [a for a in args if a != "..."]
        r = subprocess.run([TERN, sub] + args + ["--help"], cwd=cwd, env=env, capture_output=True,
                           timeout=30, stdin=subprocess.DEVNULL)
        if r.returncode != 0:
            err = r.stderr.decode(errors="replace").strip().split("\n")[0]
            errors.append(f"{step.where()}: `tern {sub} {' '.join(args)}` (parse check with --help) exited "
                          f"{r.returncode}: {err}")
    for p in repo_paths(text):
        full = os.path.join(cwd, p)
        if not os.path.exists(full):
            errors.append(f"{step.where()}: `{step.text}` names {p}, which does not exist")
        elif p.endswith(".sh"):
            r = subprocess.run(["bash", "-n", full], capture_output=True)
            if r.returncode:
                errors.append(f"{step.where()}: {p} has a shell syntax error: {r.stderr.decode()[:300]}")
        elif p.endswith(".py"):
            with open(full, encoding="utf-8") as f:
                try:
                    compile(f.read(), full, "exec")
                except SyntaxError as e:
                    errors.append(f"{step.where()}: {p} does not compile: {e}")
    if re.match(r"^make\b", text):
        r = run_bash("make -n" + text[4:], ROOT, env, 60)
        if r.returncode:
            errors.append(f"{step.where()}: `{text}` as `make -n` failed: {r.stderr.decode()[-300:]}")
    return errors


def plan(doc):
    """[(step, variants to run or None, parse_only entry or None)] of a doc."""
    steps = doc_steps(doc)
    out = []
    for s in steps:
        entry = parse_only_entry(s)
        text = fill_ellipsis(s, steps)
        out.append((s, [substitute(v, doc) for v in expand_synopsis(text)], entry))
    return out


@pytest.mark.parametrize("doc", DOCS)
def test_doc_commands(doc, docs_env):
    cwd = scratch_dir(docs_env, doc)
    env = docs_env["env"]
    stdin = os.path.join(cwd, TABLE["stdin"])
    errors, ran, parsed, steps_run, steps_parsed, procs = [], 0, 0, 0, 0, []
    try:
        for step, variants, entry in plan(doc):
            steps_parsed += bool(entry)
            steps_run += not entry
            for text in variants:
                ran, parsed = run_step(step, text, entry, cwd, env, stdin, errors, procs, ran, parsed)
    finally:
        stop_background(procs)
    print(f"\n{doc}: {steps_run} commands run ({ran} runs with synopsis variants), {steps_parsed} only parsed")
    if errors:
        pytest.fail(f"{len(errors)} doc command(s) fail:\n" + "\n".join(errors), pytrace=False)


def run_step(step, text, entry, cwd, env, stdin, errors, procs, ran, parsed):
    """Runs (or parse-checks) one variant of a step; appends failures to errors."""
    if entry:
        errors += parse_check(step, text, cwd, env, entry)
        return ran, parsed + 1
    if re.search(r"(^|\s)\.\.\.(\s|$)", text):
        errors.append(f"{step.where()}: `{step.text}` elides options (`...`) and no earlier "
                      f"complete command of its block fills them: list it in "
                      f"tests/docs_commands.toml [[parse_only]] with a reason")
        return ran, parsed
    bg = table_entry("background", step)
    if bg:
        p, err = start_background(step, text, cwd, env, bg)
        procs.append(p)
        if err:
            errors.append(err)
        return ran + 1, parsed
    try:
        r = run_bash(text, cwd, env, TABLE["timeout"], stdin)
    except subprocess.TimeoutExpired:
        errors.append(f"{step.where()}: `{step.text}` (run as `{text}`) took over {TABLE['timeout']} s")
        return ran, parsed
    if r.returncode != 0:
        err = r.stderr.decode(errors="replace").strip().split("\n")
        said = [ln for ln in err if re.match(r"^tern [\w-]+:", ln)] or err[-6:]
        errors.append(f"{step.where()}: `{step.text}` (run as `{text}`) exited {r.returncode}:\n    "
                      + "\n    ".join(said[:6]))
    return ran + 1, parsed


def subcommands():
    """The subcommands the dispatcher in tools/tern.c knows."""
    with open(os.path.join(ROOT, "tools", "tern.c"), encoding="utf-8") as f:
        src = f.read()
    table = re.search(r"commands\[\]\s*=\s*\{(.*?)\n\};", src, re.S).group(1)
    subs = re.findall(r'\{\s*"([\w-]+)"\s*,', table)
    assert len(subs) >= 10, subs
    return subs


HELP = {}


def help_of(sub):
    if sub not in HELP:
        r = subprocess.run([TERN, sub, "--help"], capture_output=True, timeout=30)
        HELP[sub] = (r.returncode, r.stdout.decode(errors="replace"), r.stderr.decode(errors="replace"))
    return HELP[sub]


def test_help_reachable():
    r = subprocess.run([TERN, "--help"], capture_output=True, timeout=30)
    assert r.returncode == 0
    top = r.stdout.decode()
    listed = re.findall(r"^  ([a-z][\w-]*)\s", top, re.M)
    for sub in subcommands():
        assert sub in listed, f"`tern --help` does not list `{sub}` (tools/tern.c knows it)"
        rc, out, err = help_of(sub)
        assert rc == 0, f"`tern {sub} --help` exited {rc}: {err[:300]}"
        assert re.search(r"^usage: tern " + re.escape(sub) + r"\b", out, re.M), \
            f"`tern {sub} --help` prints no 'usage: tern {sub}' line on stdout:\n{out[:300]}"
    assert sorted(listed) == sorted(subcommands()), "`tern --help` lists a command the dispatcher does not know"


def inline_spans(md):
    """(line, text) of every inline code span outside fenced blocks."""
    out, in_fence, fence = [], False, None
    for n, line in enumerate(md.split("\n"), 1):
        m = re.match(r"^\s*(`{3,}|~{3,})", line)
        if m:
            if not in_fence:
                in_fence, fence = True, m.group(1)
            elif line.strip().startswith(fence):
                in_fence = False
            continue
        if in_fence:
            continue
        for s in re.findall(r"(?<!`)`([^`]+)`(?!`)", line):
            out.append((n, s))
    # spans broken across two lines of a paragraph
    text = md
    for m in re.finditer(r"(?<!`)`([^`\n]*\n[^`\n]*)`(?!`)", text):
        n = text.count("\n", 0, m.start()) + 1
        out.append((n, m.group(1).replace("\n", " ")))
    return out


def span_invocations(span):
    """`tern SUB ARGS` of an inline code span that starts with a tern command (not a quoted
    message such as `tern train: unsupported: ...`)."""
    text = span.replace("|", " ")
    try:
        words = [w for w in shlex.split(text) if not re.match(r"^[A-Za-z_]\w*=", w)]
    except ValueError:
        return []
    if len(words) < 2 or not is_tern_word(words[0]) or not re.match(r"^[a-z][\w-]*$", words[1]):
        return []
    return tern_invocations(text)[:1]


def paragraphs(md):
    """(first line, headings above it, text) of each paragraph outside fenced blocks; list items
    and table rows are paragraphs of their own."""
    out, cur, start, in_fence, fence, heads = [], [], 0, False, None, []
    for n, line in enumerate(md.split("\n"), 1):
        m = re.match(r"^\s*(`{3,}|~{3,})", line)
        if m and not in_fence:
            in_fence, fence = True, m.group(1)
        elif in_fence and line.strip().startswith(fence):
            in_fence = False
            continue
        h = re.match(r"^(#+)\s+(.*)", line) if not in_fence else None
        if in_fence or h or not line.strip() or re.match(r"^\s*([-*|]|\d+\.)\s", line):
            if cur:
                out.append((start, list(heads), " ".join(cur)))
            cur = []
            if h:
                level = len(h.group(1))
                heads = [x for x in heads if x[0] < level] + [(level, h.group(2))]
                continue
            if in_fence or not line.strip():
                continue
        if not cur:
            start = n
        cur.append(line.strip())
    if cur:
        out.append((start, list(heads), " ".join(cur)))
    return out


def paragraph_option_mentions(md):
    """(line, [subcommands], option, span) for each code span that starts with a long option, in
    a paragraph that names `tern SUB` in a code span or under a heading that does (the nearest
    such heading): the option must be one of those subcommands'."""
    out = []
    for line, heads, text in paragraphs(md):
        spans = re.findall(r"(?<!`)`([^`]+)`(?!`)", text)
        subs = []
        for _, head in reversed(heads):
            hs = [sub for sp in re.findall(r"`([^`]+)`", head) for sub, _ in span_invocations(sp)]
            if hs:
                subs += hs
                break
        for sp in spans:
            for sub, _ in span_invocations(sp):
                if sub not in subs:
                    subs.append(sub)
        if not subs:
            continue
        for sp in spans:
            m = re.match(r"^(--[A-Za-z][\w-]*)", sp)
            if m and m.group(1) != "--help":
                out.append((line, subs, m.group(1), sp))
    return out


def option_words(args):
    opts = []
    for a in args:
        m = re.match(r"^(--?[A-Za-z][\w-]*)", a)
        if m and m.group(1) not in ("-h", "--help"):
            opts.append(m.group(1))
    return opts


def test_doc_options_in_help():
    known = set(subcommands())
    errors, checked = [], 0
    for doc in DOCS:
        with open(os.path.join(ROOT, doc), encoding="utf-8") as f:
            md = f.read()
        mentions = []
        for s in extract(doc, md):
            for v in expand_synopsis(s.text):
                for sub, args in tern_invocations(v):
                    mentions.append((s.line, sub, args, v))
        for line, span in inline_spans(md):
            for sub, args in span_invocations(span):
                mentions.append((line, sub, args, span))
        for line, sub, args, text in mentions:
            if sub not in known:
                if re.match(r"^[a-z]+$", sub) and sub.upper() != sub:
                    errors.append(f"{doc}:{line}: `{text}`: tern has no subcommand '{sub}'")
                continue
            rc, out, _ = help_of(sub)
            for opt in option_words(args):
                checked += 1
                if not re.search(r"(?<![\w-])" + re.escape(opt) + r"(?![\w-])", out):
                    errors.append(f"{doc}:{line}: `{text}`: `tern {sub} --help` does not mention {opt}")
        for line, subs, opt, span in paragraph_option_mentions(md):
            helps = [help_of(sub)[1] for sub in subs if sub in known]
            checked += 1
            if helps and not any(re.search(r"(?<![\w-])" + re.escape(opt) + r"(?![\w-])", h) for h in helps):
                errors.append(f"{doc}:{line}: `{span}` in a paragraph about " + ", ".join(f"`tern {s}`" for s in subs)
                              + f": no --help of these mentions {opt}")
    print(f"\n{checked} option mentions checked against the subcommands' --help")
    if errors:
        pytest.fail("\n".join(sorted(set(errors))), pytrace=False)


def test_table_entries_used():
    steps = [s for doc in DOCS for s in doc_steps(doc)]
    for kind in ("parse_only", "background"):
        for e in TABLE.get(kind, []):
            hits = [s for s in steps if fnmatch.fnmatch(s.doc, e["doc"]) and re.search(e["match"], s.text)]
            assert hits, f"tests/docs_commands.toml: [[{kind}]] {e['doc']} {e['match']!r} matches no step: remove it"
            assert e.get("reason"), f"tests/docs_commands.toml: [[{kind}]] {e['match']!r} gives no reason"
            if kind == "background":
                assert e.get("ready"), f"tests/docs_commands.toml: [[background]] {e['match']!r} needs `ready`"
    for doc in TABLE.get("doc_words", {}):
        assert doc in DOCS, f"tests/docs_commands.toml: [doc_words.\"{doc}\"] names no doc"


EXAMPLE = """\
# Title

Text with `tern translate -m X` inline.

```sh
make -j2 && \\
  echo "a # b" | ./build/tern translate -m M   # translate
# a comment line
tern score -r ref.de hyp.de; tern info -m M
for p in a b; do
  tern train --precision $p &
done; wait
tern convert --from D -o O [--quantize int8|float16]
```

```console
$ tern cpu
AVX2 ...
$ tern vocab -o spm \\
>   train.en
```

```
config.json  <- tern translate -m
tern average -o avg --last 2 run
```

```c
tern_model_load();
```
"""


def test_extractor():
    steps = extract("x.md", EXAMPLE)
    assert [(s.line, s.text) for s in steps] == [
        (6, "make -j2"),
        (6, 'echo "a # b" | ./build/tern translate -m M'),
        (9, "tern score -r ref.de hyp.de"),
        (9, "tern info -m M"),
        (10, "for p in a b; do\ntern train --precision $p &\ndone"),
        (10, "wait"),
        (13, "tern convert --from D -o O [--quantize int8|float16]"),
        (17, "tern cpu"),
        (19, "tern vocab -o spm train.en"),
        (25, "tern average -o avg --last 2 run"),
    ]
    assert expand_synopsis("tern convert --from D -o O [--quantize int8|float16]") == [
        "tern convert --from D -o O", "tern convert --from D -o O --quantize int8",
        "tern convert --from D -o O --quantize float16"]
    assert expand_synopsis("tern translate -m M [IN [OUT]]") == [
        "tern translate -m M", "tern translate -m M IN", "tern translate -m M IN OUT"]
    assert tern_invocations('echo "a" | ./build/tern translate -m M -b 5 in.txt') == [
        ("translate", ["-m", "M", "-b", "5", "in.txt"])]
    assert tern_invocations("mpirun -np 2 \\\n tern train -t 1 --vocab v ... --resume & wait") == [
        ("train", ["-t", "1", "--vocab", "v", "...", "--resume"])]
    blk = [Step("x.md", 1, "tern train --vocab v --lr 1", 0), Step("x.md", 2, "tern train ... --resume", 0)]
    assert fill_ellipsis(blk[1], blk) == "tern train --vocab v --lr 1 --resume"
    assert substitute("tern average -o OUT --last 5 SAVE_DIR/x CT2_DIR", "README.md") == \
        "tern average -o avg --last 2 ckpts/x ct2models/pre-shared-tied"
    assert span_invocations("tern train: unsupported: this tern was built without MPI") == []
    assert span_invocations("tern translate --eos-policy common|paper") == [
        ("translate", ["--eos-policy", "common", "paper"])]
    md = ("# T\n\n## `tern train`: x\n\nOptions: `--lr`, `-q`, `--bogus N`.\n\n"
          "About `tern score -r R` and\n`--json`.\n\n## Other\n\n`--free` here.\n")
    assert paragraph_option_mentions(md) == [
        (5, ["train"], "--lr", "--lr"), (5, ["train"], "--bogus", "--bogus N"),
        (7, ["train", "score"], "--json", "--json")]


def test_runner(tmp_path):
    """A step that leaves a process behind returns at once and the process is killed; a
    [[background]] step runs until the doc is done, then its process group is stopped."""
    env = make_env(str(tmp_path))
    t0 = time.monotonic()
    r = run_bash("sleep 30 & echo $! > pid; echo hi", tmp_path, env, 20)
    assert (r.returncode, r.stdout) == (0, b"hi\n") and time.monotonic() - t0 < 10
    pid = int((tmp_path / "pid").read_text())
    time.sleep(0.2)
    assert not os.path.exists(f"/proc/{pid}") or "Z" in open(f"/proc/{pid}/stat").read().split()[2]
    with pytest.raises(subprocess.TimeoutExpired):
        run_bash("sleep 30", tmp_path, env, 0.5)
    step = Step("x.md", 3, "serve", 0)
    p, err = start_background(step, "echo $$ > bg.pid; sleep 30", tmp_path, env,
                              {"ready": "test -s bg.pid", "ready_timeout": 10})
    assert err is None and p.poll() is None
    stop_background([p])
    assert p.returncode is not None
    p, err = start_background(step, "exit 3", tmp_path, env, {"ready": "false", "ready_timeout": 10})
    assert err.startswith("x.md:3: `serve` (run as `exit 3`) exited 3 before it was ready")


def test_parse_check(tmp_path):
    """A parse-only step with an option the CLI rejects fails, naming the doc and line; a
    correct one passes; a script it names must exist."""
    env = make_env(str(tmp_path))
    mirror_repo(tmp_path)
    entry = {"reason": "test", "vars": {"p": "bfloat16"}}
    bad = Step("docs/x.md", 7, "mpirun -np 2 tern train -t 1 --vocab v --bogus-option 3 ... --resume", 0)
    errs = parse_check(bad, bad.text, tmp_path, env, entry)
    assert len(errs) == 1 and errs[0].startswith("docs/x.md:7: `tern train -t 1 --vocab v --bogus-option 3 --resume`"
                                                 " (parse check with --help) exited 2"), errs
    good = Step("docs/x.md", 8, "for p in a; do tern train --precision $p --vocab v & done", 0)
    assert parse_check(good, good.text, tmp_path, env, entry) == []
    missing = Step("docs/x.md", 9, "bash bench/no_such_bench.sh 3", 0)
    assert parse_check(missing, missing.text, tmp_path, env, entry) == [
        "docs/x.md:9: `bash bench/no_such_bench.sh 3` names bench/no_such_bench.sh, which does not exist"]


if __name__ == "__main__":
    for doc in DOCS:
        for step, variants, entry in plan(doc):
            mode = f"parse only: {entry['reason']}" if entry else "run"
            print(f"{step.where()}: {step.text.replace(chr(10), ' ')}\n    -> {mode}")
            if not entry:
                for v in variants:
                    print(f"       $ {v}")
