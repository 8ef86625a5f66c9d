#include "core/json_fields.h"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cstdint>
#include <limits>
#include <string>
#include <utility>
#include <vector>

namespace afd::core {
namespace {

using nlohmann::json;

// The message of a refusal, which must be kInvalidArgument.
template <typename T>
std::string refusal(const Result<T>& result) {
    EXPECT_FALSE(result.isOk()) << "accepted";
    if (result.isOk()) return "";
    EXPECT_EQ(result.status().code(), StatusCode::kInvalidArgument) << result.status().toString();
    return result.status().message();
}

TEST(JsonFields, EachRuleTakesItsJsonType) {
    EXPECT_TRUE(jsonAs<bool>(json(true), "b").value());
    EXPECT_FALSE(jsonAs<bool>(json(false), "b").value());
    EXPECT_EQ(jsonAs<int64_t>(json(-5), "i").value(), -5);
    EXPECT_EQ(jsonAs<int64_t>(json(std::numeric_limits<int64_t>::max()), "i").value(),
              std::numeric_limits<int64_t>::max());
    EXPECT_EQ(jsonAs<int64_t>(json(std::numeric_limits<int64_t>::min()), "i").value(),
              std::numeric_limits<int64_t>::min());
    EXPECT_EQ(jsonAs<int64_t>(json::parse("9223372036854775807"), "i").value(), std::numeric_limits<int64_t>::max());
    EXPECT_DOUBLE_EQ(jsonAs<double>(json(1e-6), "d").value(), 1e-6);
    EXPECT_EQ(jsonAs<std::string>(json("silu"), "s").value(), "silu");
    EXPECT_EQ(jsonAs<std::vector<int64_t>>(json::parse("[3, -1]"), "l").value(), (std::vector<int64_t>{3, -1}));
    EXPECT_EQ(jsonAs<std::vector<std::string>>(json::parse(R"(["a", ""])"), "l").value(),
              (std::vector<std::string>{"a", ""}));
    EXPECT_TRUE(jsonAs<std::vector<int64_t>>(json::array(), "l").value().empty());
}

TEST(JsonFields, AnIntegerIsANumber) {
    EXPECT_DOUBLE_EQ(jsonAs<double>(json(1000000), "rope_theta").value(), 1e6);
    EXPECT_DOUBLE_EQ(jsonAs<double>(json::parse("18446744073709551615"), "d").value(), 18446744073709551615.0);
}

TEST(JsonFields, BooleansTakeZeroOneAndWords) {
    // The reference AFD plugin's rule, which its tests pin: bools, 0 / 1 and the words, case- and space-insensitive.
    const std::vector<std::pair<json, bool>> accepted = {
        {json(true), true},    {json(false), false}, {json(1), true},      {json(0), false},
        {json("1"), true},     {json("0"), false},   {json("TRUE"), true}, {json("False"), false},
        {json(" yes "), true}, {json("No"), false},  {json("on"), true},   {json("OFF "), false},
    };
    for (const auto& [value, expected] : accepted) EXPECT_EQ(jsonAs<bool>(value, "b").value(), expected) << value;
    EXPECT_EQ(
        refusal(jsonAs<bool>(json(2), "b")),
        "b must be a boolean (true, false, 0, 1, or one of the strings true/false, yes/no, on/off), got number 2");
    EXPECT_EQ(
        refusal(jsonAs<bool>(json(-1), "b")),
        "b must be a boolean (true, false, 0, 1, or one of the strings true/false, yes/no, on/off), got number -1");
    EXPECT_EQ(
        refusal(jsonAs<bool>(json(1.0), "b")),
        "b must be a boolean (true, false, 0, 1, or one of the strings true/false, yes/no, on/off), got number 1.0");
    EXPECT_EQ(
        refusal(jsonAs<bool>(json("maybe"), "b")),
        R"(b must be a boolean (true, false, 0, 1, or one of the strings true/false, yes/no, on/off), got string "maybe")");
    EXPECT_EQ(
        refusal(jsonAs<bool>(json(""), "b")),
        R"(b must be a boolean (true, false, 0, 1, or one of the strings true/false, yes/no, on/off), got string "")");
}

TEST(JsonFields, IntegersTakeIntegerStringsButNoFloatsOrBooleans) {
    EXPECT_EQ(jsonAs<int64_t>(json("2001"), "i").value(), 2001);
    EXPECT_EQ(jsonAs<int64_t>(json(" 2002 "), "i").value(), 2002);
    EXPECT_EQ(jsonAs<int64_t>(json("+64"), "i").value(), 64);
    EXPECT_EQ(jsonAs<int64_t>(json("-7"), "i").value(), -7);
    EXPECT_EQ(refusal(jsonAs<int64_t>(json(2.0), "i")), "i must be an integer, got number 2.0");
    EXPECT_EQ(refusal(jsonAs<int64_t>(json::parse("1e3"), "i")), "i must be an integer, got number 1000.0");
    EXPECT_EQ(refusal(jsonAs<int64_t>(json(true), "i")), "i must be an integer, got boolean true");
    for (const char* text : {"12a", "", "1.5", "+-5", "+", "++5", "-+5", "0x10", " "}) {
        EXPECT_EQ(refusal(jsonAs<int64_t>(json(text), "i")),
                  fmt::format("i must be an integer, got string \"{}\"", text))
            << text;
    }
    EXPECT_EQ(refusal(jsonAs<int64_t>(json("99999999999999999999"), "i")),
              R"(i must be an integer in the 64-bit signed range, got string "99999999999999999999")");
}

TEST(JsonFields, NumbersTakeNumericStrings) {
    EXPECT_DOUBLE_EQ(jsonAs<double>(json("1e-6"), "d").value(), 1e-6);
    EXPECT_DOUBLE_EQ(jsonAs<double>(json(" 2.5 "), "d").value(), 2.5);
    EXPECT_EQ(refusal(jsonAs<double>(json("tiny"), "d")), R"(d must be a number, got string "tiny")");
    EXPECT_EQ(refusal(jsonAs<double>(json("inf"), "d")), R"(d must be a number, got string "inf")");
    EXPECT_EQ(refusal(jsonAs<double>(json(false), "d")), "d must be a number, got boolean false");
}

TEST(JsonFields, StringsAndListsAreNotCoerced) {
    EXPECT_EQ(refusal(jsonAs<std::string>(json(1), "s")), "s must be a string, got number 1");
    EXPECT_EQ(refusal(jsonAs<std::vector<int64_t>>(json(1), "l")), "l must be a list of integers, got number 1");
    EXPECT_EQ(refusal(jsonAs<std::vector<std::string>>(json("a"), "l")),
              R"(l must be a list of strings, got string "a")");
}

TEST(JsonFields, NullIsRefusedByEveryRule) {
    const json null;
    EXPECT_EQ(refusal(jsonAs<bool>(null, "k")),
              "k must be a boolean (true, false, 0, 1, or one of the strings true/false, yes/no, on/off), got null");
    EXPECT_EQ(refusal(jsonAs<int64_t>(null, "k")), "k must be an integer, got null");
    EXPECT_EQ(refusal(jsonAs<double>(null, "k")), "k must be a number, got null");
    EXPECT_EQ(refusal(jsonAs<std::string>(null, "k")), "k must be a string, got null");
    EXPECT_EQ(refusal(jsonAs<std::vector<int64_t>>(null, "k")), "k must be a list of integers, got null");
    EXPECT_EQ(refusal(JsonObjectReader::of(null, "k")), "k must be an object, got null");
}

TEST(JsonFields, IntegersBeyondInt64AreRefused) {
    EXPECT_EQ(refusal(jsonAs<int64_t>(json::parse("9223372036854775808"), "vocab_size")),
              "vocab_size must be an integer in the 64-bit signed range, got number 9223372036854775808");
    // Below INT64_MIN the parser gives a float.
    EXPECT_EQ(refusal(jsonAs<int64_t>(json::parse("-9223372036854775809"), "i")),
              "i must be an integer, got number -9.223372036854776e+18");
}

TEST(JsonFields, ListEntriesAreNamedByIndex) {
    EXPECT_EQ(refusal(jsonAs<std::vector<int64_t>>(json::parse(R"([1, 2, "3x"])"), "mlp_only_layers")),
              R"(mlp_only_layers[2] must be an integer, got string "3x")");
    EXPECT_EQ(refusal(jsonAs<std::vector<std::string>>(json::parse(R"(["a", null])"), "layer_types")),
              "layer_types[1] must be a string, got null");
}

TEST(JsonFields, RangesAreInclusive) {
    EXPECT_EQ(jsonIntIn(json(1), "afd.port", 1, 65535).value(), 1);
    EXPECT_EQ(jsonIntIn(json(65535), "afd.port", 1, 65535).value(), 65535);
    EXPECT_EQ(refusal(jsonIntIn(json(0), "afd.port", 1, 65535)), "afd.port must be in [1, 65535], got 0");
    EXPECT_EQ(refusal(jsonIntIn(json(65536), "afd.port", 1, 65535)), "afd.port must be in [1, 65535], got 65536");
    EXPECT_EQ(jsonIntIn(json("80"), "afd.port", 1, 65535).value(), 80);
    EXPECT_EQ(refusal(jsonIntIn(json("0"), "afd.port", 1, 65535)), "afd.port must be in [1, 65535], got 0");
    EXPECT_TRUE(checkInRange("n", -3, -3, -3).isOk());
    const Status status = checkInRange("n", 5, -3, 4);
    EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(status.message(), "n must be in [-3, 4], got 5");
}

TEST(JsonFields, ShownValuesAreTypedAndCut) {
    EXPECT_EQ(jsonShown(json()), "null");
    EXPECT_EQ(jsonShown(json(4.5)), "number 4.5");
    EXPECT_EQ(jsonShown(json("a\"b")), R"(string "a\"b")");
    EXPECT_EQ(jsonShown(json::parse("[1,2]")), "array [1,2]");
    EXPECT_EQ(jsonShown(json::parse(R"({"a":true})")), R"(object {"a":true})");
    const std::string long_text(100, 'x');
    EXPECT_EQ(jsonShown(json(long_text)), "string \"" + std::string(63, 'x') + "...");
    EXPECT_EQ(jsonTypeError(json(7), "eos_token_id", "an integer or a list of integers").message(),
              "eos_token_id must be an integer or a list of integers, got number 7");
}

TEST(JsonObjectReader, NamesFieldsByTheirPath) {
    const json object = json::parse(R"({"a": 1})");
    EXPECT_EQ(JsonObjectReader(object, "").name("a"), "a");
    EXPECT_EQ(JsonObjectReader(object, "afd").name("a"), "afd.a");
    EXPECT_EQ(JsonObjectReader(object, "afd.connector_extra_config").name("bind_host"),
              "afd.connector_extra_config.bind_host");
    EXPECT_EQ(refusal(JsonObjectReader::of(json::array(), "rope_parameters")),
              "rope_parameters must be an object, got array []");
    EXPECT_EQ(JsonObjectReader::of(object, "p").value().path(), "p");
}

TEST(JsonObjectReader, AbsentFieldsKeepTheDefault) {
    const json object = json::parse(R"({"n": 3, "flag": true})");
    const JsonObjectReader reader(object, "cfg");
    int64_t n = 7;
    int64_t missing = 7;
    bool flag = false;
    EXPECT_TRUE(reader.read("n", &n).isOk());
    EXPECT_TRUE(reader.read("missing", &missing).isOk());
    EXPECT_TRUE(reader.read("flag", &flag).isOk());
    EXPECT_EQ(n, 3);
    EXPECT_EQ(missing, 7);
    EXPECT_TRUE(flag);
    EXPECT_EQ(reader.find("missing"), nullptr);
    ASSERT_NE(reader.find("n"), nullptr);
    EXPECT_EQ(*reader.find("n"), json(3));
}

TEST(JsonObjectReader, NullMeansAbsentOnlyWhereTheFieldSaysSo) {
    const json object = json::parse(R"({"head_dim": null, "eos": [1, null]})");
    const JsonObjectReader reader(object, "");
    int64_t head_dim = 16;
    EXPECT_TRUE(reader.read("head_dim", &head_dim, JsonNull::kMeansAbsent).isOk());
    EXPECT_EQ(head_dim, 16);
    EXPECT_EQ(reader.find("head_dim", JsonNull::kMeansAbsent), nullptr);
    EXPECT_NE(reader.find("head_dim"), nullptr);

    const Status refused = reader.read("head_dim", &head_dim);
    EXPECT_EQ(refused.code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(refused.message(), "head_dim must be an integer, got null");
    EXPECT_EQ(head_dim, 16);  // unchanged by a refusal

    // Inside a list null is an entry like any other.
    std::vector<int64_t> eos;
    EXPECT_EQ(reader.read("eos", &eos, JsonNull::kMeansAbsent).message(), "eos[1] must be an integer, got null");
}

TEST(JsonObjectReader, ErrorsNameTheNestedPath) {
    const json object = json::parse(R"({"bind_host": 1})");
    const JsonObjectReader reader(object, "afd.connector_extra_config");
    std::string host = "unchanged";
    EXPECT_EQ(reader.read("bind_host", &host).message(),
              "afd.connector_extra_config.bind_host must be a string, got number 1");
    EXPECT_EQ(host, "unchanged");
}

}  // namespace
}  // namespace afd::core
