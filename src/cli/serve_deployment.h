// How `afd serve` reads its AFD config: which deployment it serves from and what it starts itself.
//   no config                    the dense engine in this process;
//   {"afd": {…}} without a role  a local deployment: this process is attention rank 0 and starts the FFN ranks
//                                (FfnFleet, as `afd launch` does; launch's defaults: m2n 1A2F, a free port); one
//                                attention rank only (num_attention_ranks 1), since one process serves one endpoint;
//   {"afd": {"role": "attention", …}}
//                                one attention rank of a deployment whose FFN ranks run elsewhere (`afd ffn` on this or
//                                other hosts); --attention-rank picks the rank, each attention rank serving its own
//                                endpoint.
#pragma once

#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "core/status.h"

namespace afd::cli {

struct ServeDeployment {
    bool afd = false;
    bool start_ffn_ranks = false;  // a local deployment
    // The afd object the attention rank gets (role "attention"), as --additional-config text.
    std::string attention_config;
    // start_ffn_ranks: the afd object for the FFN ranks (without a role: FfnFleet sets it) and their count.
    nlohmann::json ffn_afd;
    int num_ffn_ranks = 0;
};

// From --additional-config's text (nullopt: none given). kInvalidArgument naming the key: a role other than attention,
// num_attention_ranks above 1 in a local deployment, and whatever AfdConfig's parser refuses.
core::Result<ServeDeployment> resolveServeDeployment(const std::optional<std::string>& additional_config);

}  // namespace afd::cli
