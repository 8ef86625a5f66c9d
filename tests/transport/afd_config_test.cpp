#include "transport/afd_config.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "core/check.h"

namespace afd::transport {
namespace {

using ::testing::HasSubstr;

core::Result<AfdConfig> parse(const std::string& afd_object, std::optional<Role> expected_role = std::nullopt) {
    return AfdConfig::fromJson(afd_object, expected_role, "test");
}

AfdConfig parseOk(const std::string& afd_object, std::optional<Role> expected_role = std::nullopt) {
    auto config = parse(afd_object, expected_role);
    EXPECT_TRUE(config.isOk()) << afd_object << " → " << config.status().toString();
    return config.isOk() ? config.value() : AfdConfig{};
}

std::string parseError(const std::string& afd_object, std::optional<Role> expected_role = std::nullopt) {
    auto config = parse(afd_object, expected_role);
    EXPECT_FALSE(config.isOk()) << afd_object << " was accepted";
    if (config.isOk()) return "";
    EXPECT_EQ(config.status().code(), core::StatusCode::kInvalidArgument) << config.status().toString();
    return config.status().message();
}

// A file under the test temp dir, removed at scope exit.
class TempFile {
public:
    explicit TempFile(const std::string& contents) {
        static int counter = 0;
        path_ = testing::TempDir() + "afd_config_test_" + std::to_string(::getpid()) + "_" + std::to_string(counter++) +
                ".json";
        std::ofstream(path_) << contents;
    }
    ~TempFile() { std::remove(path_.c_str()); }
    TempFile(const TempFile&) = delete;
    TempFile& operator=(const TempFile&) = delete;
    const std::string& path() const { return path_; }

private:
    std::string path_;
};

TEST(AfdConfig, EmptyObjectGivesTheDefaults) {
    AfdConfig config = parseOk("{}");
    EXPECT_EQ(config.role, Role::kAttention);
    EXPECT_EQ(config.connector, ConnectorKind::kTcp);
    EXPECT_EQ(config.host, "127.0.0.1");
    EXPECT_EQ(config.port, 1239);
    EXPECT_EQ(config.num_attention_ranks, 1);
    EXPECT_EQ(config.num_ffn_ranks, 1);
    EXPECT_TRUE(config.compute_gate_on_attention);
    EXPECT_EQ(config.mode(), AfdMode::kM2n);
    EXPECT_EQ(config.max_num_tokens, 8192);
    EXPECT_EQ(config.connect_timeout_s, 120);
    EXPECT_EQ(config.step_timeout_s, 60);
    EXPECT_FALSE(config.connector_extra_config.bind_host.has_value());
    EXPECT_FALSE(config.connector_extra_config.advertise_host.has_value());
}

TEST(AfdConfig, ParsesEveryKey) {
    AfdConfig config = parseOk(R"({"role": "ffn", "connector": "nccl", "host": "10.0.0.7", "port": 4000,
        "num_attention_ranks": 3, "num_ffn_ranks": 2, "compute_gate_on_attention": false, "max_num_tokens": 512,
        "connect_timeout_s": 5, "step_timeout_s": 7, "connector_extra_config": {}})");
    EXPECT_EQ(config.role, Role::kFfn);
    EXPECT_EQ(config.connector, ConnectorKind::kNccl);
    EXPECT_EQ(config.host, "10.0.0.7");
    EXPECT_EQ(config.port, 4000);
    EXPECT_EQ(config.num_attention_ranks, 3);
    EXPECT_EQ(config.num_ffn_ranks, 2);
    EXPECT_FALSE(config.compute_gate_on_attention);
    EXPECT_EQ(config.mode(), AfdMode::kP2p);
    EXPECT_EQ(config.max_num_tokens, 512);
    EXPECT_EQ(config.connect_timeout_s, 5);
    EXPECT_EQ(config.step_timeout_s, 7);
    EXPECT_EQ(config.connector_extra_config, ConnectorExtraConfig{});
    EXPECT_EQ(parseOk(R"({"connector": "cuda_ipc"})").connector, ConnectorKind::kCudaIpc);
}

TEST(AfdConfig, LegacyAliasesAreAccepted) {
    AfdConfig config = parseOk(R"({"afd_role": "ffn", "afd_connector": "cuda_ipc", "afd_host": "h", "afd_port": 77})");
    EXPECT_EQ(config.role, Role::kFfn);
    EXPECT_EQ(config.connector, ConnectorKind::kCudaIpc);
    EXPECT_EQ(config.host, "h");
    EXPECT_EQ(config.port, 77);
}

TEST(AfdConfig, AliasTogetherWithCanonicalKeyIsRejectedNamingBoth) {
    for (const auto& [canonical, alias, value] :
         std::vector<std::tuple<std::string, std::string, std::string>>{{"role", "afd_role", R"("ffn")"},
                                                                        {"connector", "afd_connector", R"("tcp")"},
                                                                        {"host", "afd_host", R"("h")"},
                                                                        {"port", "afd_port", "5"}}) {
        const std::string message =
            parseError(fmt::format(R"({{"{}": {}, "{}": {}}})", canonical, value, alias, value));
        EXPECT_THAT(message, HasSubstr(fmt::format("duplicate AFD config field for '{}'", canonical)));
        EXPECT_THAT(message, HasSubstr(fmt::format("alias '{}'", alias)));
        EXPECT_THAT(message, HasSubstr(fmt::format("canonical key '{}'", canonical)));
    }
}

TEST(AfdConfig, UnknownFieldIsRejectedWithTheHint) {
    EXPECT_EQ(parseError(R"({"x": 1})"),
              "test: unknown AFD config field 'x'; put connector-specific values under 'connector_extra_config'");
    // Keys of older configurations that must not be silently ignored.
    for (const char* key : {"enabled", "afd_role_rank", "num_attention_servers", "num_ffn_servers", "afd_server_rank",
                            "afd_extra_config", "extra_config", "async_dp", "async"}) {
        EXPECT_THAT(parseError(fmt::format(R"({{"{}": 1}})", key)),
                    HasSubstr(fmt::format("unknown AFD config field '{}'", key)));
    }
}

TEST(AfdConfig, BoolsCoerceFromBoolsZeroOneAndWords) {
    const std::vector<std::pair<std::string, bool>> accepted = {
        {"true", true},       {"false", false},   {"1", true},         {"0", false},
        {R"("1")", true},     {R"("0")", false},  {R"("TRUE")", true}, {R"("False")", false},
        {R"(" yes ")", true}, {R"("No")", false}, {R"("on")", true},   {R"("OFF ")", false},
    };
    for (const auto& [text, expected] : accepted) {
        AfdConfig config = parseOk(fmt::format(R"({{"compute_gate_on_attention": {}}})", text));
        EXPECT_EQ(config.compute_gate_on_attention, expected) << text;
    }
    for (const char* text : {"2", "-1", "1.0", R"("maybe")", R"("")", "null", "[]", "{}"}) {
        const std::string message = parseError(fmt::format(R"({{"compute_gate_on_attention": {}}})", text));
        EXPECT_THAT(message, HasSubstr("afd.compute_gate_on_attention must be a boolean")) << text;
    }
}

TEST(AfdConfig, IntsCoerceFromIntegersAndIntegerStrings) {
    EXPECT_EQ(parseOk(R"({"port": 2000})").port, 2000);
    EXPECT_EQ(parseOk(R"({"port": "2001"})").port, 2001);
    EXPECT_EQ(parseOk(R"({"port": " 2002 "})").port, 2002);
    EXPECT_EQ(parseOk(R"({"max_num_tokens": "+64"})").max_num_tokens, 64);
    for (const char* text : {"true", "false", "1.5", "2000.0", R"("12a")", R"("")", R"("1.5")", "null", "[1]",
                             R"("+-5")", R"("+")", R"("++5")", R"("-+5")"}) {
        const std::string message = parseError(fmt::format(R"({{"num_ffn_ranks": {}}})", text));
        EXPECT_THAT(message, HasSubstr("afd.num_ffn_ranks must be an integer")) << text;
    }
    EXPECT_THAT(parseError(R"({"max_num_tokens": 18446744073709551615})"), HasSubstr("64-bit signed range"));
}

TEST(AfdConfig, CountsMustBePositiveBeforeTheTopologyRule) {
    // p2p with F = 0 would also break A >= F; positivity is what gets reported.
    const std::string message = parseError(R"({"compute_gate_on_attention": false, "num_ffn_ranks": 0})");
    EXPECT_THAT(message, HasSubstr("afd.num_ffn_ranks must be in [1, 65536], got 0"));
    EXPECT_THAT(parseError(R"({"num_attention_ranks": -2})"),
                HasSubstr("afd.num_attention_ranks must be in [1, 65536], got -2"));
    EXPECT_THAT(parseError(R"({"num_attention_ranks": 70000})"),
                HasSubstr("afd.num_attention_ranks must be in [1, 65536], got 70000"));
}

TEST(AfdConfig, P2pNeedsAtLeastAsManyAttentionAsFfnRanks) {
    const std::string message =
        parseError(R"({"compute_gate_on_attention": false, "num_attention_ranks": 2, "num_ffn_ranks": 3})");
    EXPECT_THAT(message, HasSubstr("num_attention_ranks >= num_ffn_ranks"));
    EXPECT_THAT(message, HasSubstr("got 2 < 3"));
    // Not divisible is fine in p2p, and m2n takes any counts.
    parseOk(R"({"compute_gate_on_attention": false, "num_attention_ranks": 3, "num_ffn_ranks": 2})");
    parseOk(R"({"compute_gate_on_attention": true, "num_attention_ranks": 1, "num_ffn_ranks": 3})");
}

TEST(AfdConfig, ExpectedRoleFillsAnAbsentRoleAndRejectsAnother) {
    EXPECT_EQ(parseOk("{}", Role::kFfn).role, Role::kFfn);
    EXPECT_EQ(parseOk(R"({"role": "ffn"})", Role::kFfn).role, Role::kFfn);
    EXPECT_EQ(parseOk(R"({"afd_role": "attention"})", Role::kAttention).role, Role::kAttention);
    const std::string message = parseError(R"({"role": "attention"})", Role::kFfn);
    EXPECT_THAT(message, HasSubstr("afd.role is 'attention'"));
    EXPECT_THAT(message, HasSubstr("'ffn' role"));
    EXPECT_THAT(parseError(R"({"role": "expert"})"), HasSubstr("afd.role must be 'attention' or 'ffn', got 'expert'"));
    EXPECT_THAT(parseError(R"({"role": 1})"), HasSubstr("afd.role must be a string"));
}

TEST(AfdConfig, ConnectorMustBeKnown) {
    EXPECT_THAT(parseError(R"({"connector": "P2pNcclAFDConnector"})"),
                HasSubstr("afd.connector must be one of tcp, cuda_ipc, nccl, got 'P2pNcclAFDConnector'"));
    EXPECT_THAT(parseError(R"({"afd_connector": 3})"), HasSubstr("afd.afd_connector must be a string"));
}

TEST(AfdConfig, HostMustBeANonEmptyString) {
    EXPECT_THAT(parseError(R"({"host": ""})"), HasSubstr("afd.host must be a non-empty string"));
    EXPECT_THAT(parseError(R"({"host": 127})"), HasSubstr("afd.host must be a string"));
}

TEST(AfdConfig, PortMustBeInRange) {
    EXPECT_EQ(parseOk(R"({"port": 65535})").port, 65535);
    EXPECT_EQ(parseOk(R"({"port": 1})").port, 1);
    for (const char* port : {"0", "65536", "-1", "4294968535"}) {
        EXPECT_THAT(parseError(fmt::format(R"({{"port": {}}})", port)),
                    HasSubstr("afd.port must be in [1, 65535], got "))
            << port;
    }
    EXPECT_THAT(parseError(R"({"afd_port": 0})"), HasSubstr("afd.afd_port must be in [1, 65535], got 0"));
}

TEST(AfdConfig, SizesAndTimeoutsMustBePositiveAndBounded) {
    EXPECT_THAT(parseError(R"({"max_num_tokens": 0})"), HasSubstr("afd.max_num_tokens must be in [1, 1048576]"));
    EXPECT_THAT(parseError(R"({"max_num_tokens": 1048577})"), HasSubstr("afd.max_num_tokens must be in"));
    EXPECT_THAT(parseError(R"({"connect_timeout_s": 0})"), HasSubstr("afd.connect_timeout_s must be in [1, "));
    EXPECT_THAT(parseError(R"({"step_timeout_s": -5})"), HasSubstr("afd.step_timeout_s must be in [1, "));
}

TEST(AfdConfig, TcpExtraConfigAcceptsBindAndAdvertiseHost) {
    AfdConfig config = parseOk(R"({"connector_extra_config": {"bind_host": "0.0.0.0", "advertise_host": "node7"}})");
    EXPECT_EQ(config.connector_extra_config.bind_host, "0.0.0.0");
    EXPECT_EQ(config.connector_extra_config.advertise_host, "node7");
}

TEST(AfdConfig, ExtraConfigRejectsKeysTheConnectorDoesNotTake) {
    const std::string tcp = parseError(R"({"connector_extra_config": {"ring_depth": 4}})");
    EXPECT_THAT(tcp, HasSubstr("'ring_depth'"));
    EXPECT_THAT(tcp, HasSubstr("connector 'tcp'"));
    for (const char* connector : {"nccl", "cuda_ipc"}) {
        const std::string message = parseError(
            fmt::format(R"({{"connector": "{}", "connector_extra_config": {{"bind_host": "x"}}}})", connector));
        EXPECT_THAT(message, HasSubstr("'bind_host'"));
        EXPECT_THAT(message, HasSubstr(fmt::format("connector '{}'", connector)));
    }
    EXPECT_THAT(parseError(R"({"connector_extra_config": []})"),
                HasSubstr("afd.connector_extra_config must be an object"));
    EXPECT_THAT(parseError(R"({"connector_extra_config": {"bind_host": 1}})"),
                HasSubstr("afd.connector_extra_config.bind_host must be a string"));
    EXPECT_THAT(parseError(R"({"connector_extra_config": {"advertise_host": ""}})"),
                HasSubstr("afd.connector_extra_config.advertise_host must be a non-empty string"));
}

TEST(AfdConfig, MalformedJsonAndRepeatedKeysAreRejected) {
    EXPECT_THAT(parseError(R"({"port": )"), HasSubstr("test: not valid JSON"));
    EXPECT_THAT(parseError(R"({"port": 1, "port": 2})"), HasSubstr("key 'port' appears twice"));
    EXPECT_THAT(parseError("[]"), HasSubstr("the afd value must be a JSON object"));
}

std::string nestedArrays(size_t levels) { return std::string(levels, '[') + std::string(levels, ']'); }

TEST(AfdConfig, DeepNestingIsRejectedWithoutExhaustingTheStack) {
    // 1 MB, the most an --afd-config file may hold. Such values used to be dumped into the error message, one
    // stack frame per level, which crashed the process.
    constexpr size_t kLevels = 500'000;
    auto wrapped = parseAdditionalConfig(R"({"afd": )" + nestedArrays(kLevels) + "}", Role::kFfn);
    ASSERT_FALSE(wrapped.isOk());
    EXPECT_EQ(wrapped.status().message(),
              "--additional-config: objects and arrays are nested more than 64 levels deep");
    EXPECT_THAT(parseError(R"({"port": )" + nestedArrays(kLevels) + "}"),
                HasSubstr("test: objects and arrays are nested more than 64 levels deep"));
}

TEST(AfdConfig, NestingLimitIsSixtyFourLevels) {
    // The afd object is the first level, so 63 arrays under it are the deepest accepted nesting.
    EXPECT_THAT(parseError(R"({"port": )" + nestedArrays(63) + "}"), HasSubstr("afd.port must be an integer"));
    EXPECT_THAT(parseError(R"({"port": )" + nestedArrays(64) + "}"), HasSubstr("nested more than 64 levels deep"));
}

TEST(AfdConfig, ValidateStatesARangeRuleAsParsingDoes) {
    AfdConfig config;
    config.port = 0;
    EXPECT_EQ("test: " + config.validate().message(), parseError(R"({"port": 0})"));
    config = AfdConfig{};
    config.num_ffn_ranks = 70000;
    EXPECT_EQ("test: " + config.validate().message(), parseError(R"({"num_ffn_ranks": 70000})"));
}

TEST(AfdConfig, ValidateChecksAStructBuiltInCode) {
    AfdConfig config;
    EXPECT_TRUE(config.validate().isOk());
    EXPECT_TRUE(config.validate(Role::kAttention).isOk());
    EXPECT_FALSE(config.validate(Role::kFfn).isOk());
    config.host.clear();
    EXPECT_THAT(config.validate().message(), HasSubstr("afd.host"));
    config = AfdConfig{};
    config.connector = ConnectorKind::kNccl;
    config.connector_extra_config.bind_host = "0.0.0.0";
    EXPECT_THAT(config.validate().message(), HasSubstr("not accepted by connector 'nccl'"));
    config = AfdConfig{};
    config.compute_gate_on_attention = false;
    config.num_ffn_ranks = 2;
    EXPECT_FALSE(config.validate().isOk());
    EXPECT_THROW((void)config.topology(), core::Error);
}

TEST(AfdConfig, TopologyFollowsCountsAndMode) {
    AfdConfig config = parseOk(R"({"compute_gate_on_attention": false, "num_attention_ranks": 3, "num_ffn_ranks": 2})");
    Topology topology = config.topology();
    EXPECT_EQ(topology.mode(), AfdMode::kP2p);
    EXPECT_EQ(topology.attentionPeersOfFfn(0), (std::vector<int>{0, 1}));
}

TEST(AfdConfig, ToJsonListsTheEffectiveConfigAndRoundTrips) {
    EXPECT_EQ(parseOk("{}").toJson(),
              R"({"role":"attention","connector":"tcp","host":"127.0.0.1","port":1239,"num_attention_ranks":1,)"
              R"("num_ffn_ranks":1,"compute_gate_on_attention":true,"max_num_tokens":8192,"connect_timeout_s":120,)"
              R"("step_timeout_s":60,"connector_extra_config":{}})");
    AfdConfig config = parseOk(R"({"afd_role": "ffn", "port": "9000", "num_attention_ranks": 4, "num_ffn_ranks": 3,
        "compute_gate_on_attention": "off", "connector_extra_config": {"advertise_host": "a"}})");
    auto again = parse(config.toJson());
    ASSERT_TRUE(again.isOk()) << again.status().toString();
    EXPECT_EQ(again.value(), config);
}

