// `afd generate` / `afd gen-model` as a user runs them: good runs, and every kind of bad input ending with a
// non-zero exit and one clear message (never a crash).
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>

#include "common/subprocess_util.h"
#include "model/model_config.h"
#include "model/synthetic.h"

namespace afd::cli {
namespace {

using afd::testing::ProcessResult;
using afd::testing::runProcess;
using afd::testing::TempDir;

const std::string kTiny = std::string(AFD_TEST_DATA) + "/qwen3-moe-tiny/model";

ProcessResult generate(const std::string& model_dir, const std::string& ids = "3,17,99") {
    return runProcess({AFD_BINARY, "generate", "--model", model_dir, "--prompt-ids", ids, "--max-tokens", "4"});
}

// A generated tiny checkpoint whose plan `edit` may change (drop a tensor, change a shape or dtype).
std::string writeEdited(const TempDir& dir, const std::function<void(std::vector<model::TensorPlan>&)>& edit) {
    auto config = model::ModelConfig::preset("tiny");
    EXPECT_TRUE(config.isOk());
    auto plans = model::checkpointPlan(*config);
    edit(plans);
    EXPECT_TRUE(model::writeCheckpoint(dir.path(), plans, {}, [](const model::TensorPlan&, uint8_t* out, size_t n) {
                    std::fill(out, out + n, uint8_t{0x3c});
                    return core::Status::ok();
                }).isOk());
    std::ofstream(dir.file("config.json")) << config->toJson();
    return dir.path();
}

void expectOneClearError(const ProcessResult& r, int code, const std::string& needle) {
    EXPECT_EQ(r.exit_code, code) << r.err;
    EXPECT_FALSE(r.timed_out);
    EXPECT_NE(r.err.find(needle), std::string::npos) << "stderr: " << r.err;
    EXPECT_EQ(r.err.find("terminate called"), std::string::npos) << r.err;
}

TEST(GenerateCli, FixtureGreedyIdsPrinted) {
    const ProcessResult r = runProcess(
        {AFD_BINARY, "generate", "--model", kTiny, "--prompt-ids", "3,17,99,250,7,42,311,5", "--max-tokens", "12"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(r.out, "153,379,188,113,374,186,112,186,112,358,113,250\n");
}

// One schema for one prompt and for several: {"results": [{prompt_ids, new_ids, finish_reason}, …]}; the
// full-vocabulary logits only with --prompt-logits.
TEST(GenerateCli, JsonIsOneSchemaForAnyNumberOfPrompts) {
    for (const std::vector<std::string>& prompts : {std::vector<std::string>{"3,17"}, {"3,17", "11,12,13"}}) {
        std::vector<std::string> argv = {AFD_BINARY, "generate", "--model", kTiny, "--max-tokens", "3", "--json"};
        for (const auto& p : prompts) {
            argv.push_back("--prompt-ids");
            argv.push_back(p);
        }
        const ProcessResult r = runProcess(argv);
        ASSERT_EQ(r.exit_code, 0) << r.err;
        const nlohmann::json out = nlohmann::json::parse(r.out);
        ASSERT_TRUE(out.contains("results")) << r.out;
        ASSERT_EQ(out["results"].size(), prompts.size()) << r.out;
        EXPECT_FALSE(out.contains("error"));
        for (const auto& result : out["results"]) {
            EXPECT_EQ(result["new_ids"].size(), 3u);
            EXPECT_EQ(result["finish_reason"], "length");
            EXPECT_FALSE(result.contains("prompt_last_logits")) << "logits only with --prompt-logits";
        }
        EXPECT_EQ(out["results"][0]["prompt_ids"], (nlohmann::json{3, 17}));
    }
}

TEST(GenerateCli, PromptLogitsOnlyWhenAskedFor) {
    const ProcessResult r = runProcess({AFD_BINARY, "generate", "--model", kTiny, "--prompt-ids", "3,17",
                                        "--max-tokens", "3", "--json", "--prompt-logits"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const nlohmann::json out = nlohmann::json::parse(r.out);
    const auto config = model::ModelConfig::fromFile(kTiny + "/config.json");
    ASSERT_TRUE(config.isOk());
    EXPECT_EQ(out["results"][0]["prompt_last_logits"].size(), static_cast<size_t>(config->vocab_size));
}

TEST(GenerateCli, GenModelThenGenerate) {
    TempDir dir;
    const ProcessResult gen =
        runProcess({AFD_BINARY, "gen-model", "--preset", "tiny", "--out", dir.path(), "--seed", "3"});
    ASSERT_EQ(gen.exit_code, 0) << gen.err;
    const ProcessResult r = generate(dir.path());
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_FALSE(r.out.empty());
}

TEST(GenerateCli, MissingModelDirectory) {
    expectOneClearError(generate("/nonexistent/afd-model"), 2, "/nonexistent/afd-model");
}

TEST(GenerateCli, TruncatedShard) {
    TempDir dir;
    std::filesystem::copy(kTiny, dir.path(), std::filesystem::copy_options::recursive);
    const std::string shard = dir.file("model-00002-of-00003.safetensors");
    std::filesystem::resize_file(shard, std::filesystem::file_size(shard) / 2);
    expectOneClearError(generate(dir.path()), 1, "model-00002-of-00003.safetensors");
}

TEST(GenerateCli, CorruptHeader) {
    TempDir dir;
    std::filesystem::copy(kTiny, dir.path(), std::filesystem::copy_options::recursive);
    const std::string shard = dir.file("model-00001-of-00003.safetensors");
    {
        std::fstream f(shard, std::ios::in | std::ios::out | std::ios::binary);
        f.seekp(8);
        f.write("#garbage#", 9);
    }
    expectOneClearError(generate(dir.path()), 1, "model-00001-of-00003.safetensors");
}

TEST(GenerateCli, MissingTensor) {
    TempDir dir;
    writeEdited(dir, [](auto& plans) {
        std::erase_if(plans, [](const auto& p) { return p.name == "model.layers.1.self_attn.k_norm.weight"; });
    });
    expectOneClearError(generate(dir.path()), 1, "model.layers.1.self_attn.k_norm.weight");
}

TEST(GenerateCli, TensorOfWrongShape) {
    TempDir dir;
    writeEdited(dir, [](auto& plans) {
        for (auto& p : plans)
            if (p.name == "model.layers.0.mlp.experts.3.up_proj.weight") p.shape[0] += 1;
    });
    expectOneClearError(generate(dir.path()), 1, "model.layers.0.mlp.experts.3.up_proj.weight");
}

TEST(GenerateCli, TensorOfWrongDtype) {
    TempDir dir;
    writeEdited(dir, [](auto& plans) {
        for (auto& p : plans)
            if (p.name == "model.norm.weight") p.dtype = core::DType::kF32;
    });
    expectOneClearError(generate(dir.path()), 1, "model.norm.weight");
}

TEST(GenerateCli, UnsupportedConfigRefusedNamingTheField) {
    TempDir dir;
    std::filesystem::copy(kTiny, dir.path(), std::filesystem::copy_options::recursive);
    std::ifstream in(dir.file("config.json"));
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    in.close();
    const std::string key = "\"rope_parameters\": {";
    text.replace(text.find(key), key.size(), key + "\"factor\": 4.0, ");
    std::filesystem::remove(dir.file("config.json"));
    std::ofstream(dir.file("config.json")) << text;
    const ProcessResult r = generate(dir.path());
    EXPECT_EQ(r.exit_code, 2) << r.err;
    EXPECT_NE(r.err.find("rope"), std::string::npos) << r.err;
}

TEST(GenerateCli, BadPromptIds) {
    expectOneClearError(generate(kTiny, "3,x,5"), 2, "--prompt-ids");
    expectOneClearError(generate(kTiny, "3,999999"), 2, "999999");
}

}  // namespace
}  // namespace afd::cli
