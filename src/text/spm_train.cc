// spm_train.cc — the C interface to SentencePiece's trainer: spm_train_files() reads the input
// files itself (one sentence a line, "\r\n" or "\n") and hands the sentences to
// SentencePieceTrainer through a SentenceIterator, so that any file name works (the trainer's
// --input flag splits on commas) and an unreadable file is named in the error. Every C++
// exception is caught here; nothing throws across the boundary. This file (and spm_train(), the
// trainer with SentencePieceTrainer's own arguments) is the only one linking
// libsentencepiece_train: it belongs to the training library (libtern-train.a), not to libtern.so.
#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <algorithm>
#include <new>
#include <random>
#include <string>
#include <unordered_map>
#include <vector>

extern "C" {
#include "text/spm.h"
}

namespace {

// Lines of several files, in order.
class FilesIterator : public sentencepiece::SentenceIterator {
  public:
    // keep: sorted line numbers (over all files) to yield, or nullptr for every line.
    FilesIterator(const char *const *paths, int n, const std::vector<long> *keep = nullptr)
        : paths_(paths), n_(n), keep_(keep) {
        Advance();
    }
    ~FilesIterator() override {
        if (f_) std::fclose(f_);
        std::free(buf_);
    }
    bool done() const override { return done_; }
    void Next() override { Advance(); }
    const std::string &value() const override { return value_; }
    sentencepiece::util::Status status() const override { return status_; }
    long lines() const { return lines_; }

  private:
    void Advance() {
        while (!done_) {
            if (!f_) {
                if (next_ >= n_) {
                    done_ = true;
                    return;
                }
                cur_ = paths_[next_++];
                f_ = std::fopen(cur_, "rb");
                if (!f_) {
                    Fail(std::string(cur_) + ": cannot open: " + std::strerror(errno));
                    return;
                }
            }
            ssize_t r = getline(&buf_, &cap_, f_);
            if (r >= 0) {
                long line = lines_++;
                if (keep_) {
                    if (next_keep_ >= keep_->size()) {
                        done_ = true;
                        return;
                    }
                    if ((*keep_)[next_keep_] != line) continue;
                    next_keep_++;
                }
                while (r > 0 && (buf_[r - 1] == '\n' || buf_[r - 1] == '\r')) r--;
                value_.assign(buf_, static_cast<size_t>(r));
                return;
            }
            bool err = std::ferror(f_) != 0;
            std::fclose(f_);
            f_ = nullptr;
            if (err) {
                Fail(std::string(cur_) + ": read failed");
                return;
            }
        }
    }
    void Fail(const std::string &msg) {
        status_ = sentencepiece::util::Status(sentencepiece::util::StatusCode::kNotFound, msg);
        done_ = true;
    }

    const char *const *paths_;
    int n_;
    const std::vector<long> *keep_;
    size_t next_keep_ = 0;
    int next_ = 0;
    const char *cur_ = "";
    std::FILE *f_ = nullptr;
    char *buf_ = nullptr;
    size_t cap_ = 0;
    std::string value_;
    bool done_ = false;
    long lines_ = 0;
    sentencepiece::util::Status status_;
};

// Lines of the files (as FilesIterator counts them); -1 with *err set on a read error.
long CountLines(const char *const *paths, int n, std::string *err) {
    FilesIterator it(paths, n);
    long k = 0;
    for (; !it.done(); it.Next()) k++;
    if (!it.status().ok()) {
        *err = it.status().error_message();
        return -1;
    }
    return k;
}

// k of n line numbers, uniformly, seeded; sorted.
std::vector<long> SampleLines(long n, long k, unsigned seed) {
    std::mt19937_64 rng(seed);
    std::vector<long> keep;
    keep.reserve(static_cast<size_t>(std::min(n, k)));
    for (long i = 0; i < n; i++) {
        if (i < k) {
            keep.push_back(i);
        } else {
            long j = static_cast<long>(std::uniform_int_distribution<long>(0, i)(rng));
            if (j < k) keep[static_cast<size_t>(j)] = i;
        }
    }
    std::sort(keep.begin(), keep.end());
    return keep;
}

}  // namespace

