// The `afd bench` subcommands (each in its own cmd_bench_*.cpp), added under the `bench` subcommand that
// addBenchCommand (src/cli/commands.h; cmd_bench.cpp) creates. `exit_code` receives the subcommand's exit code.
#pragma once

namespace CLI {
class App;
}

namespace afd::cli {

void addBenchMoeCommand(CLI::App& bench, int& exit_code);
void addBenchRouterCommand(CLI::App& bench, int& exit_code);
void addBenchStreamCommand(CLI::App& bench, int& exit_code);
void addBenchGenerateCommand(CLI::App& bench, int& exit_code);
void addBenchGemmCommand(CLI::App& bench, int& exit_code);
void addBenchTransportCommand(CLI::App& bench, int& exit_code);  // a device connector's round trip
void addBenchServeCommand(CLI::App& bench, int& exit_code);      // a load client for OpenAI-compatible servers

}  // namespace afd::cli
