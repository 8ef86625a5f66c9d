#include "model/fingerprint.h"

#include <gtest/gtest.h>

#include "common/subprocess_util.h"
#include "model/synthetic.h"

namespace afd::model {
namespace {

std::string fingerprintOf(const ModelConfig& config, uint64_t seed) {
    testing::TempDir dir;
    SyntheticOptions options;
    options.seed = seed;
    EXPECT_TRUE(writeSyntheticCheckpoint(dir.path(), config, options).isOk());
    auto checkpoint = Checkpoint::open(dir.path());
    EXPECT_TRUE(checkpoint.isOk());
    return modelFingerprint(config, *checkpoint).value();
}

TEST(ModelFingerprint, SameModelSameValueOtherWeightsOrShapesDiffer) {
    const ModelConfig tiny = ModelConfig::preset("tiny").value();
    const std::string a = fingerprintOf(tiny, 1);
    EXPECT_EQ(a, fingerprintOf(tiny, 1));
    EXPECT_NE(a, fingerprintOf(tiny, 2));  // same shapes, other weights
    ModelConfig other = tiny;
    other.norm_topk_prob = !tiny.norm_topk_prob;
    EXPECT_NE(a, fingerprintOf(other, 1));
    EXPECT_NE(a.find("qwen3_moe L4 H64 E8x32 K2 V512"), std::string::npos) << a;
}

}  // namespace
}  // namespace afd::model
