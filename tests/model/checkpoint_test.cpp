#include "model/checkpoint.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <stdlib.h>
#include "common/subprocess_util.h"

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace afd::model {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

const std::string kTiny = std::string(AFD_TEST_DATA) + "/qwen3-moe-tiny/model";
const std::string kShard1 = "model-00001-of-00003.safetensors";
const std::string kShard2 = "model-00002-of-00003.safetensors";
const std::string kShard3 = "model-00003-of-00003.safetensors";

using afd::testing::TempDir;

std::vector<uint8_t> readFile(const fs::path& path) {
    std::ifstream in(path, std::ios::binary);
    return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

void writeFile(const fs::path& path, const std::string& text) { std::ofstream(path, std::ios::binary) << text; }

// The fixture's index, parsed here.
nlohmann::json tinyIndex() { return nlohmann::json::parse(readFile(fs::path(kTiny) / "model.safetensors.index.json")); }

// A copy of the fixture's shards in a fresh directory, with `index` as its model.safetensors.index.json.
void makeShardedCopy(const std::string& dir, const nlohmann::json& index) {
    for (const std::string& shard : {kShard1, kShard2, kShard3})
        fs::copy_file(fs::path(kTiny) / shard, fs::path(dir) / shard);
    writeFile(fs::path(dir) / "model.safetensors.index.json", index.dump(2));
}

// The bytes of one tensor, read from the file without the engine's parser.
std::vector<uint8_t> rawTensorBytes(const fs::path& shard, const std::string& name) {
    const std::vector<uint8_t> bytes = readFile(shard);
    uint64_t header_len = 0;
    for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | bytes[i];
    const auto header = nlohmann::json::parse(bytes.begin() + 8, bytes.begin() + 8 + header_len);
    const uint64_t begin = header[name]["data_offsets"][0];
    const uint64_t end = header[name]["data_offsets"][1];
    const auto data = bytes.begin() + 8 + header_len;
    return std::vector<uint8_t>(data + begin, data + end);
}

float bf16ToFloat(const uint8_t* little_endian) {
    const uint32_t bits = (static_cast<uint32_t>(little_endian[0]) | static_cast<uint32_t>(little_endian[1]) << 8)
                          << 16;
    float value;
    std::memcpy(&value, &bits, sizeof(value));
    return value;
}

void expectError(const core::Status& status, core::StatusCode code, const std::vector<std::string>& parts) {
    EXPECT_EQ(status.code(), code) << status.toString();
    for (const std::string& part : parts) EXPECT_THAT(status.message(), HasSubstr(part));
}

TEST(Checkpoint, OpensTheShardedFixtureWrittenByTransformers) {
    auto checkpoint = Checkpoint::open(kTiny);
    ASSERT_TRUE(checkpoint.isOk()) << checkpoint.status().toString();
    EXPECT_EQ(checkpoint->numTensors(), 102u);
    EXPECT_EQ(checkpoint->names().size(), 102u);
    EXPECT_EQ(checkpoint->files(),
              (std::vector<std::string>{kTiny + "/" + kShard1, kTiny + "/" + kShard2, kTiny + "/" + kShard3}));
    uint64_t sizes = 0;
    for (const std::string& shard : {kShard1, kShard2, kShard3}) sizes += fs::file_size(fs::path(kTiny) / shard);
    EXPECT_EQ(checkpoint->fileBytes(), sizes);

    const TensorInfo* info = checkpoint->find("model.layers.0.mlp.experts.7.down_proj.weight");
    ASSERT_NE(info, nullptr);
    EXPECT_EQ(info->dtype, core::DType::kBf16);
    EXPECT_EQ(info->shape, (core::Shape{64, 32}));
    EXPECT_EQ(
        info->file,
        kTiny + "/" + tinyIndex()["weight_map"]["model.layers.0.mlp.experts.7.down_proj.weight"].get<std::string>());
    EXPECT_TRUE(checkpoint->contains("lm_head.weight"));
    EXPECT_FALSE(checkpoint->contains("lm_head.bias"));
    EXPECT_TRUE(checkpoint->expect("model.embed_tokens.weight", core::DType::kBf16, {384, 64}).isOk());
    EXPECT_TRUE(checkpoint->expect("lm_head.weight", core::DType::kBf16, {384, 64}).isOk());
}

TEST(Checkpoint, TensorViewsHoldTheBytesOfTheFile) {
    auto checkpoint = Checkpoint::open(kTiny);
    ASSERT_TRUE(checkpoint.isOk()) << checkpoint.status().toString();
    const auto weight_map = tinyIndex()["weight_map"];
    for (const std::string name : {"model.embed_tokens.weight", "model.layers.0.mlp.experts.7.down_proj.weight",
                                   "model.layers.2.mlp.gate.weight", "model.norm.weight"}) {
        SCOPED_TRACE(name);
        const auto raw = rawTensorBytes(fs::path(kTiny) / weight_map[name].get<std::string>(), name);
        auto tensor = checkpoint->tensor(name);
        ASSERT_TRUE(tensor.isOk()) << tensor.status().toString();
        EXPECT_TRUE(tensor->isOwning());
        ASSERT_EQ(tensor->nbytes(), raw.size());
        const auto* data = static_cast<const uint8_t*>(tensor->rawData());
        EXPECT_EQ(std::vector<uint8_t>(data, data + raw.size()), raw);
        // Element values, as BF16 decoded here: first, middle and last.
        const auto* elements = tensor->data<uint16_t>();
        for (size_t i : {size_t{0}, raw.size() / 4, raw.size() / 2 - 1}) {
            uint8_t le[2];
            std::memcpy(le, &elements[i], 2);
            EXPECT_EQ(bf16ToFloat(le), bf16ToFloat(&raw[2 * i])) << "element " << i;
        }
    }
}

TEST(Checkpoint, ElementValuesMatchAnIndependentReader) {
    // The first elements as Python's struct module decodes them from the fixture's bytes.
    auto checkpoint = Checkpoint::open(kTiny);
    ASSERT_TRUE(checkpoint.isOk()) << checkpoint.status().toString();
    const std::vector<std::pair<std::string, std::vector<float>>> golden = {
        {"model.norm.weight", {0.96875f, 0.984375f, 0.87890625f, 0.97265625f}},
        {"model.layers.2.mlp.gate.weight", {0.16796875f, -0.0869140625f, -0.00775146484375f, 0.1923828125f}},
    };
    for (const auto& [name, values] : golden) {
        auto tensor = checkpoint->tensor(name);
        ASSERT_TRUE(tensor.isOk()) << tensor.status().toString();
        const auto* bytes = static_cast<const uint8_t*>(tensor->rawData());
        for (size_t i = 0; i < values.size(); ++i) EXPECT_EQ(bf16ToFloat(bytes + 2 * i), values[i]) << name << " " << i;
    }
}

TEST(Checkpoint, TensorKeepsItsMappingAliveAfterTheCheckpointIsGone) {
    const auto raw = rawTensorBytes(fs::path(kTiny) / kShard3, "model.layers.2.mlp.experts.0.up_proj.weight");
    core::Tensor tensor;
    {
        auto checkpoint = Checkpoint::open(kTiny);
        ASSERT_TRUE(checkpoint.isOk());
        tensor = checkpoint->tensor("model.layers.2.mlp.experts.0.up_proj.weight").value();
    }
    const auto* data = static_cast<const uint8_t*>(tensor.rawData());
    EXPECT_EQ(std::vector<uint8_t>(data, data + tensor.nbytes()), raw);
}

TEST(Checkpoint, OpensOneFileOrADirectoryWithModelSafetensors) {
    const std::string shard3 = kTiny + "/" + kShard3;
    auto file = Checkpoint::open(shard3);
    ASSERT_TRUE(file.isOk()) << file.status().toString();
    size_t in_shard3 = 0;
    const auto index = tinyIndex();
    for (const auto& [name, shard] : index["weight_map"].items()) in_shard3 += shard == kShard3 ? 1 : 0;
    ASSERT_GT(in_shard3, 0u);
    EXPECT_EQ(file->numTensors(), in_shard3);
    EXPECT_EQ(file->files(), std::vector<std::string>{shard3});

    TempDir tmp;
    fs::copy_file(shard3, fs::path(tmp.path()) / "model.safetensors");
    auto dir = Checkpoint::open(tmp.path());
    ASSERT_TRUE(dir.isOk()) << dir.status().toString();
    EXPECT_EQ(dir->numTensors(), in_shard3);
    EXPECT_EQ(dir->fileBytes(), fs::file_size(shard3));
}

TEST(Checkpoint, MissingPathIsNotFound) {
    const auto result = Checkpoint::open("/nonexistent/afd/model");
    expectError(result.status(), core::StatusCode::kNotFound, {"/nonexistent/afd/model", "does not exist"});
}

TEST(Checkpoint, DirectoryWithoutModelFilesIsNotFound) {
    TempDir tmp;
    const auto result = Checkpoint::open(tmp.path());
    expectError(result.status(), core::StatusCode::kNotFound,
                {tmp.path(), "model.safetensors.index.json", "model.safetensors"});
}

TEST(Checkpoint, IndexNamingAMissingShardIsNotFound) {
    TempDir tmp;
    auto index = tinyIndex();
    index["weight_map"]["model.norm.weight"] = "model-00004-of-00003.safetensors";
    makeShardedCopy(tmp.path(), index);
    const auto result = Checkpoint::open(tmp.path());
    expectError(result.status(), core::StatusCode::kNotFound,
                {tmp.path() + "/model.safetensors.index.json", "shard 'model-00004-of-00003.safetensors'",
                 "tensor 'model.norm.weight'", "does not exist"});
}

TEST(Checkpoint, IndexNamingATensorAbsentFromItsShardIsCorrupt) {
    TempDir tmp;
    auto index = tinyIndex();
    index["weight_map"]["model.layers.9.ghost.weight"] = kShard2;
    makeShardedCopy(tmp.path(), index);
    const auto result = Checkpoint::open(tmp.path());
    expectError(result.status(), core::StatusCode::kCorrupt,
                {"tensor 'model.layers.9.ghost.weight'", "shard '" + kShard2 + "'", "does not contain it"});
}

TEST(Checkpoint, TensorInAShardButNotInTheIndexIsCorrupt) {
    TempDir tmp;
    auto index = tinyIndex();
    index["weight_map"].erase("model.norm.weight");
    makeShardedCopy(tmp.path(), index);
    const auto result = Checkpoint::open(tmp.path());
    expectError(result.status(), core::StatusCode::kCorrupt,
                {"tensor 'model.norm.weight' is not listed in", "model.safetensors.index.json"});
}

TEST(Checkpoint, IndexPuttingATensorInAnotherShardIsCorrupt) {
    TempDir tmp;
    auto index = tinyIndex();
    const std::string actual = index["weight_map"]["model.norm.weight"];
    const std::string other = actual == kShard1 ? kShard2 : kShard1;
    index["weight_map"]["model.norm.weight"] = other;
    makeShardedCopy(tmp.path(), index);
    const auto result = Checkpoint::open(tmp.path());
    expectError(result.status(), core::StatusCode::kCorrupt,
                {tmp.path() + "/" + actual, "tensor 'model.norm.weight'", "puts it in '" + other + "'"});
}

TEST(Checkpoint, SameTensorInTwoShardsIsCorrupt) {
    TempDir tmp;
    // The index names shard 3 and a copy of it under another name.
    auto index = tinyIndex();
    bool first = true;
    for (auto& [name, shard] : index["weight_map"].items()) {
        if (shard == kShard3 && !first) shard = "copy.safetensors";
        if (shard == kShard3) first = false;
    }
    makeShardedCopy(tmp.path(), index);
    fs::copy_file(fs::path(kTiny) / kShard3, fs::path(tmp.path()) / "copy.safetensors");
    const auto result = Checkpoint::open(tmp.path());
    expectError(result.status(), core::StatusCode::kCorrupt, {"is stored in two shards", "copy.safetensors", kShard3});
}

TEST(Checkpoint, ShardNameLeavingTheDirectoryIsRejected) {
    for (const std::string& bad : std::vector<std::string>{"../" + kShard1, "sub/" + kShard1, "..", ""}) {
        SCOPED_TRACE(bad);
        TempDir tmp;
        auto index = tinyIndex();
        index["weight_map"]["model.norm.weight"] = bad;
        makeShardedCopy(tmp.path(), index);
        const auto result = Checkpoint::open(tmp.path());
        expectError(result.status(), core::StatusCode::kCorrupt,
                    {"model.safetensors.index.json", "weight_map['model.norm.weight']", "not a plain file name"});
    }
}

TEST(Checkpoint, MalformedIndexIsCorrupt) {
    TempDir tmp;
    makeShardedCopy(tmp.path(), tinyIndex());
    const fs::path index = fs::path(tmp.path()) / "model.safetensors.index.json";
    writeFile(index, "{\"weight_map\": ");
    expectError(Checkpoint::open(tmp.path()).status(), core::StatusCode::kCorrupt, {index.string(), "not valid JSON"});
    writeFile(index, R"({"metadata": {}})");
    expectError(Checkpoint::open(tmp.path()).status(), core::StatusCode::kCorrupt, {index.string(), "'weight_map'"});
    writeFile(index, R"({"weight_map": {"a": 3}})");
    expectError(Checkpoint::open(tmp.path()).status(), core::StatusCode::kCorrupt,
                {index.string(), "weight_map['a'] must be a shard file name"});
}

TEST(Checkpoint, CorruptShardHeaderNamesTheShard) {
    TempDir tmp;
    makeShardedCopy(tmp.path(), tinyIndex());
    // Shard 2 loses its last byte: the tensor stored last no longer fits.
    const fs::path shard = fs::path(tmp.path()) / kShard2;
    fs::resize_file(shard, fs::file_size(shard) - 1);
    const auto result = Checkpoint::open(tmp.path());
    expectError(result.status(), core::StatusCode::kCorrupt, {shard.string() + ": tensor '", "is the file truncated?"});
}

TEST(Checkpoint, ExpectReportsWrongDtype) {
    auto checkpoint = Checkpoint::open(kTiny);
    ASSERT_TRUE(checkpoint.isOk());
    const auto result = checkpoint->expect("model.norm.weight", core::DType::kF32, {64});
    expectError(result.status(), core::StatusCode::kMismatch,
                {"tensor 'model.norm.weight' is BF16 [64], expected F32 [64]"});
}

TEST(Checkpoint, ExpectReportsWrongShape) {
    auto checkpoint = Checkpoint::open(kTiny);
    ASSERT_TRUE(checkpoint.isOk());
    const auto result = checkpoint->expect("lm_head.weight", core::DType::kBf16, {64, 384});
    expectError(result.status(), core::StatusCode::kMismatch,
                {"tensor 'lm_head.weight' is BF16 [384, 64], expected BF16 [64, 384]"});
}

TEST(Checkpoint, ExpectReportsMissingTensor) {
    auto checkpoint = Checkpoint::open(kTiny);
    ASSERT_TRUE(checkpoint.isOk());
    const auto result = checkpoint->expect("model.layers.3.mlp.gate.weight", core::DType::kBf16, {8, 64});
    expectError(result.status(), core::StatusCode::kNotFound,
                {"tensor 'model.layers.3.mlp.gate.weight' is missing", kTiny});
    expectError(checkpoint->tensor("nope").status(), core::StatusCode::kNotFound, {"tensor 'nope' is missing"});
}

}  // namespace
}  // namespace afd::model