TEST(AfdConfig, FingerprintCoversTopologyFieldsOnly) {
    const AfdConfig base = parseOk(R"({"num_attention_ranks": 2})");
    EXPECT_EQ(base.fingerprint(), "tcp/m2n/2A1F/t8192");
    // Fields that may differ between ranks keep the fingerprint.
    EXPECT_EQ(parseOk(R"({"num_attention_ranks": 2, "role": "ffn", "host": "x", "port": 5, "step_timeout_s": 1,
        "connect_timeout_s": 2, "connector_extra_config": {"bind_host": "0.0.0.0"}})")
                  .fingerprint(),
              base.fingerprint());
    EXPECT_EQ(parseOk(R"({"num_attention_ranks": 2, "connector": "nccl"})").fingerprint(), "nccl/m2n/2A1F/t8192");
    EXPECT_EQ(parseOk(R"({"num_attention_ranks": 2, "compute_gate_on_attention": false})").fingerprint(),
              "tcp/p2p/2A1F/t8192");
    EXPECT_EQ(parseOk(R"({"num_attention_ranks": 2, "num_ffn_ranks": 2})").fingerprint(), "tcp/m2n/2A2F/t8192");
    EXPECT_EQ(parseOk(R"({"num_attention_ranks": 2, "max_num_tokens": 64})").fingerprint(), "tcp/m2n/2A1F/t64");
}

