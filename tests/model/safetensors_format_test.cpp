#include "model/safetensors_format.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <string_view>
#include <vector>

namespace afd::model {
namespace {

using ::testing::HasSubstr;

constexpr std::string_view kLabel = "model-00002-of-00003.safetensors";

// A safetensors file: u64 LE length of `json`, `json`, then `data_size` bytes of data (value = offset % 251).
std::vector<uint8_t> makeFile(std::string_view json, size_t data_size) {
    std::vector<uint8_t> bytes(8);
    const uint64_t length = json.size();
    for (int i = 0; i < 8; ++i) bytes[i] = static_cast<uint8_t>(length >> (8 * i));
    bytes.insert(bytes.end(), json.begin(), json.end());
    for (size_t i = 0; i < data_size; ++i) bytes.push_back(static_cast<uint8_t>(i % 251));
    return bytes;
}

core::Result<SafetensorsHeader> parse(const std::vector<uint8_t>& bytes) {
    return parseSafetensorsHeader(bytes.data(), bytes.size(), kLabel);
}

// Expects a kCorrupt error whose message names the file and contains every one of `parts`.
template <typename... Parts>
void expectCorrupt(const core::Result<SafetensorsHeader>& result, const Parts&... parts) {
    ASSERT_FALSE(result.isOk());
    EXPECT_EQ(result.status().code(), core::StatusCode::kCorrupt) << result.status().toString();
    EXPECT_THAT(result.status().message(), HasSubstr(std::string(kLabel)));
    for (const std::string& part : {std::string(parts)...}) EXPECT_THAT(result.status().message(), HasSubstr(part));
}

TEST(SafetensorsFormat, ParsesTensorsMetadataAndDataOffset) {
    // Written in the opposite order of their data, to check the result is ordered by offset.
    const std::string json = R"({"w":{"dtype":"F32","shape":[2,3],"data_offsets":[4,28]},)"
                             R"("b":{"dtype":"BF16","shape":[2],"data_offsets":[0,4]},)"
                             R"("__metadata__":{"format":"pt","note":"x"}})";
    const auto bytes = makeFile(json, 28);
    const auto result = parse(bytes);
    ASSERT_TRUE(result.isOk()) << result.status().toString();
    const SafetensorsHeader& header = result.value();
    EXPECT_EQ(header.data_offset, 8 + json.size());
    ASSERT_EQ(header.tensors.size(), 2u);
    EXPECT_EQ(header.tensors[0].name, "b");
    EXPECT_EQ(header.tensors[0].dtype, core::DType::kBf16);
    EXPECT_EQ(header.tensors[0].shape, (core::Shape{2}));
    EXPECT_EQ(header.tensors[0].data_begin, 0u);
    EXPECT_EQ(header.tensors[0].data_end, 4u);
    EXPECT_EQ(header.tensors[1].name, "w");
    EXPECT_EQ(header.tensors[1].dtype, core::DType::kF32);
    EXPECT_EQ(header.tensors[1].shape, (core::Shape{2, 3}));
    EXPECT_EQ(header.tensors[1].data_begin, 4u);
    EXPECT_EQ(header.tensors[1].data_end, 28u);
    EXPECT_EQ(header.tensors[1].file, kLabel);
    EXPECT_EQ(header.metadata, (std::map<std::string, std::string>{{"format", "pt"}, {"note", "x"}}));
}

TEST(SafetensorsFormat, AcceptsSpacePaddingScalarsAndZeroSizeTensors) {
    // A scalar (shape []) holds one element; empty tensors may sit anywhere, even inside another range.
    const std::string json = R"({"s":{"dtype":"I64","shape":[],"data_offsets":[0,8]},)"
                             R"("e":{"dtype":"F32","shape":[0,7],"data_offsets":[4,4]},)"
                             R"("z":{"dtype":"U8","shape":[3,0],"data_offsets":[8,8]}}    )";
    const auto result = parse(makeFile(json, 8));
    ASSERT_TRUE(result.isOk()) << result.status().toString();
    EXPECT_EQ(result->tensors.size(), 3u);
    EXPECT_TRUE(result->metadata.empty());
}

TEST(SafetensorsFormat, AcceptsAHeaderWithNoTensors) {
    const auto result = parse(makeFile(R"({"__metadata__":{"format":"pt"}})", 0));
    ASSERT_TRUE(result.isOk()) << result.status().toString();
    EXPECT_TRUE(result->tensors.empty());
}

TEST(SafetensorsFormat, RejectsEmptyFile) { expectCorrupt(parseSafetensorsHeader(nullptr, 0, kLabel), "empty"); }

TEST(SafetensorsFormat, RejectsFileShorterThanTheLength) {
    const std::vector<uint8_t> bytes = {2, 0, 0, 0, 0};
    expectCorrupt(parse(bytes), "5 bytes", "shorter than the 8-byte header length");
}

TEST(SafetensorsFormat, RejectsHeaderLengthPastTheEnd) {
    auto bytes = makeFile(R"({})", 0);
    bytes[0] = 3;  // claims 3 bytes of JSON, the file holds 2
    expectCorrupt(parse(bytes), "header length 3 reaches past the end of the file (2 bytes");
}

TEST(SafetensorsFormat, RejectsHeaderLengthOverTheLimit) {
    std::vector<uint8_t> bytes(8 + kMaxSafetensorsHeaderBytes + 8, ' ');
    const uint64_t length = kMaxSafetensorsHeaderBytes + 1;
    for (int i = 0; i < 8; ++i) bytes[i] = static_cast<uint8_t>(length >> (8 * i));
    expectCorrupt(parse(bytes), "exceeds the limit of 104857600 bytes");
}

TEST(SafetensorsFormat, RejectsHeaderThatIsNotJson) {
    expectCorrupt(parse(makeFile(R"({"a":{"dtype":"F32",)", 0)), "header is not valid JSON");
    expectCorrupt(parse(makeFile("", 0)), "header is not valid JSON");
    expectCorrupt(parse(makeFile(std::string_view("{}\0", 3), 0)), "header is not valid JSON");
}

TEST(SafetensorsFormat, RejectsHeaderThatIsNotAnObject) {
    expectCorrupt(parse(makeFile(R"([1, 2])", 0)), "header must be a JSON object, got array");
}

TEST(SafetensorsFormat, RejectsDeepNesting) {
    const std::string json = R"({"a":)" + std::string(40, '[') + std::string(40, ']') + "}";
    expectCorrupt(parse(makeFile(json, 0)), "deeper than 16 levels");
}

TEST(SafetensorsFormat, RejectsUnknownDtype) {
    const auto bytes = makeFile(R"({"model.norm.weight":{"dtype":"BF17","shape":[2],"data_offsets":[0,4]}})", 4);
    expectCorrupt(parse(bytes), "tensor 'model.norm.weight'", "unknown dtype \"BF17\"");
}

TEST(SafetensorsFormat, RejectsNegativeDimension) {
    const auto bytes = makeFile(R"({"t":{"dtype":"U8","shape":[-1,4],"data_offsets":[0,0]}})", 0);
    expectCorrupt(parse(bytes), "tensor 't'", "negative integer", "non-negative integers");
}

TEST(SafetensorsFormat, RejectsNonIntegerDimension) {
    expectCorrupt(parse(makeFile(R"({"t":{"dtype":"U8","shape":[2.5],"data_offsets":[0,2]}})", 2)), "tensor 't'",
                  "non-integer number");
    expectCorrupt(parse(makeFile(R"({"t":{"dtype":"U8","shape":["2"],"data_offsets":[0,2]}})", 2)), "tensor 't'",
                  "holds a string");
    expectCorrupt(parse(makeFile(R"({"t":{"dtype":"U8","shape":4,"data_offsets":[0,4]}})", 4)), "tensor 't'",
                  "shape must be an array");
}

TEST(SafetensorsFormat, RejectsShapeWhoseSizeOverflows) {
    const auto elements = makeFile(R"({"t":{"dtype":"U8","shape":[4294967296,4294967296],"data_offsets":[0,0]}})", 0);
    expectCorrupt(parse(elements), "tensor 't'", "more than 2^63 elements");
    const auto bytes = makeFile(R"({"t":{"dtype":"F64","shape":[4611686018427387904],"data_offsets":[0,0]}})", 0);
    expectCorrupt(parse(bytes), "tensor 't'", "needs more than 2^63 bytes");
}

TEST(SafetensorsFormat, RejectsRangeThatDoesNotMatchTheShape) {
    const auto bytes = makeFile(R"({"model.norm.weight":{"dtype":"BF16","shape":[64],"data_offsets":[10,20]}})", 20);
    expectCorrupt(parse(bytes),
                  "model-00002-of-00003.safetensors: tensor 'model.norm.weight': data_offsets [10, 20] "
                  "hold 10 bytes but shape [64] of BF16 needs 128");
}

TEST(SafetensorsFormat, RejectsRangeEndingBeforeItBegins) {
    const auto bytes = makeFile(R"({"t":{"dtype":"U8","shape":[4],"data_offsets":[8,4]}})", 8);
    expectCorrupt(parse(bytes), "tensor 't'", "data_offsets [8, 4] end before they begin");
}

TEST(SafetensorsFormat, RejectsMalformedDataOffsets) {
    expectCorrupt(parse(makeFile(R"({"t":{"dtype":"U8","shape":[4],"data_offsets":[4]}})", 4)), "tensor 't'",
                  "data_offsets must be [begin, end]");
    expectCorrupt(parse(makeFile(R"({"t":{"dtype":"U8","shape":[4],"data_offsets":[-4,0]}})", 4)), "tensor 't'",
                  "data_offsets must be [begin, end]");
}

TEST(SafetensorsFormat, RejectsRangeOutsideTheFile) {
    const std::string json =
        R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]},"b":{"dtype":"F32","shape":[4],"data_offsets":[16,32]}})";
    ASSERT_TRUE(parse(makeFile(json, 32)).isOk());
    // The same file truncated by one byte.
    expectCorrupt(parse(makeFile(json, 31)), "tensor 'b'", "[16, 32] reach past the end of the data section (31 bytes");
}

