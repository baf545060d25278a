// spm.cc — the C interface to SentencePiece's processor (encode, decode): the part the runtime
// library needs; the trainer's side (libsentencepiece_train) is in spm_train.cc, which goes into
// the training library. Every C++ exception is caught here and turned into a tern_status_t;
// nothing throws across the boundary.
#include <sentencepiece_processor.h>

#include <cstdlib>
#include <cstring>
#include <new>
#include <string>
#include <vector>

extern "C" {
#include "text/spm.h"
}

struct spm {
    sentencepiece::SentencePieceProcessor sp;
    std::string path;
};

extern "C" tern_status_t spm_load(spm_t **out, const char *path) {
    *out = nullptr;
    try {
        spm_t *s = new spm;
        s->path = path ? path : "";
        auto status = s->sp.Load(s->path);
        if (!status.ok()) {
            std::string msg = status.ToString();
            delete s;
            return tern_error(TERN_ERR_FORMAT, "%s: cannot load SentencePiece model: %s", path ? path : "",
                              msg.c_str());
        }
        *out = s;
        return TERN_OK;
    } catch (const std::bad_alloc &) {
        return tern_error(TERN_ERR_NOMEM, "%s: out of memory", path ? path : "");
    } catch (const std::exception &e) {
        return tern_error(TERN_ERR_FORMAT, "%s: SentencePiece: %s", path ? path : "", e.what());
    } catch (...) {
        return tern_error(TERN_ERR_INTERNAL, "%s: SentencePiece: unknown exception", path ? path : "");
    }
}

extern "C" void spm_free(spm_t *s) {
    delete s;
}

extern "C" tern_status_t spm_encode(const spm_t *s, const char *text, size_t len, char ***pieces, int *n) {
    *pieces = nullptr;
    *n = 0;
    if (!s || (!text && len)) return tern_error(TERN_ERR_INVALID_ARG, "spm_encode: bad arguments");
    try {
        std::vector<std::string> out;
        auto status = s->sp.Encode(absl::string_view(text ? text : "", len), &out);
        if (!status.ok())
            return tern_error(TERN_ERR_INPUT, "%s: SentencePiece encode failed: %s", s->path.c_str(),
                              status.ToString().c_str());
        size_t bytes = sizeof(char *) * (out.size() + 1);
        for (const auto &p : out) bytes += p.size() + 1;
        char **block = static_cast<char **>(std::malloc(bytes));
        if (!block) return tern_error(TERN_ERR_NOMEM, "spm_encode: out of memory");
        char *q = reinterpret_cast<char *>(block + out.size() + 1);
        for (size_t i = 0; i < out.size(); i++) {
            block[i] = q;
            std::memcpy(q, out[i].data(), out[i].size());
            q[out[i].size()] = 0;
            q += out[i].size() + 1;
        }
        block[out.size()] = nullptr;
        *pieces = block;
        *n = static_cast<int>(out.size());
        return TERN_OK;
    } catch (const std::bad_alloc &) {
        return tern_error(TERN_ERR_NOMEM, "spm_encode: out of memory");
    } catch (const std::exception &e) {
        return tern_error(TERN_ERR_INTERNAL, "spm_encode: %s", e.what());
    } catch (...) {
        return tern_error(TERN_ERR_INTERNAL, "spm_encode: unknown exception");
    }
}

extern "C" tern_status_t spm_decode(const spm_t *s, const char *const *pieces, int n, char **text) {
    *text = nullptr;
    if (!s || n < 0 || (n > 0 && !pieces)) return tern_error(TERN_ERR_INVALID_ARG, "spm_decode: bad arguments");
    try {
        std::vector<std::string> in;
        in.reserve(static_cast<size_t>(n));
        for (int i = 0; i < n; i++) in.emplace_back(pieces[i] ? pieces[i] : "");
        std::string out;
        auto status = s->sp.Decode(in, &out);
        if (!status.ok())
            return tern_error(TERN_ERR_INPUT, "%s: SentencePiece decode failed: %s", s->path.c_str(),
                              status.ToString().c_str());
        char *r = static_cast<char *>(std::malloc(out.size() + 1));
        if (!r) return tern_error(TERN_ERR_NOMEM, "spm_decode: out of memory");
        std::memcpy(r, out.data(), out.size());
        r[out.size()] = 0;
        *text = r;
        return TERN_OK;
    } catch (const std::bad_alloc &) {
        return tern_error(TERN_ERR_NOMEM, "spm_decode: out of memory");
    } catch (const std::exception &e) {
        return tern_error(TERN_ERR_INTERNAL, "spm_decode: %s", e.what());
    } catch (...) {
        return tern_error(TERN_ERR_INTERNAL, "spm_decode: unknown exception");
    }
}

extern "C" int spm_piece_count(const spm_t *s) {
    return s ? s->sp.GetPieceSize() : 0;
}

extern "C" const char *spm_id_to_piece(const spm_t *s, int id) {
    if (!s || id < 0 || id >= s->sp.GetPieceSize()) return nullptr;
    return s->sp.IdToPiece(id).c_str();
}