TEST(AdditionalConfig, AfdIsTheOnlyAcceptedKey) {
    auto config = parseAdditionalConfig(R"({"afd": {"role": "ffn", "port": 5000}})", Role::kFfn);
    ASSERT_TRUE(config.isOk()) << config.status().toString();
    ASSERT_TRUE(config->has_value());
    EXPECT_EQ((*config)->port, 5000);

    auto other = parseAdditionalConfig(R"({"afd": {}, "kv_transfer": {}})", std::nullopt);
    ASSERT_FALSE(other.isOk());
    EXPECT_EQ(other.status().message(),
              "--additional-config: unknown key 'kv_transfer'; the only accepted key is 'afd'");
}

TEST(AdditionalConfig, WithoutAfdKeyAfdIsOff) {
    auto config = parseAdditionalConfig("{}", Role::kFfn);
    ASSERT_TRUE(config.isOk()) << config.status().toString();
    EXPECT_FALSE(config->has_value());
}

TEST(AdditionalConfig, MustBeAnObjectHoldingAnObject) {
    for (const char* text : {"[]", "3", R"("afd")", "null"}) {
        auto config = parseAdditionalConfig(text, std::nullopt);
        ASSERT_FALSE(config.isOk()) << text;
        EXPECT_THAT(config.status().message(), HasSubstr("--additional-config: must be a JSON object")) << text;
    }
    auto not_object = parseAdditionalConfig(R"({"afd": "ffn"})", std::nullopt);
    ASSERT_FALSE(not_object.isOk());
    EXPECT_THAT(not_object.status().message(), HasSubstr("the afd value must be a JSON object, got string \"ffn\""));
    auto bad_json = parseAdditionalConfig(R"({"afd": {)", std::nullopt);
    ASSERT_FALSE(bad_json.isOk());
    EXPECT_THAT(bad_json.status().message(), HasSubstr("--additional-config: not valid JSON"));
}

