// libFuzzer target: the AFD config parsers on arbitrary text. The whole input goes to
// parseAdditionalConfig(text, ffn) (the {"afd": {...}} wrapper of --additional-config) and to AfdConfig::fromJson
// without and with an expected role (the bare afd object of --afd-config). Beyond "no crash, no sanitizer report,
// no exception", an accepted config must validate() for its role, give a topology, and round-trip: toJson()
// parses back to an equal config and is a fixed point. A violation traps.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "transport/afd_config.h"

namespace {

using afd::transport::AfdConfig;
using afd::transport::Role;

void require(bool condition) {
    if (!condition) __builtin_trap();
}

void checkAccepted(const AfdConfig& config, std::optional<Role> expected_role) {
    require(config.validate(expected_role).isOk());
    require(config.validate().isOk());
    if (expected_role) require(config.role == *expected_role);
    const auto topology = config.topology();
    require(topology.numAttentionRanks() == config.num_attention_ranks);
    require(topology.numFfnRanks() == config.num_ffn_ranks);
    // Every rank has a peer (p2p with fewer attention than FFN ranks is refused).
    require(!topology.ffnPeersOfAttention(config.num_attention_ranks - 1).empty());
    require(!topology.attentionPeersOfFfn(config.num_ffn_ranks - 1).empty());
    require(!config.fingerprint().empty());

    const std::string text = config.toJson();
    const auto again = AfdConfig::fromJson(text, config.role, "fuzz round trip");
    require(again.isOk());
    require(again.value() == config);
    require(again.value().toJson() == text);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const std::string_view text(reinterpret_cast<const char*>(data), size);

    const auto wrapped = afd::transport::parseAdditionalConfig(text, Role::kFfn);
    if (wrapped.isOk() && wrapped.value().has_value()) checkAccepted(*wrapped.value(), Role::kFfn);

    const auto bare = AfdConfig::fromJson(text, std::nullopt, "fuzz");
    if (bare.isOk()) {
        checkAccepted(bare.value(), std::nullopt);
        // The role the config names is the role it is accepted for, with the same values.
        const auto for_role = AfdConfig::fromJson(text, bare.value().role, "fuzz");
        require(for_role.isOk() && for_role.value() == bare.value());
    } else {
        require(bare.status().message().rfind("fuzz", 0) == 0);  // every error names its source
    }
    return 0;
}
