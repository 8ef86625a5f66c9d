#include "serve/api_server.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <optional>
#include <random>
#include <utility>
#include <variant>

#include "core/check.h"
#include "core/logging.h"
#include "core/metrics.h"
#include "serve/api_request.h"
#include "serve/api_response.h"
#include "serve/output_assembler.h"
#include "tokenizer/chat_template.h"

namespace afd::serve {
namespace {

using attention::FinishReason;
using Clock = RequestRecord::Clock;

// A request ready for the engine: its prompt ids and sampling settings.
struct Prepared {
    ApiRequest request;
    std::vector<int32_t> prompt_ids;
    attention::SamplingParams params;
};

int64_t unixSeconds() {
    return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch())
        .count();
}

uint64_t randomSeed() {
    thread_local std::mt19937_64 rng{std::random_device{}()};
    return rng();
}

ApiError badRequest(std::string param, std::string message) {
    return ApiError{400, std::move(message), std::move(param), {}};
}

ApiError unavailable(std::string message) { return ApiError{503, std::move(message), {}, {}}; }

http::HttpReply errorReply(const ApiError& error) { return http::HttpReply::json(error.status, apiErrorBody(error)); }

}  // namespace

http::HttpServerOptions defaultApiHttpOptions() {
    http::HttpServerOptions options;
    options.name = "API server";
    options.num_threads = 320;
    options.max_queued_connections = 512;
    options.max_body_bytes = size_t{4} << 20;
    return options;
}

core::Status ApiServerOptions::validate() const {
    AFD_RETURN_IF_ERROR(http.validate());
    if (served_model_name.empty()) return core::invalidArgument("served_model_name is empty");
    if (max_model_len < 2) return core::invalidArgument("max_model_len must be at least 2, got {}", max_model_len);
    if (!(default_temperature >= 0.0 && default_temperature <= kMaxTemperature)) {
        return core::invalidArgument("default_temperature must be in [0, 2], got {}", default_temperature);
    }
    if (!(default_top_p > 0.0 && default_top_p <= 1.0)) {
        return core::invalidArgument("default_top_p must be in (0, 1], got {}", default_top_p);
    }
    if (default_top_k < 0) return core::invalidArgument("default_top_k must be >= 0, got {}", default_top_k);
    if (default_completion_max_tokens < 1) {
        return core::invalidArgument("default_completion_max_tokens must be >= 1, got {}",
                                     default_completion_max_tokens);
    }
    if (poll_interval.count() <= 0) return core::invalidArgument("poll_interval must be positive");
    return core::Status::ok();
}

struct ApiServer::Impl {
    explicit Impl(ApiServerOptions o) : options(std::move(o)), http(options.http) {}

    http::HttpReply generate(ApiEndpoint endpoint, const http::HttpRequest& request);
    std::variant<Prepared, ApiError> prepare(ApiRequest request) const;
    std::variant<std::vector<int32_t>, ApiError> promptIds(const ApiRequest& request) const;
    http::HttpReply wholeReply(const Prepared& prepared, const std::shared_ptr<attention::RequestStream>& stream,
                               const std::function<bool()>& client_connected, RequestRecord& record);
    void streamReply(const Prepared& prepared, const std::shared_ptr<attention::RequestStream>& stream,
                     RequestRecord& record, http::StreamWriter& writer);
    void done(RequestRecord& record, RequestEnd end) const {
        record.end = end;
        record.finished = Clock::now();
        if (on_request_done) on_request_done(record);
    }
    http::HttpReply models() const;

    // A streaming reply's state, shared by the copies of its producer. Should the HTTP layer drop the reply without
    // running the producer (the client gone first), the last copy aborts the request and reports it.
    struct StreamJob {
        StreamJob(Impl* i, std::shared_ptr<Prepared> p, std::shared_ptr<attention::RequestStream> s, RequestRecord r)
            : impl(i), prepared(std::move(p)), stream(std::move(s)), record(std::move(r)) {}
        ~StreamJob() {
            if (reported) return;
            impl->loop->abort(stream->id());
            try {
                impl->done(record, RequestEnd::kAborted);
            } catch (const std::exception& e) {  // nothing throws out of a destructor
                AFD_LOG_ERROR("API server: on_request_done threw: {}", e.what());
            }
        }
        StreamJob(const StreamJob&) = delete;
        StreamJob& operator=(const StreamJob&) = delete;