TEST(AdditionalConfig, FieldErrorsNameTheFlag) {
    auto config = parseAdditionalConfig(R"({"afd": {"port": 0}})", std::nullopt);
    ASSERT_FALSE(config.isOk());
    EXPECT_EQ(config.status().message(), "--additional-config: afd.port must be in [1, 65535], got 0");
}

TEST(AfdConfigFile, AcceptsTheWrappedAndTheBareForm) {
    TempFile wrapped(R"({"afd": {"num_ffn_ranks": 2, "connector": "nccl"}})");
    auto from_wrapped = loadAfdConfigFile(wrapped.path(), Role::kFfn);
    ASSERT_TRUE(from_wrapped.isOk()) << from_wrapped.status().toString();
    EXPECT_EQ(from_wrapped->num_ffn_ranks, 2);
    EXPECT_EQ(from_wrapped->connector, ConnectorKind::kNccl);
    EXPECT_EQ(from_wrapped->role, Role::kFfn);

    TempFile bare(R"({"num_ffn_ranks": 2, "connector": "nccl", "role": "ffn"})");
    auto from_bare = loadAfdConfigFile(bare.path(), std::nullopt);
    ASSERT_TRUE(from_bare.isOk()) << from_bare.status().toString();
    EXPECT_EQ(from_bare.value(), from_wrapped.value());
}

