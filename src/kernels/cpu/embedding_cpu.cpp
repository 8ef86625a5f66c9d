#include "core/check.h"
#include "kernels/embedding.h"

namespace afd::kernels {

void embeddingCpu(const EmbeddingParams& p) {
    for (int64_t t = 0; t < p.num_tokens; ++t) {
        const int32_t id = p.ids[t];
        AFD_CHECK(id >= 0 && id < p.vocab_size, "token id {} outside the vocabulary [0, {})", id, p.vocab_size);
        const core::Bf16* row = p.table + static_cast<int64_t>(id) * p.hidden;
        float* out = p.out + t * p.hidden;
        for (int64_t i = 0; i < p.hidden; ++i) out[i] = row[i].toFloat();
    }
}

}  // namespace afd::kernels