extern "C" spm_train_options_t spm_train_default_options(void) {
    spm_train_options_t o;
    std::memset(&o, 0, sizeof o);
    o.vocab_size = 8000;
    o.model_type = "unigram";
    o.character_coverage = 1.0f;
    o.input_sentence_size = 0;
    o.seed = 1;
    o.threads = 1;
    o.pad_id = 0;
    o.unk_id = 1;
    o.bos_id = 2;
    o.eos_id = 3;
    o.max_sentence_length = 4192;
    return o;
}

extern "C" tern_status_t spm_train_files(const spm_train_options_t *o) {
    if (!o || !o->model_prefix || !o->inputs || o->n_inputs < 1)
        return tern_error(TERN_ERR_INVALID_ARG, "spm_train_files: no input files or no model prefix");
    for (int i = 0; i < o->n_inputs; i++) {
        std::FILE *f = std::fopen(o->inputs[i], "rb");
        if (!f) return tern_error(TERN_ERR_IO, "%s: cannot open: %s", o->inputs[i], std::strerror(errno));
        std::fclose(f);
    }
    try {
        std::unordered_map<std::string, std::string> kw;
        auto num = [](double v) {
            char b[64];
            std::snprintf(b, sizeof b, "%.9g", v);
            return std::string(b);
        };
        kw["model_prefix"] = o->model_prefix;
        kw["vocab_size"] = num(o->vocab_size);
        kw["model_type"] = o->model_type ? o->model_type : "unigram";
        kw["character_coverage"] = num(o->character_coverage);
        kw["input_sentence_size"] = "0"; /* sampled below */
        kw["num_threads"] = num(o->threads > 0 ? o->threads : 1);
        kw["pad_id"] = num(o->pad_id);
        kw["unk_id"] = num(o->unk_id);
        kw["bos_id"] = num(o->bos_id);
        kw["eos_id"] = num(o->eos_id);
        kw["max_sentence_length"] = num(o->max_sentence_length > 0 ? o->max_sentence_length : 4192);
        if (o->user_symbols && *o->user_symbols) kw["user_defined_symbols"] = o->user_symbols;
        kw["minloglevel"] = o->verbose ? "0" : "2";
        sentencepiece::SetRandomGeneratorSeed(o->seed);
        std::vector<long> keep;
        if (o->input_sentence_size > 0) {
            std::string err;
            long n = CountLines(o->inputs, o->n_inputs, &err);
            if (n < 0) return tern_error(TERN_ERR_IO, "%s", err.c_str());
            if (n > o->input_sentence_size) keep = SampleLines(n, o->input_sentence_size, o->seed);
        }
        FilesIterator it(o->inputs, o->n_inputs, keep.empty() ? nullptr : &keep);
        auto status = sentencepiece::SentencePieceTrainer::Train(kw, &it);
        if (!it.status().ok())
            return tern_error(TERN_ERR_IO, "%s", it.status().error_message());
        if (!status.ok())
            return tern_error(TERN_ERR_INVALID_ARG, "SentencePiece training (%s.model): %s", o->model_prefix,
                              status.ToString().c_str());
        return TERN_OK;
    } catch (const std::bad_alloc &) {
        return tern_error(TERN_ERR_NOMEM, "spm_train_files: out of memory");
    } catch (const std::exception &e) {
        return tern_error(TERN_ERR_INTERNAL, "spm_train_files: %s", e.what());
    } catch (...) {
        return tern_error(TERN_ERR_INTERNAL, "spm_train_files: unknown exception");
    }
}

extern "C" tern_status_t spm_train(const char *args) {
    if (!args) return tern_error(TERN_ERR_INVALID_ARG, "spm_train: no arguments");
    try {
        auto status = sentencepiece::SentencePieceTrainer::Train(args);
        if (!status.ok())
            return tern_error(TERN_ERR_INVALID_ARG, "SentencePiece training failed: %s", status.ToString().c_str());
        return TERN_OK;
    } catch (const std::bad_alloc &) {
        return tern_error(TERN_ERR_NOMEM, "spm_train: out of memory");
    } catch (const std::exception &e) {
        return tern_error(TERN_ERR_INTERNAL, "spm_train: %s", e.what());
    } catch (...) {
        return tern_error(TERN_ERR_INTERNAL, "spm_train: unknown exception");
    }
}
