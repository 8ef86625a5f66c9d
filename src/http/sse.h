// Server-sent events (the text/event-stream format of the HTML standard, §9.2): formatting for servers and an
// incremental parser for clients. Pure functions on bytes, no sockets.
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <string_view>

#include "core/status.h"

namespace afd::http {

// One event: each line of `data` as a "data: " line, then the blank line that dispatches it. Line breaks inside
// `data` (LF, CRLF or CR) split it into several data lines, which a parser joins back with '\n'.
std::string formatSseEvent(std::string_view data);
// A comment line (": text") and a blank line: clients skip it; used as a heartbeat. Line breaks become spaces.
std::string formatSseComment(std::string_view text);

struct SseEvent {
    std::string event;  // the "event" field; empty for the default type ("message")
    std::string data;   // the "data" lines joined by '\n'
    std::string id;     // the "id" field of this event, empty when it had none
};

// Consumes a stream's bytes as they arrive, in pieces split anywhere (inside a line, between CR and LF).
// Not thread-safe; one parser per stream.
class SseParser {
public:
    // An event (or a line) longer than `max_event_bytes` fails the stream: a bound on what a peer can make it hold.
    explicit SseParser(size_t max_event_bytes = size_t{1} << 20) : max_event_bytes_(max_event_bytes) {}

    // Calls `on_event` for every event a blank line completes (events without data lines are not dispatched, as the
    // standard says). Comment lines, unknown fields and "retry" are skipped; a leading byte order mark is dropped.
    // Errors: kCorrupt once a line or an event outgrows the bound (the parser stays failed), kCancelled when
    // on_event returned false (the rest of that piece is not parsed: the consumer is done with the stream).
    core::Status feed(std::string_view bytes, const std::function<bool(const SseEvent&)>& on_event);

    // Bytes held for an unfinished line and event (at most about 2 × max_event_bytes).
    size_t pendingBytes() const { return line_.size() + event_.data.size(); }

private:
    bool takeLine(const std::function<bool(const SseEvent&)>& on_event);

    const size_t max_event_bytes_;
    std::string line_;  // the unfinished line
    SseEvent event_;    // fields of the unfinished event; data carries a trailing '\n' per data line
    bool has_data_ = false;
    bool after_cr_ = false;  // the last byte was CR: an LF right after it ends no second line
    bool started_ = false;   // past the optional byte order mark
    bool failed_ = false;
};

}  // namespace afd::http
