// llama.cpp's own EAGLE-3 draft graph, driven the way its speculative loop drives it, on a trainer's reference
// inputs (contract: forward-parity). Compiled against the headers of the release's own tree and linked to the
// release's own library (the xllamacpp wheel's xllamacpp.abi3.so), so every number comes from that release's code:
// its GGUF loader, its encoder graph (fc, and the input norm when norm_before_fc), its decoder graph (the norms, the
// norm_before_residual choice, attention with its KV cache, the head it takes: its own or the target's through
// ctx_other, d2t scattering the draft logits onto the target vocabulary).
//
// What is replayed is common/speculative.cpp's common_speculative_impl_draft_eagle3:
//   process(): the encoder (LLAMA_PROCESS_TYPE_ENCODE) on the three target layers' states, one row per token, then the
//              decoder on the pairs (token, g) at their positions: the draft's step 0 at every position;
//   draft():   each later step decodes one pair (the chain's token, the previous step's pre-norm state,
//              llama_get_embeddings_nextn_ith) at the next position, over the KV cache the earlier steps wrote.
// The reference's token at position P is the one its trainer paired with the states at P (the loop's t_{P+1}).
// Releases before llama_process / llama_batch_ext (up to 2026.9.x) are driven as their speculative.cpp drives them:
// llama_encode on an embeddings-only llama_batch, llama_decode on one carrying token ids and embeddings
// (E3_LEGACY_BATCH, defined when the release's llama.h has no llama_batch_ext).

#include "llama.h"
#include "llama-ext.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

struct replay {
    llama_model * target = nullptr;
    llama_model * draft = nullptr;
    llama_context * ctx_tgt = nullptr;
    llama_context * ctx_dft = nullptr;
#ifdef E3_LEGACY_BATCH
    llama_batch batch = {};  // releases before llama_batch_ext: a batch carrying both token ids and embeddings
    int batch_cap = 0;
#else
    llama_batch_ext * batch = nullptr;
#endif
    int n_embd = 0;      // the draft's hidden size
    int n_embd_enc = 0;  // three target layers' width
    int n_vocab = 0;     // the draft model's vocabulary (the target's: d2t scatters onto it)
    bool kv_half = false;  // the KV cache llama.cpp keeps by default is 16-bit (its attention then rounds K and V)
};

void say(char * err, size_t len, const std::string & what) {
    if (err && len) {
        std::snprintf(err, len, "%s", what.c_str());
    }
}

llama_model * load(const char * path, char * err, size_t len) {
    llama_model_params mp = llama_model_default_params();
    llama_model * m = llama_model_load_from_file(path, mp);
    if (!m) {
        say(err, len, std::string("llama_model_load_from_file failed for ") + path);
    }
    return m;
}

}  // namespace

