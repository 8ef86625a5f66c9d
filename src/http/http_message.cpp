#include "http/http_message.h"

#include <nlohmann/json.hpp>

#include "http/sse.h"

namespace afd::http {

const std::string* HttpRequest::header(std::string_view lower_case_name) const {
    for (const auto& [name, value] : headers) {
        if (name == lower_case_name) return &value;
    }
    return nullptr;
}

bool StreamWriter::writeEvent(std::string_view data) { return write(formatSseEvent(data)); }

bool StreamWriter::writeComment(std::string_view text) { return write(formatSseComment(text)); }

HttpReply HttpReply::text(int status, std::string body) {
    HttpReply reply;
    reply.status = status;
    reply.body = std::move(body);
    return reply;
}

HttpReply HttpReply::json(int status, std::string body) {
    HttpReply reply;
    reply.status = status;
    reply.content_type = "application/json";
    reply.body = std::move(body);
    return reply;
}

HttpReply HttpReply::error(int status, std::string_view message, std::string_view type, std::string_view param) {
    return json(status, errorBody(status, message, type, param));
}

HttpReply HttpReply::eventStream(StreamProducer producer) {
    HttpReply reply;
    // NOTE: exactly "text/event-stream" (no parameters): the library never compresses that type.
    reply.content_type = "text/event-stream";
    reply.headers.emplace_back("Cache-Control", "no-cache");
    reply.stream = std::move(producer);
    return reply;
}

std::string_view defaultErrorType(int status) {
    if (status >= 400 && status < 500) return "invalid_request_error";
    if (status >= 500 && status < 600) return "server_error";
    return "error";
}

std::string errorBody(int status, std::string_view message, std::string_view type, std::string_view param) {
    const nlohmann::json body = {{"error",
                                  {{"message", message},
                                   {"type", type.empty() ? defaultErrorType(status) : type},
                                   {"param", param.empty() ? nlohmann::json(nullptr) : nlohmann::json(param)},
                                   {"code", status}}}};
    // NOTE: invalid UTF-8 in a message (a client's bytes quoted back) is replaced, never thrown.
    return body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace afd::http