TEST(SafetensorsFormat, RejectsOverlappingRanges) {
    const std::string json =
        R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]},"b":{"dtype":"F32","shape":[4],"data_offsets":[12,28]}})";
    expectCorrupt(parse(makeFile(json, 28)), "tensor 'b'", "overlap those of tensor 'a' [0, 16]");
}

TEST(SafetensorsFormat, RejectsDuplicateTensorNames) {
    const std::string json =
        R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})";
    expectCorrupt(parse(makeFile(json, 8)), "tensor 'a' appears more than once");
}

TEST(SafetensorsFormat, RejectsDuplicateKeysInsideAnEntry) {
    const std::string json = R"({"a":{"dtype":"F32","shape":[1],"dtype":"F32","data_offsets":[0,4]}})";
    expectCorrupt(parse(makeFile(json, 4)), "tensor 'a': key 'dtype' appears more than once");
}

TEST(SafetensorsFormat, RejectsUnknownEntryKey) {
    const std::string json = R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4],"stride":[1]}})";
    expectCorrupt(parse(makeFile(json, 4)), "tensor 'a'", "unknown key 'stride'");
}

TEST(SafetensorsFormat, RejectsMissingEntryKey) {
    expectCorrupt(parse(makeFile(R"({"a":{"dtype":"F32","shape":[1]}})", 4)), "tensor 'a'", "missing 'data_offsets'");
}

