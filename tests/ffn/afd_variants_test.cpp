// AFD on checkpoints of other shapes (GQA ratios, head_dim, norm_topk_prob false, dense/MoE mixes, tied
// embeddings, attention bias): generated from tests/data/configs/*.json, each run through afd launch in m2n and
// p2p must give the dense reference's tokens.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <filesystem>

#include "common/subprocess_util.h"

namespace afd::ffn {
namespace {

using namespace std::chrono_literals;

class AfdVariant : public ::testing::TestWithParam<std::string> {};

TEST_P(AfdVariant, MatchesDenseReferenceInBothModes) {
    testing::TempDir dir;
    const std::string config = std::string(AFD_TEST_DATA) + "/configs/" + GetParam() + ".json";
    const auto gen =
        testing::runProcess({AFD_BINARY, "gen-model", "--config", config, "--out", dir.path(), "--seed", "7"});
    ASSERT_EQ(gen.exit_code, 0) << gen.err;
    for (const std::string afd :
         {R"({"afd":{"num_attention_ranks":1,"num_ffn_ranks":2}})",
          R"({"afd":{"num_attention_ranks":2,"num_ffn_ranks":1,"compute_gate_on_attention":false}})"}) {
        const auto r =
            testing::runProcess({AFD_BINARY, "launch", "--model", dir.path(), "--max-tokens", "10", "--json",
                                 "--additional-config", afd, "--prompt-ids", "3,17,99,5", "--prompt-ids", "8,9"},
                                120s);
        ASSERT_EQ(r.exit_code, 0) << afd << "\n" << r.err;
        const auto out = nlohmann::json::parse(r.out);
        EXPECT_TRUE(out["afd"]["matches_dense_reference"].get<bool>()) << afd;
        EXPECT_EQ(out["results"][0]["new_ids"].size(), 10u);
    }
}

std::vector<std::string> variantNames() {
    std::vector<std::string> names;
    for (const auto& entry : std::filesystem::directory_iterator(std::string(AFD_TEST_DATA) + "/configs")) {
        if (entry.path().extension() == ".json") names.push_back(entry.path().stem().string());
    }
    std::sort(names.begin(), names.end());
    return names;
}

INSTANTIATE_TEST_SUITE_P(Configs, AfdVariant, ::testing::ValuesIn(variantNames()),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace afd::ffn
