// Host side of `afd bench moe --ffn-ranks`: what rank 0 of an FFN pool serves of a routing over every expert (no
// device needed).
#include <gtest/gtest.h>

// The lab is a CUDA lab: without the CUDA backend there is nothing to test here.
#if defined(AFD_HAVE_CUDA)

#include <cstdint>
#include <vector>

#include "lab/moe_bench.h"

namespace afd::lab {
namespace {

TEST(MoeBenchTest, FirstRankKeepsOnlyItsExpertsEntries) {
    // 3 tokens x top-2 over 8 experts; rank 0 of 2 holds experts [0, 4).
    std::vector<int32_t> ids{0, 5, 3, 3, 7, 4};
    int64_t distinct = -1;
    EXPECT_EQ(keepFirstRankEntries(ids, 4, &distinct), 3);
    EXPECT_EQ(distinct, 2);  // experts 0 and 3
    EXPECT_EQ(ids, (std::vector<int32_t>{0, -1, 3, 3, -1, -1}));
}

TEST(MoeBenchTest, FirstRankWithNoneOfItsExpertsServesNothing) {
    std::vector<int32_t> ids{6, 7, -1, 5};
    int64_t distinct = -1;
    EXPECT_EQ(keepFirstRankEntries(ids, 4, &distinct), 0);
    EXPECT_EQ(distinct, 0);
    EXPECT_EQ(ids, (std::vector<int32_t>{-1, -1, -1, -1}));
}

}  // namespace
}  // namespace afd::lab
#endif  // AFD_HAVE_CUDA
