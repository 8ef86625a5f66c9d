// The `afd` executable: a thin dispatcher over subcommands (commands.h).
#include <CLI/CLI.hpp>

#include <exception>

#include "cli/commands.h"
#include "core/exit_codes.h"
#include "core/logging.h"

int main(int argc, char** argv) {
    CLI::App app{"afd: Attention-FFN disaggregated serving of Qwen3-MoE models"};
    app.require_subcommand(1);
    app.set_version_flag("--version", "afd 0.1.0");
    std::string log_level = "info";
    app.add_option("--log-level", log_level, "debug, info, warn, error or off")->default_val("info");
    app.parse_complete_callback([&] {
        afd::core::LogLevel level;
        if (!afd::core::parseLogLevel(log_level, &level)) {
            throw CLI::ValidationError("--log-level", "must be one of debug, info, warn, error, off");
        }
        afd::core::setLogLevel(level);
    });

    int exit_code = afd::core::kExitOk;
    afd::cli::addGenModelCommand(app, exit_code);
    afd::cli::addGenerateCommand(app, exit_code);
    afd::cli::addFfnCommand(app, exit_code);
    afd::cli::addLaunchCommand(app, exit_code);
    afd::cli::addBenchCommand(app, exit_code);
    afd::cli::addTokenizeCommand(app, exit_code);
    afd::cli::addServeCommand(app, exit_code);
    afd::cli::addQuickstartCommand(app, exit_code);

    try {
        app.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
        const int code = app.exit(e);
        return code == 0 ? afd::core::kExitOk : afd::core::kExitBadConfig;
    } catch (const std::exception& e) {
        AFD_LOG_ERROR("internal error: {}", e.what());
        return afd::core::kExitInternal;
    }
    return exit_code;
}