TEST(AfdConfigFile, ErrorsNameTheFile) {
    const std::string missing = testing::TempDir() + "afd_config_test_no_such_file.json";
    auto absent = loadAfdConfigFile(missing, std::nullopt);
    ASSERT_FALSE(absent.isOk());
    EXPECT_EQ(absent.status().code(), core::StatusCode::kIoError);
    EXPECT_THAT(absent.status().message(), HasSubstr(missing));

    TempFile bad_json("{not json");
    auto parsed = loadAfdConfigFile(bad_json.path(), std::nullopt);
    ASSERT_FALSE(parsed.isOk());
    EXPECT_THAT(parsed.status().message(), HasSubstr(bad_json.path()));
    EXPECT_THAT(parsed.status().message(), HasSubstr("not valid JSON"));

    TempFile bad_field(R"({"afd": {"num_ffn_ranks": "two"}})");
    auto field = loadAfdConfigFile(bad_field.path(), std::nullopt);
    ASSERT_FALSE(field.isOk());
    EXPECT_THAT(field.status().message(), HasSubstr(bad_field.path()));
    EXPECT_THAT(field.status().message(), HasSubstr("afd.num_ffn_ranks must be an integer"));

    TempFile extra_key(R"({"afd": {}, "other": 1})");
    auto wrapper = loadAfdConfigFile(extra_key.path(), std::nullopt);
    ASSERT_FALSE(wrapper.isOk());
    EXPECT_THAT(wrapper.status().message(), HasSubstr(extra_key.path()));
    EXPECT_THAT(wrapper.status().message(), HasSubstr("unknown key 'other'; the only accepted key is 'afd'"));

    TempFile array("[1, 2]");
    auto not_object = loadAfdConfigFile(array.path(), std::nullopt);
    ASSERT_FALSE(not_object.isOk());
    EXPECT_THAT(not_object.status().message(), HasSubstr(array.path()));
    EXPECT_THAT(not_object.status().message(), HasSubstr("must hold a JSON object"));
}

