// The one-shot HTTP client moved to the http layer (http/http_client.h); this header keeps transport::httpRequest
// for callers not yet moved (src/cli/cmd_launch.cpp). New code includes http/http_client.h.
#pragma once

#include "http/http_client.h"

namespace afd::transport {

using http::HttpResponse;
using http::httpRequest;

}  // namespace afd::transport
