"""``python -m tern translate -m MODEL [options] [INPUT [OUTPUT]]``, also installed as the ``tern-nmt``
command (not ``tern``: that is the C CLI's name).

Translates INPUT (default: stdin) into OUTPUT (default: stdout), one output line per input line, in
order, with tern.Translator. The defaults are the C CLI's (``tern translate``: beam 4, no length
penalty, at most 256 output tokens), so both give the same lines. An empty input line gives an
empty output line. Errors are one line on stderr, no traceback: exit 2 for a usage error or a model
that cannot be loaded (a missing directory is named), 1 for a failure while translating.
"""
import argparse
import os
import sys


def _prog():
    return "python -m tern" if os.path.basename(sys.argv[0]) == "__main__.py" else "tern-nmt"


class _Fail(Exception):
    def __init__(self, message, code):
        super().__init__(message)
        self.code = code


def _parser():
    p = argparse.ArgumentParser(prog=_prog(), description="Tern neural machine translation (the Python package's CLI).")
    p.add_argument("--version", action="store_true", help="print the version of Tern and exit")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    t = sub.add_parser("translate", help="translate lines of text (stdin to stdout by default)",
                       description="Translates INPUT (default: stdin) into OUTPUT (default: stdout), one output "
                                   "line per input line, as `tern translate` does (same defaults, same output).")
    t.add_argument("input", nargs="?", default="-", metavar="INPUT", help="input text, one sentence a line (default: stdin)")
    t.add_argument("output", nargs="?", default="-", metavar="OUTPUT", help="output file (default: stdout)")
    t.add_argument("-m", "--model", required=True, metavar="DIR",
                   help="model directory: Tern (config.json + model.safetensors) or CTranslate2 (model.bin + ...)")
    t.add_argument("--compute-type", default="auto", choices=["auto", "default", "float32", "int8"],
                   help="auto: as stored (default)")
    t.add_argument("--pretokenized", action="store_true",
                   help="input and output are space-separated vocabulary pieces (implied for a model without "
                        "a SentencePiece model)")
    # the search defaults (None here) are the model's own, as tern translate's: its generation_config.json
    # over Tern's (beam 4, length penalty 0, coverage penalty 0, 256 tokens, min length 1)
    t.add_argument("-b", "--beam-size", type=int, default=None, metavar="N",
                   help="1: greedy search (default: the model's, else 4)")
    t.add_argument("--length-penalty", type=float, default=None, metavar="A",
                   help="length normalization exponent (default: the model's, else 0: none)")
    t.add_argument("--coverage-penalty", type=float, default=None, metavar="B",
                   help="GNMT coverage penalty (default: the model's, else 0)")
    t.add_argument("--max-decoding-length", type=int, default=None, metavar="N",
                   help="maximum output tokens (default: the model's, else 256)")
    t.add_argument("--min-length", type=int, default=None, metavar="N",
                   help="no end of sentence before N output tokens (default: the model's, else 1)")
    t.add_argument("--max-input-length", type=int, default=1024, metavar="N",
                   help="longer inputs are truncated (default 1024)")
    t.add_argument("-t", "--threads", type=int, default=0, metavar="N",
                   help="threads of the translation (default 0: all cores)")
    t.add_argument("--max-batch-size", type=int, default=0, metavar="N",
                   help="cap on sentences per batch (default 0: none)")
    t.add_argument("--max-batch-tokens", type=int, default=4096, metavar="N",
                   help="token budget of a batch: sentences x longest source (default 4096)")
    t.add_argument("--read-ahead", type=int, default=0, metavar="LINES",
                   help="lines read and translated together (default 256; 1 when the input is a terminal, "
                        "so that each line is answered at once)")
    # sampling and repetition controls: tern translate's flags (docs/decoding.md)
    t.add_argument("--sampling-topk", type=int, default=1, metavar="K",
                   help="draw each token from the K most probable (0: all; default 1: argmax, no sampling); "
                        "sampling implies -b 1 unless -b is given")
    t.add_argument("--sampling-topp", type=float, default=1.0, metavar="P",
                   help="and from the fewest best ones whose probability sums to >= P, in (0, 1] (default 1: off)")
    t.add_argument("--sampling-temperature", type=float, default=1.0, metavar="T",
                   help="divide the log-probabilities by T > 0 before drawing (default 1)")
    t.add_argument("--seed", type=int, default=12345, metavar="N",
                   help="the draws depend only on N, the input line and the step (default 12345)")
    t.add_argument("--repetition-penalty", type=float, default=1.0, metavar="R",
                   help="logits of tokens already output divided by R (multiplied when negative), R > 0 "
                        "(default 1: off)")
    t.add_argument("--no-repeat-ngram-size", type=int, default=0, metavar="N",
                   help="no n-gram of N tokens twice in an output (default 0: off)")
    t.add_argument("-q", "--quiet", action="store_true", help="no warnings on stderr")
    return p


def _lines(f, name):
    """Yields the lines of binary file f as str without their newline; non-UTF-8 input is an error
    naming the line."""
    for i, raw in enumerate(f, 1):
        try:
            yield raw.rstrip(b"\n").decode("utf-8")
        except UnicodeDecodeError as e:
            raise _Fail(f"{name}:{i}: not UTF-8 ({e.reason} at byte {e.start})", 1) from None