TEST(ResolveAfdConfig, BothFlagsAreAnError) {
    TempFile file("{}");
    auto config = resolveAfdConfig(std::string(R"({"afd": {}})"), file.path(), std::nullopt);
    ASSERT_FALSE(config.isOk());
    EXPECT_THAT(config.status().message(), HasSubstr("--additional-config and --afd-config were both given"));
}

TEST(ResolveAfdConfig, EitherFlagOrNone) {
    auto none = resolveAfdConfig(std::nullopt, std::nullopt, Role::kFfn);
    ASSERT_TRUE(none.isOk());
    EXPECT_FALSE(none->has_value());

    auto from_flag = resolveAfdConfig(std::string(R"({"afd": {"port": 3000}})"), std::nullopt, Role::kFfn);
    ASSERT_TRUE(from_flag.isOk()) << from_flag.status().toString();
    ASSERT_TRUE(from_flag->has_value());
    EXPECT_EQ((*from_flag)->port, 3000);
    EXPECT_EQ((*from_flag)->role, Role::kFfn);

    TempFile file(R"({"port": 3001})");
    auto from_file = resolveAfdConfig(std::nullopt, file.path(), Role::kAttention);
    ASSERT_TRUE(from_file.isOk()) << from_file.status().toString();
    ASSERT_TRUE(from_file->has_value());
    EXPECT_EQ((*from_file)->port, 3001);
}

TEST(AfdConfig, FuzzSeedCorpusIsAccepted) {
    // The seeds start the fuzzer from valid configs: wrapped_* as --additional-config of an FFN rank, the others
    // as the bare afd object. A seed the parsers reject would only explore error paths.
    const std::filesystem::path dir = std::filesystem::path(AFD_TEST_DATA) / "../../fuzz/corpus/afd_config";
    size_t seeds = 0;
    for (const auto& entry : std::filesystem::directory_iterator(dir)) {
        std::ifstream in(entry.path(), std::ios::binary);
        const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
        const std::string name = entry.path().filename().string();
        if (name.rfind("wrapped_", 0) == 0) {
            const auto config = parseAdditionalConfig(text, Role::kFfn);
            ASSERT_TRUE(config.isOk()) << name << ": " << config.status().toString();
            EXPECT_TRUE(config->has_value()) << name;
        } else {
            const auto config = AfdConfig::fromJson(text, std::nullopt, name);
            EXPECT_TRUE(config.isOk()) << config.status().toString();
        }
        ++seeds;
    }
    EXPECT_GE(seeds, 3u);
}

}  // namespace
}  // namespace afd::transport