        Impl* impl;
        std::shared_ptr<Prepared> prepared;
        std::shared_ptr<attention::RequestStream> stream;
        RequestRecord record;
        bool reported = false;  // the producer ran (and reports the request itself)
    };
    http::HttpReply health() const;

    const ApiServerOptions options;
    // Set by start(), before the server serves (read-only from then on).
    attention::EngineLoop* loop = nullptr;
    const tokenizer::Tokenizer* tokenizer = nullptr;
    std::function<std::string()> render_metrics;
    std::function<void(const RequestRecord&)> on_request_done;
    bool started = false;
    std::atomic<bool> stopping{false};
    http::HttpServer http;
};

std::variant<std::vector<int32_t>, ApiError> ApiServer::Impl::promptIds(const ApiRequest& request) const {
    const bool chat = request.endpoint == ApiEndpoint::kChatCompletions;
    if (!chat && !request.prompt_is_text) return request.prompt_ids;
    const char* param = chat ? "messages" : "prompt";
    if (tokenizer == nullptr) {
        return badRequest(param, chat ? "this server has no tokenizer: chat completions cannot be served"
                                      : "this server has no tokenizer: send the prompt as token ids");
    }
    std::string text = request.prompt_text;
    if (chat) {
        if (options.chat_template == ChatTemplate::kNone) {
            return badRequest("messages", "this server has no chat template: chat completions cannot be served");
        }
        core::Result<std::string> rendered = tokenizer::renderQwen3Chat(request.messages, chatRenderOptions(request));
        if (!rendered.isOk()) return badRequest("messages", rendered.status().message());
        text = std::move(rendered).value();
    }
    tokenizer::EncodeOptions encode;
    encode.invalid_utf8 = tokenizer::InvalidUtf8::kReplace;
    core::Result<std::vector<tokenizer::TokenId>> ids = tokenizer->encode(text, encode);
    if (!ids.isOk()) return badRequest(param, ids.status().message());
    return std::vector<int32_t>(ids->begin(), ids->end());
}

std::variant<Prepared, ApiError> ApiServer::Impl::prepare(ApiRequest request) const {
    if (!request.model.empty() && request.model != options.served_model_name) {
        return ApiError{404, fmt::format("The model `{}` does not exist.", request.model), "model", "NotFoundError"};
    }
    if (!request.stop.empty() && tokenizer == nullptr) {
        return badRequest("stop", "this server has no tokenizer: stop strings cannot be matched");
    }
    auto ids = promptIds(request);
    if (auto* error = std::get_if<ApiError>(&ids)) return *error;
    Prepared p;
    p.prompt_ids = std::move(std::get<std::vector<int32_t>>(ids));
    const bool chat = request.endpoint == ApiEndpoint::kChatCompletions;
    const char* prompt_param = chat ? "messages" : "prompt";
    const auto n = static_cast<int64_t>(p.prompt_ids.size());
    if (n == 0) return badRequest(prompt_param, "the prompt is empty");
    if (n >= options.max_model_len) {
        return badRequest(prompt_param, fmt::format("the prompt has {} tokens, but this model's maximum context length "
                                                    "(max_model_len) is {} tokens, which leaves no room to generate",
                                                    n, options.max_model_len));
    }
    const int64_t room = options.max_model_len - n;
    if (request.max_tokens && *request.max_tokens > room) {
        return badRequest(chat ? "max_completion_tokens" : "max_tokens",
                          fmt::format("this model's maximum context length (max_model_len) is {} tokens; the prompt "
                                      "has {} and max_tokens asks for {} more",
                                      options.max_model_len, n, *request.max_tokens));
    }
    attention::SamplingParams& s = p.params;
    s.max_tokens = request.max_tokens.value_or(chat ? room : std::min(room, options.default_completion_max_tokens));
    s.temperature = static_cast<float>(request.temperature.value_or(options.default_temperature));
    s.top_p = static_cast<float>(request.top_p.value_or(options.default_top_p));
    s.top_k = std::max<int64_t>(0, request.top_k.value_or(options.default_top_k));
    s.seed = request.seed ? static_cast<uint64_t>(*request.seed) : randomSeed();
    s.ignore_eos = request.ignore_eos;
    s.stop_token_ids = request.stop_token_ids;
    p.request = std::move(request);
    return p;
}