extern "C" {

void e3_close(void * h);

// Load the target and the draft as llama.cpp's speculative setup does (the draft context's ctx_other is the
// target's: its embedding and head serve a draft without its own). n_max: positions one replay may use.
void * e3_open(const char * target_gguf, const char * draft_gguf, int n_max, int n_threads, char * err, size_t len) {
    llama_backend_init();
    auto * r = new replay();
    r->target = load(target_gguf, err, len);
    if (r->target) {
        r->draft = load(draft_gguf, err, len);
    }
    if (!r->draft) {
        if (r->target) llama_model_free(r->target);
        delete r;
        return nullptr;
    }
    llama_context_params cp = llama_context_default_params();
    cp.n_ctx = (uint32_t) (n_max + 16);
    cp.n_batch = (uint32_t) (n_max + 16);
    cp.n_ubatch = (uint32_t) (n_max + 16);
    cp.n_seq_max = 1;
    cp.n_threads = n_threads;
    cp.n_threads_batch = n_threads;
    cp.no_perf = true;
    // the target's context never decodes here (the reference gives the target's features): one position, so its
    // worst-case compute buffer (logits over the whole vocabulary for every position of a batch) is one row
    llama_context_params tp = cp;
    tp.n_ctx = tp.n_batch = tp.n_ubatch = 1;
    r->ctx_tgt = llama_init_from_model(r->target, tp);
    cp.n_rs_seq = 0;
    cp.ctx_other = r->ctx_tgt;
    r->ctx_dft = r->ctx_tgt ? llama_init_from_model(r->draft, cp) : nullptr;
    if (!r->ctx_dft) {
        say(err, len, "llama_init_from_model failed for the draft");
        e3_close(r);
        return nullptr;
    }
    if (llama_model_target_layer_ids_n(r->draft) != 3) {  // what common_speculative_impl_draft_eagle3 refuses
        say(err, len, "draft model is not eagle3 (expected 3 extract layers, got " +
            std::to_string(llama_model_target_layer_ids_n(r->draft)) + ")");
        e3_close(r);
        return nullptr;
    }
    r->kv_half = cp.type_k == GGML_TYPE_F16 || cp.type_v == GGML_TYPE_F16;
    r->n_embd = llama_model_n_embd(r->draft);
    r->n_embd_enc = 3 * llama_model_n_embd(r->target);
    r->n_vocab = llama_vocab_n_tokens(llama_model_get_vocab(r->draft));
    llama_set_embeddings_nextn(r->ctx_dft, true, /*masked*/ true);
#ifdef E3_LEGACY_BATCH
    // as speculative.cpp of these releases: llama_batch_init allocates the embeddings, the token ids by hand
    r->batch_cap = n_max + 16;
    r->batch = llama_batch_init(r->batch_cap, r->n_embd, 1);
    r->batch.token = (llama_token *) malloc(sizeof(llama_token) * r->batch_cap);
#else
    r->batch = llama_batch_ext_init(r->ctx_dft);
#endif
    return r;
}

int e3_n_vocab(void * h) { return static_cast<replay *>(h)->n_vocab; }
int e3_n_embd(void * h) { return static_cast<replay *>(h)->n_embd; }
int e3_n_embd_enc(void * h) { return static_cast<replay *>(h)->n_embd_enc; }
int e3_kv_half(void * h) { return static_cast<replay *>(h)->kv_half ? 1 : 0; }

// The encoder on N rows of target features [N x n_embd_enc] -> g [N x n_embd] (process()'s first half).
int e3_encode(void * h, int n, const float * features, float * g_out, char * err, size_t len) {
    auto * r = static_cast<replay *>(h);
    llama_memory_clear(llama_get_memory(r->ctx_dft), true);
#ifdef E3_LEGACY_BATCH
    llama_batch enc = {};  // speculative.cpp of these releases: embeddings only, llama fills positions and outputs
    enc.n_tokens = n;
    enc.embd = const_cast<float *>(features);
    const int rc = llama_encode(r->ctx_dft, enc);
    const char * what = "llama_encode";
#else
    llama_batch_ext_clear(r->batch);
    for (int i = 0; i < n; ++i) {
        const llama_pos pos = i;  // the per-token encoder reads no positions (speculative.cpp: placeholders)
        const int idx = llama_batch_ext_add_embd(r->batch, 0, {features + (size_t) i * r->n_embd_enc, 1,
                                                                (size_t) r->n_embd_enc});
        if (idx < 0 || !llama_batch_ext_set_pos(r->batch, idx, &pos) ||
            !llama_batch_ext_set_output_embd(r->batch, idx, true)) {
            say(err, len, "could not build the encoder batch (llama_batch_ext_add_embd: " + std::to_string(idx) + ")");
            return -1;
        }
    }
    const int rc = llama_process(r->ctx_dft, LLAMA_PROCESS_TYPE_ENCODE, r->batch);
    const char * what = "llama_process(ENCODE)";
#endif
    if (rc != 0) {
        say(err, len, std::string(what) + " returned " + std::to_string(rc));
        return rc;
    }
    const float * g = llama_get_embeddings_nextn(r->ctx_dft);
    if (!g) {
        say(err, len, "the EAGLE3 encoder produced no output");
        return -1;
    }
    std::memcpy(g_out, g, sizeof(float) * (size_t) n * r->n_embd);
    return 0;
}

// Clear the draft's KV cache.
void e3_clear(void * h) {
    llama_memory_clear(llama_get_memory(static_cast<replay *>(h)->ctx_dft), true);
}

// Decode N pairs (ids[i], states[i]) at positions pos0 + i over the draft's KV cache, every row an output:
// logits [N x n_vocab] (the target vocabulary when the draft has d2t, -inf off the map) and the pre-norm states
// [N x n_embd] the loop feeds the next step.
int e3_decode(void * h, int n, int pos0, const int32_t * ids, const float * states, float * logits_out,
              float * prenorm_out, char * err, size_t len) {
    auto * r = static_cast<replay *>(h);
#ifdef E3_LEGACY_BATCH
    if (n > r->batch_cap) {
        say(err, len, "more rows than the replay's batch holds");
        return -1;
    }
    r->batch.n_tokens = n;
    for (int i = 0; i < n; ++i) {
        r->batch.token[i] = ids[i];
        r->batch.pos[i] = pos0 + i;
        r->batch.n_seq_id[i] = 1;
        r->batch.seq_id[i][0] = 0;
        r->batch.logits[i] = 1;
        std::memcpy(r->batch.embd + (size_t) i * r->n_embd, states + (size_t) i * r->n_embd,
                    sizeof(float) * r->n_embd);
    }
    const int rc = llama_decode(r->ctx_dft, r->batch);
    const char * what = "llama_decode";
#else
    llama_batch_ext_clear(r->batch);
    for (int i = 0; i < n; ++i) {
        const llama_pos pos = pos0 + i;
        const int idx = llama_batch_ext_add_token(r->batch, 0, ids[i]);
        if (idx < 0 || !llama_batch_ext_set_embd_token(r->batch, idx, {states + (size_t) i * r->n_embd, 1,
                                                                          (size_t) r->n_embd}) ||
            !llama_batch_ext_set_pos(r->batch, idx, &pos) || !llama_batch_ext_set_output_logits(r->batch, idx, true)) {
            say(err, len, "could not build the decoder batch (llama_batch_ext_add_token: " + std::to_string(idx) + ")");
            return -1;
        }
    }
    const int rc = llama_process(r->ctx_dft, LLAMA_PROCESS_TYPE_DECODE, r->batch);
    const char * what = "llama_process(DECODE)";
#endif
    if (rc != 0) {
        say(err, len, std::string(what) + " returned " + std::to_string(rc));
        return rc;
    }
    for (int i = 0; i < n; ++i) {
        const float * row = llama_get_logits_ith(r->ctx_dft, i);
        const float * pre = llama_get_embeddings_nextn_ith(r->ctx_dft, i);
        if (!row || !pre) {
            say(err, len, "the EAGLE3 decoder produced no output for row " + std::to_string(i));
            return -1;
        }
        std::memcpy(logits_out + (size_t) i * r->n_vocab, row, sizeof(float) * r->n_vocab);
        std::memcpy(prenorm_out + (size_t) i * r->n_embd, pre, sizeof(float) * r->n_embd);
    }
    return 0;
}

void e3_close(void * h) {
    auto * r = static_cast<replay *>(h);
    if (!r) return;
#ifdef E3_LEGACY_BATCH
    if (r->batch_cap) llama_batch_free(r->batch);  // (frees the token ids too)
#else
    if (r->batch) llama_batch_ext_free(r->batch);
#endif
    if (r->ctx_dft) llama_free(r->ctx_dft);
    if (r->ctx_tgt) llama_free(r->ctx_tgt);
    if (r->draft) llama_model_free(r->draft);
    if (r->target) llama_model_free(r->target);
    delete r;
}

}  // extern "C"
