"""One script of ctranslate2.Translator calls, run against a module `ct` that is either ctranslate2
or tern (tests/test_ct2_conformance.py runs it with both on the same CTranslate2 model and compares).

run(ct, model_dir, inputs, tmp) -> {call name: plain data}: every result object becomes
(its class name, {field: value}) with the fields CTranslate2's class has (FIELDS), so that the two
runs compare as plain Python data: same types, same fields, same values. Only deterministic
options are called (sampling with sampling_topk=1, which is the argmax)."""
import os

# CTranslate2 4.x's result classes and their public fields (dir() of ctranslate2's classes)
FIELDS = {
    "TranslationResult": ("hypotheses", "scores", "attention", "logits"),
    "ScoringResult": ("tokens", "log_probs"),
    "GenerationStepResult": ("step", "batch_id", "token_id", "hypothesis_id", "token", "log_prob", "is_last"),
    "ExecutionStats": ("num_tokens", "num_examples"),  # total_time_in_ms: a time, not compared
}


def plain(x):
    """A result (or a list of them) as comparable data."""
    if isinstance(x, (list, tuple)):
        return [plain(v) for v in x]
    name = type(x).__name__
    if name in FIELDS:
        return (name, {f: plain(getattr(x, f)) for f in FIELDS[name]})
    if name in ("AsyncTranslationResult", "AsyncScoringResult"):
        return (name, plain(x.result()), bool(x.done()))
    return x


