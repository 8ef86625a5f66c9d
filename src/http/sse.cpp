#include "http/sse.h"

namespace afd::http {
namespace {

constexpr std::string_view kByteOrderMark = "\xEF\xBB\xBF";

// Calls `line(piece)` for each line of `text` split at LF, CRLF or CR.
template <typename F>
void forEachLine(std::string_view text, F&& line) {
    size_t start = 0;
    for (size_t i = 0; i < text.size(); ++i) {
        if (text[i] != '\n' && text[i] != '\r') continue;
        line(text.substr(start, i - start));
        if (text[i] == '\r' && i + 1 < text.size() && text[i + 1] == '\n') ++i;
        start = i + 1;
    }
    line(text.substr(start));
}

}  // namespace

std::string formatSseEvent(std::string_view data) {
    std::string out;
    out.reserve(data.size() + 8);
    forEachLine(data, [&](std::string_view line) {
        out += "data: ";
        out += line;
        out += '\n';
    });
    out += '\n';
    return out;
}

std::string formatSseComment(std::string_view text) {
    std::string out = ": ";
    for (const char c : text) out += (c == '\n' || c == '\r') ? ' ' : c;
    out += "\n\n";
    return out;
}

core::Status SseParser::feed(std::string_view bytes, const std::function<bool(const SseEvent&)>& on_event) {
    if (failed_) return core::corrupt("event stream: an earlier line or event exceeded {} bytes", max_event_bytes_);
    size_t start = 0;  // the first byte of `bytes` not yet in line_
    for (size_t i = 0; i < bytes.size(); ++i) {
        const char c = bytes[i];
        if (c == '\n' && after_cr_) {  // the LF of a CRLF whose CR ended the line already
            after_cr_ = false;
            start = i + 1;
            continue;
        }
        after_cr_ = false;
        if (c != '\n' && c != '\r') continue;
        after_cr_ = c == '\r';
        line_.append(bytes.substr(start, i - start));
        start = i + 1;
        if (line_.size() > max_event_bytes_) {
            failed_ = true;
            return core::corrupt("event stream: a line exceeds {} bytes", max_event_bytes_);
        }
        const bool keep_going = takeLine(on_event);
        if (failed_) return core::corrupt("event stream: an event exceeds {} bytes", max_event_bytes_);
        if (!keep_going) {  // the rest of this piece is not parsed: the consumer stops reading the stream
            return core::makeStatus(core::StatusCode::kCancelled, "event stream: the consumer stopped");
        }
    }
    line_.append(bytes.substr(start));
    if (line_.size() > max_event_bytes_) {
        failed_ = true;
        return core::corrupt("event stream: a line exceeds {} bytes", max_event_bytes_);
    }
    return core::Status::ok();
}

// Interprets the complete line in line_ (HTML §9.2.6) and clears it; false when on_event asked to stop.
bool SseParser::takeLine(const std::function<bool(const SseEvent&)>& on_event) {
    std::string_view line = line_;
    if (!started_) {
        started_ = true;
        if (line.substr(0, kByteOrderMark.size()) == kByteOrderMark) line.remove_prefix(kByteOrderMark.size());
    }
    bool keep_going = true;
    if (line.empty()) {
        if (has_data_) {
            event_.data.pop_back();  // the '\n' after the last data line
            keep_going = on_event(event_);
        }
        event_ = SseEvent{};
        has_data_ = false;
    } else if (line.front() != ':') {
        const size_t colon = line.find(':');
        const std::string_view field = line.substr(0, colon);
        std::string_view value = colon == std::string_view::npos ? std::string_view() : line.substr(colon + 1);
        if (!value.empty() && value.front() == ' ') value.remove_prefix(1);
        if (field == "data") {
            event_.data.append(value);
            event_.data += '\n';
            has_data_ = true;
            if (event_.data.size() > max_event_bytes_) failed_ = true;
        } else if (field == "event") {
            event_.event = std::string(value);
        } else if (field == "id" && value.find('\0') == std::string_view::npos) {
            event_.id = std::string(value);
        }
    }
    line_.clear();
    return keep_going;
}

}  // namespace afd::http