TEST(SafetensorsFormat, RejectsEntryThatIsNotAnObject) {
    expectCorrupt(parse(makeFile(R"({"a":[0,4]})", 4)), "tensor 'a'", "entry must be an object");
}

TEST(SafetensorsFormat, RejectsMetadataThatIsNotStringToString) {
    expectCorrupt(parse(makeFile(R"({"__metadata__":{"format":"pt","step":3}})", 0)),
                  "__metadata__ key 'step' must map to a string, got non-negative integer 3");
    expectCorrupt(parse(makeFile(R"({"__metadata__":["pt"]})", 0)), "__metadata__ must be an object");
}

TEST(SafetensorsFormat, ClipsLongNamesInMessages) {
    const std::string name(5000, 'n');
    const auto result = parse(makeFile(R"({")" + name + R"(":{"dtype":"X","shape":[],"data_offsets":[0,0]}})", 0));
    expectCorrupt(result, "tensor '" + std::string(200, 'n') + "…'", "unknown dtype");
    EXPECT_LT(result.status().message().size(), 400u);
}

TEST(SafetensorsFormat, FuzzSeedCorpusIsAccepted) {
    // The seeds start the fuzzer from valid files; a seed the parser rejects would only explore error paths.
    const std::filesystem::path dir = std::filesystem::path(AFD_TEST_DATA) / "../../fuzz/corpus/safetensors";
    size_t seeds = 0;
    for (const auto& entry : std::filesystem::directory_iterator(dir)) {
        std::ifstream in(entry.path(), std::ios::binary);
        const std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
        const auto result = parseSafetensorsHeader(bytes.data(), bytes.size(), entry.path().filename().string());
        EXPECT_TRUE(result.isOk()) << result.status().toString();
        ++seeds;
    }
    EXPECT_GE(seeds, 3u);
}

}  // namespace
}  // namespace afd::model
