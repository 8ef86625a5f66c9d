// The `afd` executable: a thin dispatcher over subcommands (commands.h).
#include <CLI/CLI.hpp>

#include <cstdlib>
#include <exception>
#include <string>

#include "cli/commands.h"
#include "core/exit_codes.h"
#include "core/logging.h"

namespace {

// The log level: --log-level when given (before or after the subcommand), else $AFD_LOG_LEVEL, else info.
void applyLogLevel(const CLI::Option& flag, const std::string& value) {
    std::string text = value;
    std::string source = "--log-level";
    if (flag.count() == 0) {
        const char* env = std::getenv("AFD_LOG_LEVEL");
        text = env != nullptr && *env != '\0' ? env : "info";
        source = "AFD_LOG_LEVEL";
    }
    afd::core::LogLevel level;
    if (!afd::core::parseLogLevel(text, &level)) {
        throw CLI::ValidationError(source, "\"" + text + "\" is not one of debug, info, warn, error, off");
    }
    afd::core::setLogLevel(level);
}

}  // namespace

int main(int argc, char** argv) {
    CLI::App app{"afd: Attention-FFN disaggregated serving of Qwen3-MoE models"};
    app.require_subcommand(1);
    // Options of this app (--log-level) are accepted after the subcommand too: subcommands pass what they do not know
    // up to their parent. Set before the subcommands are added, which inherit it.
    app.fallthrough();
    app.set_version_flag("--version", "afd 0.1.0");
    std::string log_level;
    CLI::Option* log_flag = app.add_option("--log-level", log_level,
                                           "debug, info, warn, error or off, anywhere on the command line (default: "
                                           "$AFD_LOG_LEVEL, else info)");
    // Runs once every argument is parsed, before the subcommand's callback.
    app.parse_complete_callback([&] { applyLogLevel(*log_flag, log_level); });

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
