// The seeds of fuzz/http_server_fuzz.cpp (fuzz/corpus/http_server/NAME-STATUS.txt) reach what they were made for:
// sent as the fuzz target sends them (a new connection, then a half-close) to a server with the target's limits
// and routes, each gets the status its name ends with as the first response.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <stdexcept>
#include <string>

#include "http/http_server.h"
#include "http/http_test_util.h"

namespace afd::http {
namespace {

const std::filesystem::path kSeeds = std::filesystem::path(AFD_TEST_DATA) / "../../fuzz/corpus/http_server";

TEST(HttpServerFuzzSeeds, EachSeedGetsItsStatus) {
    HttpServerOptions options;
    options.max_header_bytes = 2048;
    options.max_body_bytes = 1024;
    HttpServer server(options);
    server.addRoute("GET", "/health", [](const HttpRequest&) { return HttpReply::text(200, "ok\n"); });
    server.addRoute("PUT", "/echo", [](const HttpRequest& request) { return HttpReply::text(200, request.body); });
    server.addRoute("POST", "/json", [](const HttpRequest& request) {
        return request.body.starts_with("{") ? HttpReply::json(200, request.body)
                                             : HttpReply::error(400, "the body is not a JSON object");
    });
    server.addRoute("GET", "/events", [](const HttpRequest&) {
        return HttpReply::eventStream([](StreamWriter& writer) { writer.writeEvent("[DONE]"); });
    });
    server.addRoute("GET", "/throws", [](const HttpRequest&) -> HttpReply { throw std::runtime_error("thrown"); });
    ASSERT_TRUE(server.start().isOk());

    int seeds = 0;
    for (const auto& entry : std::filesystem::directory_iterator(kSeeds)) {
        const std::string stem = entry.path().stem().string();
        const std::string expected = stem.substr(stem.rfind('-') + 1);
        std::ifstream in(entry.path(), std::ios::binary);
        const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
        testing::RawClient client(server.port());
        ASSERT_TRUE(client.send(bytes)) << stem;
        client.shutdownWrite();
        bool closed = false;
        const std::string reply = client.readToEnd(&closed);
        EXPECT_TRUE(closed) << stem;
        EXPECT_EQ(reply.substr(0, 12), "HTTP/1.1 " + expected) << stem << ":\n" << reply;
        ++seeds;
    }
    EXPECT_GE(seeds, 15);
}

}  // namespace
}  // namespace afd::http