def _chunks(lines, n):
    chunk = []
    for line in lines:
        chunk.append(line)
        if len(chunk) >= n:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def _translate_lines(tr, src, lines, opts):
    """translate_batch of the non-empty lines of a chunk; with sampling, each line by its line
    number (the draws of `tern translate`), in runs of consecutive lines."""
    if opts["sampling_topk"] == 1:
        return tr.translate_batch(src, **opts)
    res, a = [], 0
    while a < len(src):
        b = a + 1
        while b < len(src) and lines[b] == lines[b - 1] + 1:
            b += 1
        res.extend(tr.translate_batch(src[a:b], _index_offset=lines[a], **opts))
        a = b
    return res


def translate(args):
    for name, v in (("--beam-size", args.beam_size), ("--max-decoding-length", args.max_decoding_length),
                    ("--max-input-length", args.max_input_length), ("--max-batch-tokens", args.max_batch_tokens)):
        if v is not None and v < 1:
            raise _Fail(f"{name} must be at least 1, got {v}", 2)
    for name, v in (("--threads", args.threads), ("--max-batch-size", args.max_batch_size),
                    ("--min-length", args.min_length), ("--read-ahead", args.read_ahead),
                    ("--sampling-topk", args.sampling_topk), ("--no-repeat-ngram-size", args.no_repeat_ngram_size),
                    ("--seed", args.seed)):
        if v is not None and v < 0:
            raise _Fail(f"{name} must not be negative, got {v}", 2)
    if not os.path.isdir(args.model):
        what = "is not a directory" if os.path.exists(args.model) else "does not exist"
        raise _Fail(f"model directory {args.model!r} {what}", 2)
    fin = sys.stdin.buffer if args.input == "-" else None
    if fin is None:
        try:
            fin = open(args.input, "rb")
        except OSError as e:
            raise _Fail(f"cannot read {args.input!r}: {e.strerror}", 2) from None

    import tern  # after the arguments are checked: loading the library takes a moment

    if args.quiet:
        tern.set_log_level(1)
    compute_type = "default" if args.compute_type == "auto" else args.compute_type
    try:
        tr = tern.Translator(args.model, compute_type=compute_type, inter_threads=1, intra_threads=args.threads,
                             max_batch_tokens=args.max_batch_tokens)
    except (tern.TernError, OSError, ValueError) as e:
        raise _Fail(f"cannot load the model in {args.model!r}: {e}", 2) from None
    pieces = args.pretokenized or not tr.info.get("has_spm", True)
    fout = sys.stdout.buffer if args.output == "-" else None
    if fout is None:
        try:
            fout = open(args.output, "wb")
        except OSError as e:
            raise _Fail(f"cannot write {args.output!r}: {e.strerror}", 2) from None
    n = args.read_ahead or (1 if fin.isatty() else 256)
    d = tr.info["decoding_defaults"]

    def given(v, key):
        return d[key] if v is None else v

    sampling = args.sampling_topk != 1
    opts = dict(beam_size=given(args.beam_size, "beam_size") if not sampling or args.beam_size else 1,
                length_penalty=given(args.length_penalty, "length_penalty"),
                coverage_penalty=given(args.coverage_penalty, "coverage_penalty"),
                max_decoding_length=given(args.max_decoding_length, "max_decoding_length"),
                min_decoding_length=given(args.min_length, "min_decoding_length"),
                max_input_length=args.max_input_length, max_batch_size=args.max_batch_size,
                sampling_topk=args.sampling_topk, sampling_topp=args.sampling_topp,
                sampling_temperature=args.sampling_temperature, seed=args.seed,
                repetition_penalty=args.repetition_penalty, no_repeat_ngram_size=args.no_repeat_ngram_size)
    name = "<stdin>" if args.input == "-" else args.input
    line0 = 0  # the input line of the chunk's first line: a sampling draw depends on it, as tern translate's
    try:
        for chunk in _chunks(_lines(fin, name), n):
            todo = [i for i, s in enumerate(chunk) if s.strip()]
            src = [chunk[i].split() if pieces else chunk[i] for i in todo]
            out = [""] * len(chunk)
            if src:
                try:
                    res = _translate_lines(tr, src, [line0 + i for i in todo], opts)
                except (tern.TernError, ValueError, TypeError) as e:
                    raise _Fail(f"{name}: {e}", 1) from None
                for i, r in zip(todo, res):
                    h = r.hypotheses[0] if r.hypotheses else ""
                    out[i] = " ".join(h) if pieces else h
            line0 += len(chunk)
            fout.write("".join(s + "\n" for s in out).encode("utf-8"))
            fout.flush()
    finally:
        if fout is not sys.stdout.buffer:
            fout.close()
        if fin is not sys.stdin.buffer:
            fin.close()


def main(argv=None):
    p = _parser()
    args = p.parse_args(argv)
    if args.version:
        import tern
        print(f"tern-nmt {tern.__version__}")
        return 0
    if args.command != "translate":
        p.print_help(sys.stderr)
        return 2
    try:
        translate(args)
    except _Fail as e:
        print(f"{p.prog}: {e}", file=sys.stderr)
        return e.code
    except BrokenPipeError:  # `... | head`: stop quietly, as a C program killed by SIGPIPE would
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 141
    except KeyboardInterrupt:
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
