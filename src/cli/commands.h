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
void addBenchCommand(CLI::App& app, int& exit_code);
// `afd bench router` and `afd bench stream`, under the `bench` subcommand that addBenchCommand creates.
void addBenchRouterCommand(CLI::App& bench, int& exit_code);
void addBenchStreamCommand(CLI::App& bench, int& exit_code);

}  // namespace afd::cli
