#include "model/safetensors_writer.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <stdlib.h>
#include "common/subprocess_util.h"

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "model/checkpoint.h"

namespace afd::model {
namespace {

namespace fs = std::filesystem;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

using afd::testing::TempDir;

std::vector<uint8_t> readFile(const fs::path& path) {
    std::ifstream in(path, std::ios::binary);
    return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

std::set<std::string> listDir(const std::string& dir) {
    std::set<std::string> names;
    for (const auto& entry : fs::directory_iterator(dir)) names.insert(entry.path().filename().string());
    return names;
}

// Byte j of the tensor named `name`: depends on both, so that swapped or shifted tensors are caught.
uint8_t patternByte(const std::string& name, size_t j) {
    return static_cast<uint8_t>(std::hash<std::string>{}(name) + j * 131 + (j >> 8));
}

core::Status fillPattern(const TensorPlan& plan, uint8_t* out, size_t nbytes) {
    for (size_t j = 0; j < nbytes; ++j) out[j] = patternByte(plan.name, j);
    return core::Status::ok();
}

// The header of a safetensors file, parsed here without the engine's parser.
struct RawFile {
    uint64_t header_len = 0;
    nlohmann::ordered_json header;
    std::vector<uint8_t> bytes;
};

RawFile readRaw(const fs::path& path) {
    RawFile raw;
    raw.bytes = readFile(path);
    EXPECT_GE(raw.bytes.size(), 8u);
    for (int i = 7; i >= 0; --i) raw.header_len = (raw.header_len << 8) | raw.bytes[i];
    raw.header = nlohmann::ordered_json::parse(raw.bytes.begin() + 8, raw.bytes.begin() + 8 + raw.header_len);
    return raw;
}

// Checks that every planned tensor reads back through Checkpoint with its dtype, shape and exact bytes.
void expectRoundTrip(const std::string& dir, const std::vector<TensorPlan>& plans) {
    auto checkpoint = Checkpoint::open(dir);
    ASSERT_TRUE(checkpoint.isOk()) << checkpoint.status().toString();
    EXPECT_EQ(checkpoint->numTensors(), plans.size());
    for (const TensorPlan& plan : plans) {
        auto tensor = checkpoint->expect(plan.name, plan.dtype, plan.shape);
        ASSERT_TRUE(tensor.isOk()) << tensor.status().toString();
        const auto* data = static_cast<const uint8_t*>(tensor->rawData());
        for (size_t j = 0; j < tensor->nbytes(); ++j) {
            ASSERT_EQ(data[j], patternByte(plan.name, j)) << plan.name << " byte " << j;
        }
    }
}

TEST(SafetensorsWriter, WritesOneShardThatReadsBackByteExact) {
    TempDir tmp;
    const std::string dir = tmp.path() + "/nested/model";  // created by the writer
    const std::vector<TensorPlan> plans = {
        {"model.embed_tokens.weight", core::DType::kBf16, {5, 3}},
        {"model.norm.weight", core::DType::kF32, {3}},
        {"empty", core::DType::kF16, {0, 4}},
        {"ids", core::DType::kI64, {2}},
        {"odd", core::DType::kU8, {7}},
    };
    ASSERT_TRUE(writeCheckpoint(dir, plans, {}, fillPattern).isOk());
    EXPECT_EQ(listDir(dir), (std::set<std::string>{"model.safetensors"}));

    const RawFile raw = readRaw(fs::path(dir) / "model.safetensors");
    EXPECT_EQ((8 + raw.header_len) % 8, 0u);
    EXPECT_EQ(raw.header["__metadata__"], (nlohmann::ordered_json{{"format", "pt"}}));
    // Entries in plan order, data back to back: 30, 12, 0, 16, 7 bytes.
    std::vector<std::string> keys;
    for (const auto& [key, value] : raw.header.items()) keys.push_back(key);
    EXPECT_THAT(keys,
                ElementsAre("__metadata__", "model.embed_tokens.weight", "model.norm.weight", "empty", "ids", "odd"));
    EXPECT_EQ(raw.header["model.embed_tokens.weight"]["dtype"], "BF16");
    EXPECT_EQ(raw.header["model.embed_tokens.weight"]["shape"], (nlohmann::json{5, 3}));
    EXPECT_EQ(raw.header["model.embed_tokens.weight"]["data_offsets"], (nlohmann::json{0, 30}));
    EXPECT_EQ(raw.header["model.norm.weight"]["data_offsets"], (nlohmann::json{30, 42}));
    EXPECT_EQ(raw.header["empty"]["data_offsets"], (nlohmann::json{42, 42}));
    EXPECT_EQ(raw.header["ids"]["data_offsets"], (nlohmann::json{42, 58}));
    EXPECT_EQ(raw.header["odd"]["data_offsets"], (nlohmann::json{58, 65}));
    EXPECT_EQ(raw.bytes.size(), 8 + raw.header_len + 65);
    EXPECT_EQ(raw.bytes[8 + raw.header_len + 30], patternByte("model.norm.weight", 0));

    expectRoundTrip(dir, plans);
}

TEST(SafetensorsWriter, ShardsGreedilyInPlanOrderWithAnIndex) {
    TempDir tmp;
    // 100, 100, 100, 300 (larger than a shard), 40, 16 bytes with shards of at most 256 bytes:
    // {a, b} = 200; {c} (c + d > 256); {d} alone; {e, f} = 56.
    const std::vector<TensorPlan> plans = {
        {"a", core::DType::kF32, {25}},    {"b", core::DType::kBf16, {5, 10}}, {"c", core::DType::kU8, {100}},
        {"d", core::DType::kF32, {3, 25}}, {"e", core::DType::kF64, {5}},      {"f", core::DType::kI32, {2, 2}},
    };
    CheckpointWriteOptions options;
    options.max_shard_bytes = 256;
    options.metadata = {{"format", "pt"}, {"origin", "test"}};
    ASSERT_TRUE(writeCheckpoint(tmp.path(), plans, options, fillPattern).isOk());

    const std::string s1 = "model-00001-of-00004.safetensors";
    const std::string s2 = "model-00002-of-00004.safetensors";
    const std::string s3 = "model-00003-of-00004.safetensors";
    const std::string s4 = "model-00004-of-00004.safetensors";
    EXPECT_EQ(listDir(tmp.path()), (std::set<std::string>{s1, s2, s3, s4, "model.safetensors.index.json"}));
    const auto index = nlohmann::json::parse(readFile(fs::path(tmp.path()) / "model.safetensors.index.json"));
    EXPECT_EQ(index["metadata"]["total_size"], 656);
    EXPECT_EQ(index["weight_map"], (nlohmann::json{{"a", s1}, {"b", s1}, {"c", s2}, {"d", s3}, {"e", s4}, {"f", s4}}));
    const RawFile first = readRaw(fs::path(tmp.path()) / s1);
    EXPECT_EQ(first.header["__metadata__"]["origin"], "test");
    EXPECT_EQ(first.header["b"]["data_offsets"], (nlohmann::json{100, 200}));
    const RawFile last = readRaw(fs::path(tmp.path()) / s4);
    EXPECT_EQ(last.header["f"]["data_offsets"], (nlohmann::json{40, 56}));

    expectRoundTrip(tmp.path(), plans);
}

TEST(SafetensorsWriter, CallsFillOncePerTensorInPlanOrder) {
    TempDir tmp;
    const std::vector<TensorPlan> plans = {
        {"x", core::DType::kF32, {8}}, {"y", core::DType::kU8, {3}}, {"z", core::DType::kBf16, {0}}};
    std::vector<std::pair<std::string, size_t>> calls;
    const auto fill = [&](const TensorPlan& plan, uint8_t* out, size_t nbytes) {
        calls.emplace_back(plan.name, nbytes);
        return fillPattern(plan, out, nbytes);
    };
    CheckpointWriteOptions options;
    options.max_shard_bytes = 16;
    ASSERT_TRUE(writeCheckpoint(tmp.path(), plans, options, fill).isOk());
    EXPECT_THAT(calls, ElementsAre(std::pair<std::string, size_t>{"x", 32}, std::pair<std::string, size_t>{"y", 3},
                                   std::pair<std::string, size_t>{"z", 0}));
}

TEST(SafetensorsWriter, ReplacesTheOtherLayoutSoNoStaleModelIsRead) {
    TempDir tmp;
    const std::vector<TensorPlan> sharded = {{"a", core::DType::kF32, {4}}, {"b", core::DType::kF32, {4}}};
    const std::vector<TensorPlan> single = {{"c", core::DType::kU8, {3}}};
    CheckpointWriteOptions small;
    small.max_shard_bytes = 16;

    ASSERT_TRUE(writeCheckpoint(tmp.path(), single, {}, fillPattern).isOk());
    ASSERT_TRUE(writeCheckpoint(tmp.path(), sharded, small, fillPattern).isOk());
    EXPECT_FALSE(fs::exists(fs::path(tmp.path()) / "model.safetensors"));
    expectRoundTrip(tmp.path(), sharded);

    ASSERT_TRUE(writeCheckpoint(tmp.path(), single, {}, fillPattern).isOk());
    EXPECT_FALSE(fs::exists(fs::path(tmp.path()) / "model.safetensors.index.json"));
    expectRoundTrip(tmp.path(), single);
}

TEST(SafetensorsWriter, FillErrorStopsTheWriteNamingFileAndTensorAndLeavesNoPartialFile) {
    TempDir tmp;
    const std::vector<TensorPlan> plans = {{"a", core::DType::kF32, {4}}, {"b", core::DType::kF32, {4}}};
    const auto fill = [](const TensorPlan& plan, uint8_t* out, size_t nbytes) {
        if (plan.name == "b") return core::internalError("generator ran out of entropy");
        return fillPattern(plan, out, nbytes);
    };
    const core::Status status = writeCheckpoint(tmp.path(), plans, {}, fill);
    ASSERT_FALSE(status.isOk());
    EXPECT_EQ(status.code(), core::StatusCode::kInternal);
    EXPECT_THAT(status.message(), HasSubstr(tmp.path() + "/model.safetensors: tensor 'b'"));
    EXPECT_THAT(status.message(), HasSubstr("generator ran out of entropy"));
    EXPECT_TRUE(listDir(tmp.path()).empty());
}

TEST(SafetensorsWriter, RejectsDuplicateNames) {
    TempDir tmp;
    const std::vector<TensorPlan> plans = {{"a", core::DType::kF32, {4}}, {"a", core::DType::kF32, {2}}};
    const core::Status status = writeCheckpoint(tmp.path(), plans, {}, fillPattern);
    EXPECT_EQ(status.code(), core::StatusCode::kInvalidArgument);
    EXPECT_THAT(status.message(), HasSubstr("tensor 'a' is planned more than once"));
    EXPECT_TRUE(listDir(tmp.path()).empty());
}

TEST(SafetensorsWriter, RejectsEmptyAndReservedNames) {
    TempDir tmp;
    const core::Status empty = writeCheckpoint(tmp.path(), {{"", core::DType::kF32, {4}}}, {}, fillPattern);
    EXPECT_EQ(empty.code(), core::StatusCode::kInvalidArgument);
    EXPECT_THAT(empty.message(), HasSubstr("empty name"));
    const core::Status reserved =
        writeCheckpoint(tmp.path(), {{"__metadata__", core::DType::kF32, {4}}}, {}, fillPattern);
    EXPECT_EQ(reserved.code(), core::StatusCode::kInvalidArgument);
    EXPECT_THAT(reserved.message(), HasSubstr("reserved"));
    EXPECT_TRUE(listDir(tmp.path()).empty());
}

TEST(SafetensorsWriter, RejectsBadShapesAndOptions) {
    TempDir tmp;
    const core::Status negative = writeCheckpoint(tmp.path(), {{"t", core::DType::kF32, {4, -1}}}, {}, fillPattern);
    EXPECT_EQ(negative.code(), core::StatusCode::kInvalidArgument);
    EXPECT_THAT(negative.message(), HasSubstr("tensor 't': shape [4, -1] has a negative dimension"));
    const core::Status huge =
        writeCheckpoint(tmp.path(), {{"t", core::DType::kF32, {int64_t{1} << 40, int64_t{1} << 30}}}, {}, fillPattern);
    EXPECT_THAT(huge.message(), HasSubstr("needs more than 2^63 bytes"));
    // Empty, but the reader would refuse the element count of its other dimensions.
    const core::Status empty_huge =
        writeCheckpoint(tmp.path(), {{"t", core::DType::kU8, {0, int64_t{1} << 62, 4}}}, {}, fillPattern);
    EXPECT_THAT(empty_huge.message(), HasSubstr("needs more than 2^63 bytes"));
    CheckpointWriteOptions zero;
    zero.max_shard_bytes = 0;
    EXPECT_EQ(writeCheckpoint(tmp.path(), {{"t", core::DType::kF32, {4}}}, zero, fillPattern).code(),
              core::StatusCode::kInvalidArgument);
    EXPECT_EQ(writeCheckpoint(tmp.path(), {}, {}, fillPattern).code(), core::StatusCode::kInvalidArgument);
    EXPECT_TRUE(listDir(tmp.path()).empty());
}

TEST(SafetensorsWriter, RejectsNamesThatAreNotUtf8) {
    TempDir tmp;
    const core::Status status = writeCheckpoint(tmp.path(), {{"bad\xff", core::DType::kU8, {1}}}, {}, fillPattern);
    EXPECT_EQ(status.code(), core::StatusCode::kInvalidArgument);
    EXPECT_THAT(status.message(), HasSubstr("model.safetensors: tensor names and metadata must be valid UTF-8"));
}

TEST(SafetensorsWriter, ErrorNamesTheDirectoryItCannotCreate) {
    TempDir tmp;
    const std::string file = tmp.path() + "/plain_file";
    std::ofstream(file) << "x";
    const core::Status status = writeCheckpoint(file + "/model", {{"t", core::DType::kU8, {1}}}, {}, fillPattern);
    EXPECT_EQ(status.code(), core::StatusCode::kIoError);
    EXPECT_THAT(status.message(), HasSubstr("cannot create directory " + file + "/model"));
}

}  // namespace
}  // namespace afd::model