def run(ct, model_dir, inputs, tmp):
    out = {}
    src = inputs[:24]
    t = ct.Translator(model_dir, device="auto", device_index=0, compute_type="default", inter_threads=1,
                      intra_threads=1, max_queued_batches=0)
    out["attributes"] = (t.device, t.device_index, t.compute_type, t.num_translators)
    for ctype in ("auto", "int8", "int8_float32", "float32", {"cpu": "float32", "cuda": "float16"}):
        out[f"compute_type {ctype}"] = ct.Translator(model_dir, compute_type=ctype, intra_threads=1).compute_type
    for ctype in ("int8_float16", "float16", "bfloat16"):
        try:
            ct.Translator(model_dir, compute_type=ctype, intra_threads=1)
            out[f"compute_type {ctype}"] = "accepted"
        except ValueError as e:
            out[f"compute_type {ctype}"] = ("ValueError", str(e))
    try:
        ct.Translator(model_dir, device_index=1)
        out["device_index 1"] = "accepted"
    except ValueError:
        out["device_index 1"] = "ValueError"

    tb = t.translate_batch
    out["default"] = plain(tb(src))
    out["greedy scores"] = plain(tb(src, beam_size=1, return_scores=True))
    out["beam4 nbest"] = plain(tb(src, beam_size=4, num_hypotheses=3, return_scores=True))
    out["beam4 lp0"] = plain(tb(src, beam_size=4, length_penalty=0, return_scores=True))
    out["max/min length"] = plain(tb(src, beam_size=1, max_decoding_length=3, min_decoding_length=2))
    out["max_input_length"] = plain(tb(src, beam_size=1, max_input_length=4))
    out["max_input_length 0"] = plain(tb(src, beam_size=1, max_input_length=0))
    greedy = [r.hypotheses[0] for r in tb(src, beam_size=1)]
    prefixes = [g[:2] if i % 2 else None for i, g in enumerate(greedy)]
    out["target_prefix"] = plain(tb(src, target_prefix=prefixes, beam_size=1))
    out["target_prefix beam"] = plain(tb(src, target_prefix=prefixes, beam_size=3))
    out["batches of 5"] = plain(tb(src, beam_size=1, max_batch_size=5))
    out["batches of 40 tokens"] = plain(tb(src, beam_size=1, max_batch_size=40, batch_type="tokens"))
    out["repetition_penalty"] = plain(tb(src, beam_size=1, repetition_penalty=1.5))
    out["no_repeat_ngram_size"] = plain(tb(src, beam_size=1, no_repeat_ngram_size=2, max_decoding_length=30))
    out["disable_unk"] = plain(tb(src, beam_size=2, disable_unk=True))
    common = [g[0] for g in greedy if g][:3]
    out["suppress_sequences"] = plain(tb(src, beam_size=1, suppress_sequences=[[common[0]], common[1:3]]))
    out["end_token"] = plain(tb(src, beam_size=1, end_token="</s>"))
    out["return_end_token"] = plain(tb(src, beam_size=1, return_end_token=True, max_decoding_length=6))
    if os.path.exists(os.path.join(model_dir, "vmap.txt")):
        out["use_vmap greedy"] = plain(tb(src, beam_size=1, use_vmap=True))
        out["use_vmap beam"] = plain(tb(src, beam_size=3, use_vmap=True, return_scores=True))
        # not generate_tokens(use_vmap=True): ctranslate2 4.8's step results then give the token's
        # position in the reduced vocabulary as its id (and the piece of that id), not the token
        # its translate_batch outputs; tests/test_ct2_conformance.py checks Tern's against the latter
    # return_alternatives: one input at a time (CTranslate2 refuses a batch of prefixes with it)
    for name, kw in [("greedy", dict(beam_size=1, num_hypotheses=3)),
                     ("beam lp0", dict(beam_size=4, num_hypotheses=3, length_penalty=0)),
                     ("prefix", dict(beam_size=1, num_hypotheses=4, length_penalty=0.5, max_decoding_length=12)),
                     ("prefix beam lp0", dict(beam_size=2, num_hypotheses=2, length_penalty=0, max_decoding_length=30)),
                     ("min prob", dict(beam_size=1, num_hypotheses=5, min_alternative_expansion_prob=0.05))]:
        res = []
        for i, s in enumerate(src[:8]):
            pre = [greedy[i][:2] or ["</s>"]] if name.startswith("prefix") else None
            if name == "prefix beam lp0" and i % 2:
                pre = [greedy[i] or ["</s>"]]  # the whole greedy output: the end token is likely next
            res.append(plain(tb([s], pre, return_alternatives=True, return_scores=True, **kw)))
        out[f"return_alternatives {name}"] = res
    out["sampling topk 1"] = plain(tb(src, beam_size=1, sampling_topk=1, sampling_temperature=0.5))
    out["patience 1, prefix_bias_beta 0"] = plain(tb(src[:4], patience=1, prefix_bias_beta=0))
    out["asynchronous"] = plain(tb(src[:6], beam_size=1, asynchronous=True))
    events = []
    tb(src[:4], beam_size=1, callback=lambda s: events.append(s))
    out["callback"] = sorted(plain(events), key=lambda e: (e[1]["batch_id"], e[1]["step"]))
    out["generate_tokens"] = plain(list(t.generate_tokens(src[0])))
    out["generate_tokens prefix"] = plain(list(t.generate_tokens(src[1], greedy[1][:2])))
    out["generate_tokens max 3"] = plain(list(t.generate_tokens(src[2], max_decoding_length=3)))
    for i in range(4):
        out[f"generate_tokens log_prob {i}"] = plain(list(t.generate_tokens(src[i], return_log_prob=True)))
    out["generate_tokens log_prob prefix, max 5"] = plain(list(t.generate_tokens(
        src[2], greedy[2][:2], return_log_prob=True, max_decoding_length=5)))
    out["generate_tokens log_prob repetition_penalty"] = plain(list(t.generate_tokens(
        src[3], return_log_prob=True, repetition_penalty=1.3, max_decoding_length=12)))
    out["translate_iterable"] = plain(list(t.translate_iterable(iter(src), max_batch_size=5, beam_size=1)))
    out["translate_iterable prefix"] = plain(list(t.translate_iterable(src, iter([p or [] for p in prefixes]), max_batch_size=7)))

    targets = [g if g else ["</s>"] for g in greedy]
    out["score_batch"] = plain(t.score_batch(src, targets))
    out["score_batch offset"] = plain(t.score_batch(src, targets, offset=1))
    out["score_batch batches"] = plain(t.score_batch(src, targets, max_batch_size=4))
    out["score_batch asynchronous"] = plain(t.score_batch(src[:3], targets[:3], asynchronous=True))
    out["score_iterable"] = plain(list(t.score_iterable(iter(src), iter(targets), max_batch_size=5)))

    # files: tokens separated by spaces, one example a line (an empty line among them)
    sp, tp, pp = os.path.join(tmp, "src.txt"), os.path.join(tmp, "tgt.txt"), os.path.join(tmp, "pre.txt")
    lines = [" ".join(s) for s in src[:10]]
    lines.insert(3, "")
    tlines = [" ".join(t) for t in targets[:10]]
    tlines.insert(3, "x")
    with open(sp, "w", encoding="utf-8") as f:
        f.write("".join(x + "\n" for x in lines))
    with open(tp, "w", encoding="utf-8") as f:
        f.write("".join(x + "\n" for x in tlines))
    with open(pp, "w", encoding="utf-8") as f:
        # an empty source gets no prefix: CTranslate2 decodes the prefix of an empty source, Tern gives
        # an empty source an empty translation without decoding
        f.write("".join((" ".join(x.split()[:1]) if s else "") + "\n" for x, s in zip(tlines, lines)))

    def file_call(name, fn, *args, **kw):
        o = os.path.join(tmp, name.replace(" ", "_") + ".out")
        stats = fn(*args[:2], o, *args[2:], **kw) if fn == t.score_file else fn(args[0], o, *args[1:], **kw)
        with open(o, encoding="utf-8") as f:
            out[name] = (plain(stats), f.read().split("\n"))

    file_call("translate_file", t.translate_file, sp, beam_size=1)
    file_call("translate_file nbest scores", t.translate_file, sp, beam_size=3, num_hypotheses=2, with_scores=True)
    file_call("translate_file target_path", t.translate_file, sp, pp, beam_size=1)
    file_call("translate_file tokenize fns", t.translate_file, sp, beam_size=1, max_batch_size=3,
              source_tokenize_fn=lambda s: s.split(), target_detokenize_fn=lambda toks: "_".join(toks))
    file_call("score_file", t.score_file, sp, tp)
    file_call("score_file tokens", t.score_file, sp, tp, with_tokens_score=True, offset=1)

    # int8 weights quantized at load time (CTranslate2's int8_float32; CT2_USE_MKL=1 makes its int8 exact)
    t8 = ct.Translator(model_dir, compute_type="int8", intra_threads=1)
    out["int8 greedy"] = plain(t8.translate_batch(src, beam_size=1, return_scores=True))
    out["int8 beam"] = plain(t8.translate_batch(src, beam_size=4, num_hypotheses=2))

    # inter_threads: one call split across the replicas gives what one replica gives
    t2 = ct.Translator(model_dir, inter_threads=2, intra_threads=1)
    out["inter_threads 2"] = (t2.num_translators, plain(t2.translate_batch(inputs, beam_size=1)))
    out["inter_threads 2 score"] = plain(t2.score_batch(src, targets))
    return out