http::HttpReply ApiServer::Impl::generate(ApiEndpoint endpoint, const http::HttpRequest& request) {
    RequestRecord record;
    record.endpoint = std::string(endpointName(endpoint));
    record.arrival = Clock::now();
    const auto refuse = [&](const ApiError& error) {
        done(record, RequestEnd::kRejected);
        return errorReply(error);
    };
    if (const core::Status health = loop->health(); !health.isOk()) {
        return refuse(unavailable(fmt::format("the engine cannot serve: {}", health.message())));
    }
    std::variant<ApiRequest, ApiError> parsed = parseApiRequest(endpoint, request.body);
    if (auto* error = std::get_if<ApiError>(&parsed)) return refuse(*error);
    record.stream = std::get<ApiRequest>(parsed).stream;
    std::variant<Prepared, ApiError> ready = prepare(std::move(std::get<ApiRequest>(parsed)));
    if (auto* error = std::get_if<ApiError>(&ready)) return refuse(*error);
    auto prepared = std::make_shared<Prepared>(std::move(std::get<Prepared>(ready)));
    record.num_prompt_tokens = static_cast<int64_t>(prepared->prompt_ids.size());

    attention::EngineRequest engine_request;
    engine_request.prompt = prepared->prompt_ids;
    engine_request.params = prepared->params;
    core::Result<std::shared_ptr<attention::RequestStream>> submitted = loop->submit(std::move(engine_request));
    if (!submitted.isOk()) {
        const core::Status& why = submitted.status();
        if (why.code() == core::StatusCode::kInvalidArgument) return refuse(badRequest({}, why.message()));
        return refuse(unavailable(fmt::format("the engine cannot serve: {}", why.message())));
    }
    std::shared_ptr<attention::RequestStream> stream = std::move(submitted).value();
    if (!prepared->request.stream) return wholeReply(*prepared, stream, request.client_connected, record);
    auto job = std::make_shared<StreamJob>(this, std::move(prepared), std::move(stream), std::move(record));
    return http::HttpReply::eventStream([job](http::StreamWriter& writer) {
        job->reported = true;
        job->impl->streamReply(*job->prepared, job->stream, job->record, writer);
    });
}

