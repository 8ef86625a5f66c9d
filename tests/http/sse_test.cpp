#include "http/sse.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace afd::http {
namespace {

using ::testing::ElementsAre;

// Feeds `stream` to a fresh parser in pieces of `piece` bytes; returns the events' data (event names prefixed).
std::vector<std::string> parse(std::string_view stream, size_t piece = 0, core::Status* status = nullptr) {
    SseParser parser;
    std::vector<std::string> out;
    const auto on_event = [&](const SseEvent& event) {
        out.push_back((event.event.empty() ? "" : event.event + ":") + event.data + (event.id.empty() ? "" : "#" + event.id));
        return true;
    };
    core::Status last;
    if (piece == 0) piece = stream.size() + 1;
    for (size_t i = 0; i < stream.size() && last.isOk(); i += piece) last = parser.feed(stream.substr(i, piece), on_event);
    if (status != nullptr) *status = last;
    return out;
}

TEST(Sse, FormatsOneDataLinePerLine) {
    EXPECT_EQ(formatSseEvent("{\"a\":1}"), "data: {\"a\":1}\n\n");
    EXPECT_EQ(formatSseEvent("[DONE]"), "data: [DONE]\n\n");
    EXPECT_EQ(formatSseEvent("a\nb\r\nc\rd"), "data: a\ndata: b\ndata: c\ndata: d\n\n");
    EXPECT_EQ(formatSseEvent(""), "data: \n\n");
    EXPECT_EQ(formatSseComment("keep\nalive"), ": keep alive\n\n");
}

TEST(Sse, ParsesWhatItFormatsSplitAnywhere) {
    const std::vector<std::string> datas = {"{\"id\":1}", "two\nlines", "", "tail\r\nwith CRLF", "[DONE]"};
    std::string stream = formatSseComment("hello");
    for (const std::string& data : datas) stream += formatSseEvent(data);
    std::vector<std::string> expected = {"{\"id\":1}", "two\nlines", "", "tail\nwith CRLF", "[DONE]"};
    for (size_t piece = 1; piece <= stream.size(); ++piece) {
        EXPECT_EQ(parse(stream, piece), expected) << "pieces of " << piece;
    }
}

TEST(Sse, FollowsTheStandardsLineAndFieldRules) {
    // LF, CRLF and CR end lines; a CR at the end of a piece and the LF at the start of the next are one break.
    EXPECT_THAT(parse("data: a\r\n\r\ndata: b\r\rdata: c\n\n"), ElementsAre("a", "b", "c"));
    EXPECT_THAT(parse("data: a\r\n\r\ndata: b\r\rdata: c\n\n", 1), ElementsAre("a", "b", "c"));
    // One space after the colon is dropped, no more; no colon: the whole line is the field name.
    EXPECT_THAT(parse("data:x\n\ndata:  two\n\ndata\n\n"), ElementsAre("x", " two", ""));
    // event and id fields; unknown fields, retry and comments are skipped; no data: nothing is dispatched.
    EXPECT_THAT(parse("event: delta\nid: 7\nretry: 10\nfoo: bar\n: note\ndata: d\n\nevent: lonely\n\n"),
                ElementsAre("delta:d#7"));
    // A byte order mark at the very start is dropped, once.
    EXPECT_THAT(parse("\xEF\xBB\xBF" "data: bom\n\n"), ElementsAre("bom"));
    EXPECT_THAT(parse("\xEF\xBB\xBF" "data: bom\n\n", 1), ElementsAre("bom"));
    // An unfinished event at the end is not dispatched.
    EXPECT_THAT(parse("data: done\n\ndata: cut"), ElementsAre("done"));
}

TEST(Sse, LongLinesAndEventsFailTheStream) {
    SseParser parser(64);
    const auto ignore = [](const SseEvent&) { return true; };
    EXPECT_TRUE(parser.feed("data: " + std::string(50, 'a') + "\n\n", ignore).isOk());
    const core::Status long_line = parser.feed(std::string(100, 'x'), ignore);
    EXPECT_EQ(long_line.code(), core::StatusCode::kCorrupt);
    EXPECT_EQ(parser.feed("data: ok\n\n", ignore).code(), core::StatusCode::kCorrupt);  // stays failed

    SseParser many_lines(64);
    std::string event;
    for (int i = 0; i < 10; ++i) event += "data: 0123456789\n";
    EXPECT_EQ(many_lines.feed(event, ignore).code(), core::StatusCode::kCorrupt);
    EXPECT_LE(many_lines.pendingBytes(), 2 * 64u);
}

TEST(Sse, AConsumerThatStopsEndsTheFeed) {
    SseParser parser;
    int seen = 0;
    const core::Status status = parser.feed("data: 1\n\ndata: 2\n\n", [&](const SseEvent&) {
        ++seen;
        return false;
    });
    EXPECT_EQ(status.code(), core::StatusCode::kCancelled);
    EXPECT_EQ(seen, 1);
}

}  // namespace
}  // namespace afd::http
