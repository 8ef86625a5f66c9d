#include "kernels/sampling.h"

#include "core/check.h"

namespace afd::kernels {

int32_t argmaxCpu(const float* logits, int64_t n) {
    AFD_CHECK(n > 0, "argmax over an empty vector");
    int64_t best = 0;
    for (int64_t i = 1; i < n; ++i) {
        if (logits[i] > logits[best] || (logits[best] != logits[best] && logits[i] == logits[i])) best = i;
    }
    return static_cast<int32_t>(best);
}

}  // namespace afd::kernels