http::HttpReply ApiServer::Impl::wholeReply(const Prepared& p, const std::shared_ptr<attention::RequestStream>& stream,
                                            const std::function<bool()>& client_connected, RequestRecord& record) {
    OutputAssembler assembler(tokenizer, p.request.skip_special_tokens, p.request.stop);
    std::string text;
    bool aborted_for_shutdown = false;
    bool client_left = false;
    while (true) {
        if (stopping.load() && !aborted_for_shutdown) {
            loop->abort(stream->id());  // the stream then ends kAborted, unless it ended otherwise first
            aborted_for_shutdown = true;
        }
        if (!client_left && client_connected && !client_connected()) {
            loop->abort(stream->id());  // nobody will read the reply: free the request's KV blocks now
            client_left = true;
        }
        std::optional<attention::RequestOutput> out = stream->next(options.poll_interval);
        if (!out) {
            if (!stream->drained()) continue;
            done(record, RequestEnd::kError);
            return errorReply(unavailable("the request's stream ended without a result"));
        }
        OutputAssembler::Piece piece = assembler.add(out->new_token_ids);
        text += piece.text;
        if (!piece.token_ids.empty()) {
            record.outputs.emplace_back(Clock::now(), static_cast<int64_t>(piece.token_ids.size()));
        }
        const bool stopped = assembler.stopped();
        if (!stopped && !out->finished) continue;
        if (stopped && !out->finished) loop->abort(stream->id());
        record.num_output_tokens = static_cast<int64_t>(assembler.tokenIds().size());
        std::string_view reason;
        if (stopped || out->finish_reason == FinishReason::kStop) {
            reason = "stop";
        } else if (out->finish_reason == FinishReason::kLength) {
            reason = "length";
        } else {
            const bool error = out->finish_reason == FinishReason::kError;
            done(record, error ? RequestEnd::kError : RequestEnd::kAborted);
            return errorReply(unavailable(error         ? fmt::format("the request failed: {}", out->error.message())
                                          : client_left ? std::string("the client closed the connection")
                                                        : std::string("the server is shutting down")));
        }
        text += assembler.finish();
        ResponseHead head{newResponseId(p.request.endpoint), unixSeconds(), options.served_model_name};
        FinalChoice choice{std::move(text), reason, &p.prompt_ids, &assembler.tokenIds(), p.request.return_token_ids};
        Usage usage{record.num_prompt_tokens, record.num_output_tokens};
        http::HttpReply reply = http::HttpReply::json(200, completionResponse(p.request.endpoint, head, choice, usage));
        done(record, reason == "stop" ? RequestEnd::kStop : RequestEnd::kLength);
        return reply;
    }
}

void ApiServer::Impl::streamReply(const Prepared& p, const std::shared_ptr<attention::RequestStream>& stream,
                                  RequestRecord& record, http::StreamWriter& writer) {
    const ApiEndpoint endpoint = p.request.endpoint;
    const bool ids = p.request.return_token_ids;
    ResponseHead head{newResponseId(endpoint), unixSeconds(), options.served_model_name};
    OutputAssembler assembler(tokenizer, p.request.skip_special_tokens, p.request.stop);
    const auto finish = [&](RequestEnd end) {
        record.num_output_tokens = static_cast<int64_t>(assembler.tokenIds().size());
        done(record, end);
    };
    const auto leave = [&] {
        loop->abort(stream->id());
        finish(RequestEnd::kAborted);
    };
    const auto fail = [&](RequestEnd end, const std::string& message) {
        writer.writeEvent(http::errorBody(503, message));
        writer.writeEvent("[DONE]");
        finish(end);
    };
    bool first = true;
    if (endpoint == ApiEndpoint::kChatCompletions) {
        ChunkChoice role{"", "", true, &p.prompt_ids, nullptr, ids};
        if (!writer.writeEvent(streamChunk(endpoint, head, role))) return leave();
        first = false;
    }
    while (true) {
        if (!writer.connected()) {
            if (!writer.stopping()) return leave();
            loop->abort(stream->id());
            return fail(RequestEnd::kAborted, "the server is shutting down");
        }
        std::optional<attention::RequestOutput> out = stream->next(options.poll_interval);
        if (!out) {
            if (stream->drained()) return fail(RequestEnd::kError, "the request's stream ended without a result");
            continue;
        }
        OutputAssembler::Piece piece = assembler.add(out->new_token_ids);
        if (!piece.token_ids.empty()) {
            record.outputs.emplace_back(Clock::now(), static_cast<int64_t>(piece.token_ids.size()));
        }
        const bool stopped = assembler.stopped();
        if (stopped && !out->finished) loop->abort(stream->id());
        std::string_view reason;
        if (stopped || out->finished) {
            if (stopped || out->finish_reason == FinishReason::kStop) {
                reason = "stop";
            } else if (out->finish_reason == FinishReason::kLength) {
                reason = "length";
            } else if (out->finish_reason == FinishReason::kError) {
                return fail(RequestEnd::kError, fmt::format("the request failed: {}", out->error.message()));
            } else {
                return fail(RequestEnd::kAborted, "the request was aborted");
            }
            piece.text += assembler.finish();
        }
        if (!reason.empty() || !piece.text.empty() || (ids && !piece.token_ids.empty())) {
            ChunkChoice chunk{piece.text, reason, first, &p.prompt_ids, &piece.token_ids, ids};
            if (!writer.writeEvent(streamChunk(endpoint, head, chunk))) return leave();
            first = false;
        }
        if (reason.empty()) continue;
        record.num_output_tokens = static_cast<int64_t>(assembler.tokenIds().size());
        if (p.request.include_usage) {
            writer.writeEvent(usageChunk(endpoint, head, Usage{record.num_prompt_tokens, record.num_output_tokens}));
        }
        writer.writeEvent("[DONE]");
        return finish(reason == "stop" ? RequestEnd::kStop : RequestEnd::kLength);
    }
}

