// Subcommands of the `afd` executable. Each registers its flags on the parent app and returns the code
// to exit with through the callback it installs. Exit codes: see core/exit_codes.h.
#pragma once

namespace CLI {
class App;
}

namespace afd::cli {

// Each function adds one subcommand to `app`; `exit_code` receives the subcommand's exit code.
void addGenModelCommand(CLI::App& app, int& exit_code);
void addGenerateCommand(CLI::App& app, int& exit_code);
void addFfnCommand(CLI::App& app, int& exit_code);
void addLaunchCommand(CLI::App& app, int& exit_code);
void addTokenizeCommand(CLI::App& app, int& exit_code);
void addServeCommand(CLI::App& app, int& exit_code);
// The README's main job: `afd serve` on the embedded default, one chat request and one streaming completion.
void addQuickstartCommand(CLI::App& app, int& exit_code);
// `afd bench` (moe, router, stream, generate): defined by the lab (bench/lab/cli) when afd is built with it
// (AFD_BUILD_BENCH), else by cmd_bench_unavailable.cpp, whose `bench` says so.
void addBenchCommand(CLI::App& app, int& exit_code);

}  // namespace afd::cli
