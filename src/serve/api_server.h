// ApiServer: the OpenAI-compatible HTTP API of an attention rank (docs/serving.md), on an http::HttpServer, serving
// from an attention::EngineLoop.
//
// Routes: POST /v1/completions and POST /v1/chat/completions (whole JSON replies, or SSE streams with "stream":
// true), GET /v1/models (the served model, with max_model_len), GET /health (200 while the loop is healthy, else
// 503 saying why), GET /metrics (render_metrics' Prometheus text).
//
// A generation request: the loop must be healthy (else 503 at once); the body is parsed (serve/api_request.h: 400
// naming the field), the model name checked (404, as vLLM), the prompt tokenized (text prompts and chat need the
// tokenizer: 400 without one) and checked against the context (400 naming max_model_len or max_tokens) before it is
// submitted. The handler then follows the request's RequestStream every poll_interval: a streaming reply writes a
// chunk per engine output and checks the client between waits; a client that leaves gets its request aborted
// (EngineLoop::abort: its KV blocks are freed). A non-streaming reply waits for the end in the handler (the HTTP
// layer sends the status first for streamed bodies, so an error could not be a 503 there), checking its client
// (HttpRequest::client_connected) between waits in the same way. A request that ends with kError is a 503 with the
// message, or
// in a stream an OpenAI error object as a data event followed by [DONE]. A stop string that matches aborts the
// engine request (the reply ends "stop").
//
// Threads: handlers run on the HTTP server's workers; a streaming reply holds one for its whole stream, so the
// default num_threads leaves room for 256 streams and the health and metrics requests beside them.
// on_request_done runs once for every generation request a handler took (refused ones included), on that handler's
// thread, after the reply was written (or the client was seen gone). The loop and the tokenizer outlive the server.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "attention/engine_loop.h"
#include "core/status.h"
#include "http/http_server.h"
#include "serve/request_record.h"
#include "tokenizer/tokenizer.h"

namespace afd::serve {

enum class ChatTemplate {
    kQwen3,  // tokenizer::renderQwen3Chat
    kNone,   // chat completions are refused (400)
};

// HttpServerOptions for the API: "API server", 320 workers (256 streams and room beside them), 512 queued
// connections, 4 MiB bodies.
http::HttpServerOptions defaultApiHttpOptions();

struct ApiServerOptions {
    http::HttpServerOptions http = defaultApiHttpOptions();
    std::string served_model_name = "afd";  // "model" of requests must be this (or absent); /v1/models lists it
    int64_t max_model_len = 0;              // the engine's (SchedulerOptions::max_model_len); required
    ChatTemplate chat_template = ChatTemplate::kQwen3;
    // What a request that leaves a field out gets (OpenAI's defaults; a server may take generation_config.json's).
    double default_temperature = 1.0;
    double default_top_p = 1.0;
    int64_t default_top_k = 0;
    int64_t default_completion_max_tokens = 16;  // completions (cut to the context); chat: the rest of the context
    // How often a handler looks at its client and at the server's stop while it waits for tokens.
    std::chrono::milliseconds poll_interval{50};

    // kInvalidArgument naming the field (http's own rules included).
    core::Status validate() const;
};

class ApiServer {
public:
    // Registers the routes; nothing is served before start().
    explicit ApiServer(ApiServerOptions options);
    ~ApiServer();  // stop()
    ApiServer(const ApiServer&) = delete;
    ApiServer& operator=(const ApiServer&) = delete;

    // Binds the port (as HttpServer::bind): a process binds first, so that a taken port fails before it loads
    // anything. Errors: options.validate()'s, then HttpServer's.
    core::Status bind();
    // Serves from `loop`. `tokenizer` may be null (token-id prompts only); `render_metrics` (optional) gives
    // GET /metrics its body; `on_request_done` (optional) gets each request's record. The loop, the tokenizer and
    // what the callbacks use outlive the server (or its stop()). Errors as bind()'s (when it was not called).
    // Precondition (AFD_CHECK): once, not after stop().
    core::Status start(attention::EngineLoop& loop, const tokenizer::Tokenizer* tokenizer,
                       std::function<std::string()> render_metrics = {},
                       std::function<void(const RequestRecord&)> on_request_done = {});
    // The bound port; 0 before bind().
    int port() const;
    // Ends every request in flight (aborted in the engine; streams get a last error event within the HTTP server's
    // stop grace, non-streaming requests a 503), then stops the HTTP server. Idempotent; not from a handler.
    void stop();

    const ApiServerOptions& options() const;

private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

}  // namespace afd::serve
