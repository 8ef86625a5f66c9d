// `afd ffn MODEL --additional-config '{"afd": {"role": "ffn", …}}'`: the standalone FFN service, one process per
// device, ranks from RANK / WORLD_SIZE / LOCAL_RANK (torchrun style) or the flags below.
#include <CLI/CLI.hpp>

#include "cli/commands.h"
#include "ffn/ffn_service.h"

namespace afd::cli {

void addFfnCommand(CLI::App& app, int& exit_code) {
    auto options = std::make_shared<ffn::FfnServiceOptions>();
    CLI::App* cmd = app.add_subcommand("ffn", "Run one FFN rank (routed experts) of an AFD deployment");
    cmd->add_option("model", options->model_dir, "model directory (config.json + safetensors)")->required();
    cmd->add_option("--additional-config", options->additional_config, "JSON with an \"afd\" object");
    cmd->add_option("--afd-config", options->afd_config_file, "a file holding the AFD config");
    cmd->add_option("--rank", options->rank, "FFN rank (default: $RANK)");
    cmd->add_option("--world-size", options->world_size, "FFN world size (default: $WORLD_SIZE)");
    cmd->add_option("--local-rank", options->local_rank, "rank on this host (default: $LOCAL_RANK, else the rank)");
    cmd->add_option("--admin-host", options->admin_host, "admin HTTP bind address")->default_val("127.0.0.1");
    cmd->add_option("--admin-port", options->admin_port, "admin HTTP port (0 = ephemeral, -1 = none)")
        ->default_val(0)
        ->check(CLI::Range(-1, 65535));
    cmd->add_option("--admin-port-file", options->admin_port_file, "write the bound admin port here");
    cmd->add_option("--admin-token", options->admin_token,
                    "token POST /stop must carry (Authorization: Bearer TOKEN); default $AFD_ADMIN_TOKEN; required "
                    "when --admin-host is not loopback");
    cmd->add_option("--status-file", options->status_file, "write a JSON exit report here");
    cmd->add_option("--device", options->device, "cpu or cuda")->default_val("cpu");
    cmd->add_option("--device-ids", options->device_ids, "GPUs indexed by LOCAL_RANK, e.g. 2,3");
    cmd->add_flag("--enforce-eager", options->enforce_eager,
                  "no CUDA graphs: every layer and step is enqueued call by call (cuda)");
    auto* random =
        cmd->add_flag("--random-weights", options->random_weights,
                      "draw the weights gen-model writes on the GPU instead of loading them (MODEL needs only "
                      "config.json)");
    cmd->add_option("--weights-seed", options->weights_seed, "seed of --random-weights (gen-model's --seed)")
        ->needs(random);
    cmd->add_flag("--enable-dbo", options->enable_dbo,
                  "serve the two stages of a dual-batch-overlap step on two GPU lanes at once (device connectors)");
    cmd->add_option("--shutdown-timeout", options->shutdown_timeout_s, "seconds to wait for the step loop at stop")
        ->default_val(15);
    auto sessions = std::make_shared<std::string>("forever");
    cmd->add_option("--serve-sessions", *sessions,
                    "forever: after each session (every attention rank left, or one was lost) rejoin the rendezvous "
                    "for the next, until stopped; once: serve one session, then wait to be stopped")
        ->check(CLI::IsMember({"once", "forever"}))
        ->default_val("forever");
    cmd->callback([options, sessions, &exit_code] {
        options->serve_sessions = *ffn::parseServeSessions(*sessions);
        exit_code = ffn::runFfnService(*options);
    });
}

}  // namespace afd::cli
