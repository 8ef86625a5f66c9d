#include "transport/http_request_parser.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <string>
#include <utility>

namespace afd::transport {
namespace {

using ::testing::ElementsAre;
using ::testing::Pair;

struct Parsed {
    std::optional<HttpRejection> rejection;
    HttpRequest request;
    uint64_t content_length = 0;
};

Parsed parse(std::string_view head) {
    Parsed out;
    out.content_length = 12345;  // overwritten on success
    out.rejection = parseRequestHead(head, out.request, out.content_length);
    return out;
}

int statusOf(std::string_view head) {
    const Parsed parsed = parse(head);
    return parsed.rejection ? parsed.rejection->status : 0;
}

TEST(HttpRequestParser, SplitsTheTargetAndNormalisesHeaders) {
    const Parsed p = parse("PUT /echo?a=1&b=?2 HTTP/1.0\r\nX-One:  spaced\t\r\nCONTENT-LENGTH: 007\r\nEmpty:");
    ASSERT_FALSE(p.rejection) << p.rejection->message;
    EXPECT_EQ(p.request.method, "PUT");
    EXPECT_EQ(p.request.path, "/echo");
    EXPECT_EQ(p.request.query, "a=1&b=?2");
    EXPECT_THAT(p.request.headers,
                ElementsAre(Pair("x-one", "spaced"), Pair("content-length", "007"), Pair("empty", "")));
    EXPECT_EQ(p.content_length, 7u);
    ASSERT_NE(p.request.header("x-one"), nullptr);
    EXPECT_EQ(*p.request.header("x-one"), "spaced");
    EXPECT_EQ(p.request.header("X-One"), nullptr);  // callers ask in lower case
}

TEST(HttpRequestParser, WithoutContentLengthTheBodyIsEmpty) {
    const Parsed p = parse("GET / HTTP/1.1");
    ASSERT_FALSE(p.rejection);
    EXPECT_EQ(p.request.path, "/");
    EXPECT_EQ(p.request.query, "");
    EXPECT_EQ(p.content_length, 0u);
}

TEST(HttpRequestParser, RepeatedContentLengthMustAgree) {
    EXPECT_EQ(statusOf("POST /stop HTTP/1.1\r\nContent-Length: 2\r\ncontent-length: 2"), 0);
    EXPECT_EQ(statusOf("POST /stop HTTP/1.1\r\nContent-Length: 2\r\ncontent-length: 02"), 0);
    EXPECT_EQ(statusOf("POST /stop HTTP/1.1\r\nContent-Length: 2\r\ncontent-length: 3"), 400);
}

TEST(HttpRequestParser, MalformedHeadsAre400) {
    for (const char* head : {
             "",
             "GET /",
             "GET / HTTP/1.1 extra",
             "GET /\x01 HTTP/1.1",
             "GET /\x7f HTTP/1.1",
             "GET * HTTP/1.1",
             "GET / HTTP/1.",
             "GET / http/1.1",
             "GET / HTTP/1.1\r\n: empty name",
             "GET / HTTP/1.1\r\n\r\nX: after a blank line",
             "GET / HTTP/1.1\r\nX: a\rb",
             "POST / HTTP/1.1\r\nContent-Length: ",
             "POST / HTTP/1.1\r\nContent-Length: +1",
             "POST / HTTP/1.1\r\nContent-Length: 1 1",
         }) {
        const Parsed p = parse(head);
        ASSERT_TRUE(p.rejection) << head;
        EXPECT_EQ(p.rejection->status, 400) << head;
        EXPECT_FALSE(p.rejection->message.empty());
    }
    EXPECT_EQ(statusOf(std::string("GET / HTTP/1.1\r\nX: a") + '\0' + "b"), 400);  // NUL inside a value
}

TEST(HttpRequestParser, OtherRejectionsCarryTheirStatus) {
    EXPECT_EQ(statusOf("POST /stop HTTP/1.1\r\nContent-Length: 18446744073709551616"), 413);  // 2^64
    EXPECT_EQ(statusOf("POST /stop HTTP/1.1\r\nContent-Length: 18446744073709551615"), 0);    // 2^64 - 1
    EXPECT_EQ(statusOf("POST /stop HTTP/1.1\r\nTransfer-Encoding: chunked"), 501);
    EXPECT_EQ(statusOf("GET / HTTP/2.0"), 505);
    EXPECT_EQ(statusOf("GET / HTTP/0.9"), 505);
}

TEST(HttpRequestParser, FuzzSeedCorpusGetsTheExpectedAnswers) {
    // The seeds (the bytes a client sends); 0 = accepted.
    const std::map<std::string, int> expected = {
        {"content_length_overflow.txt", 413}, {"get_health_curl.txt", 0},     {"get_metrics_query_http10.txt", 0},
        {"http2_version.txt", 505},           {"post_stop_with_body.txt", 0}, {"put_repeated_length.txt", 0},
        {"transfer_encoding.txt", 501},
    };
    const std::filesystem::path dir = std::filesystem::path(AFD_TEST_DATA) / "../../fuzz/corpus/http_request";
    size_t seeds = 0;
    for (const auto& entry : std::filesystem::directory_iterator(dir)) {
        const std::string name = entry.path().filename().string();
        std::ifstream in(entry.path(), std::ios::binary);
        const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
        const auto it = expected.find(name);
        ASSERT_NE(it, expected.end()) << name << " has no expected answer here";
        EXPECT_EQ(statusOf(std::string_view(bytes).substr(0, bytes.find("\r\n\r\n"))), it->second) << name;
        ++seeds;
    }
    EXPECT_EQ(seeds, expected.size());
}

}  // namespace
}  // namespace afd::transport
