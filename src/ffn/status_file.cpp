#include "ffn/status_file.h"

#include <nlohmann/json.hpp>

#include <cstdio>
#include <fstream>

namespace afd::ffn {

core::Status writeStatusFile(const std::string& path, const ServiceStatusReport& r) {
    const nlohmann::json j = {
        {"state", r.state},
        {"exit_reason", r.exit_reason},
        {"exit_code", r.exit_code},
        {"error", r.error},
        {"rank", r.rank},
        {"expert_range", {r.expert_begin, r.expert_end}},
        {"weight_bytes", r.weight_bytes},
        {"counters", {{"steps", r.steps}, {"tokens", r.tokens}}},
        {"resources_released", r.resources_released},
        {"released", r.released_detail},
        {"serve_sessions", serveSessionsName(r.serve_sessions)},
        {"sessions", sessionSummaryJson(r.sessions)},
    };
    const std::string tmp = path + ".tmp";
    {
        std::ofstream out(tmp, std::ios::trunc);
        out << j.dump(2) << "\n";
        out.close();
        if (!out) return core::ioError("cannot write status file {}", tmp);
    }
    if (std::rename(tmp.c_str(), path.c_str()) != 0) return core::ioError("cannot rename {} to {}", tmp, path);
    return core::Status::ok();
}

}  // namespace afd::ffn