http::HttpReply ApiServer::Impl::models() const {
    const nlohmann::ordered_json model = {{"id", options.served_model_name},
                                          {"object", "model"},
                                          {"created", unixSeconds()},
                                          {"owned_by", "afd"},
                                          {"root", options.served_model_name},
                                          {"parent", nullptr},
                                          {"max_model_len", options.max_model_len}};
    const nlohmann::ordered_json body = {{"object", "list"}, {"data", nlohmann::ordered_json::array({model})}};
    return http::HttpReply::json(200, body.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace));
}

http::HttpReply ApiServer::Impl::health() const {
    const core::Status health = loop->health();
    if (health.isOk()) return http::HttpReply::text(200, "");
    return http::HttpReply::error(503, fmt::format("unhealthy: {}", health.message()));
}

ApiServer::ApiServer(ApiServerOptions options) : impl_(std::make_unique<Impl>(std::move(options))) {
    Impl* impl = impl_.get();
    impl->http.addRoute("POST", "/v1/completions", [impl](const http::HttpRequest& request) {
        return impl->generate(ApiEndpoint::kCompletions, request);
    });
    impl->http.addRoute("POST", "/v1/chat/completions", [impl](const http::HttpRequest& request) {
        return impl->generate(ApiEndpoint::kChatCompletions, request);
    });
    impl->http.addRoute("GET", "/v1/models", [impl](const http::HttpRequest&) { return impl->models(); });
    impl->http.addRoute("GET", "/health", [impl](const http::HttpRequest&) { return impl->health(); });
    impl->http.addRoute("GET", "/metrics", [impl](const http::HttpRequest&) {
        http::HttpReply reply = http::HttpReply::text(200, impl->render_metrics ? impl->render_metrics() : "");
        reply.content_type = std::string(core::MetricsRegistry::kContentType);
        return reply;
    });
}

ApiServer::~ApiServer() { stop(); }

core::Status ApiServer::bind() {
    AFD_RETURN_IF_ERROR(impl_->options.validate());
    return impl_->http.bind();
}

core::Status ApiServer::start(attention::EngineLoop& loop, const tokenizer::Tokenizer* tokenizer,
                              std::function<std::string()> render_metrics,
                              std::function<void(const RequestRecord&)> on_request_done) {
    AFD_CHECK(!impl_->started, "ApiServer::start called twice");
    AFD_RETURN_IF_ERROR(impl_->options.validate());
    impl_->loop = &loop;
    impl_->tokenizer = tokenizer;
    impl_->render_metrics = std::move(render_metrics);
    impl_->on_request_done = std::move(on_request_done);
    impl_->started = true;
    return impl_->http.start();
}
int ApiServer::port() const { return impl_->http.port(); }
const ApiServerOptions& ApiServer::options() const { return impl_->options; }

void ApiServer::stop() {
    impl_->stopping.store(true);
    impl_->http.stop();
}

}  // namespace afd::serve
