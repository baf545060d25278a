"""Marian itself (pymarian) as the peer of Tern's Marian readers: the scripts the tests run in a
subprocess (sys.executable -c SCRIPT ...), shared by tests/test_marian_native.py and
tests/test_marian_ssru.py.

TRAIN OUT DATA KW_JSON: a transformer Marian trains for 100 updates on DATA.en/DATA.de into
OUT/model.npz (dim 32, 2 heads, 2+2 layers, one thread, seed 1); KW_JSON's keywords are
pymarian.Trainer's (vocabs relative to OUT; e.g. transformer_decoder_autoreg="rnn", dec_cell="ssru").
DECODE DIR VOCABS_JSON BEAM INPUT: Marian's n-best of DIR/model.npz, one sentence a batch, without
length normalization; prints a JSON list per input line [text, word scores (the end token's last),
pieces] of the best hypothesis.
"""

# Tern's options that decode as Marian does (docs/models.md, "Marian's search"): greedy with Marian's
# --max-length-factor 3 and an empty output allowed; beam search with Marian's EOS policy, no early
# stop, no length normalization (--normalize 0)
GREEDY = ["-b", "1", "--max-length-a", "3", "--min-length", "0"]
BEAM4 = ["-b", "4", "--eos-policy", "marian", "--no-early-stop", "--length-penalty", "0", "--max-length-a", "3",
         "--min-length", "0"]

TRAIN = r"""
import json, sys, pymarian
out, data, kw = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
kw["vocabs"] = [out + "/" + v for v in kw["vocabs"]]
pymarian.Trainer(type="transformer", model=out + "/model.npz", train_sets=[data + ".en", data + ".de"],
                 dim_emb=32, transformer_heads=2, enc_depth=2, dec_depth=2, after="100u", mini_batch=32,
                 maxi_batch=10, cpu_threads=1, seed=1, quiet=True, learn_rate=0.003, lr_warmup=0, **kw).train()
"""

DECODE = r"""
import json, sys, pymarian
d, vocabs, beam, inp = sys.argv[1], json.loads(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
tr = pymarian.Translator(models=d + "/model.npz", vocabs=[d + "/" + v for v in vocabs], beam_size=beam, normalize=0,
                         cpu_threads=1, mini_batch=1, quiet=True, n_best=True, word_scores=True, no_spm_decode=True)
sp = None
if vocabs[-1].endswith(".spm"):
    import sentencepiece
    sp = sentencepiece.SentencePieceProcessor(model_file=d + "/" + vocabs[-1])
out = {}
for line in tr.translate(open(inp, encoding="utf-8").read().splitlines()):
    f = line.split(" ||| ")
    i = int(f[0])
    if i not in out:  # n-best lists are best first
        pieces = f[1].strip()  # the target pieces, one word score each (the end token's last)
        text = sp.decode(pieces.split()) if sp else pieces
        out[i] = [text, [float(x) for x in f[2].split()[1:]], pieces]
print(json.dumps([out[i] for i in range(len(out))]))
"""
