// `afd bench`: the lab's device benchmarks (bench/lab), registered into the afd executable when it is built with the
// lab (AFD_BUILD_BENCH).
#include <CLI/CLI.hpp>

#include "cli/commands.h"
#include "lab/cli/bench_commands.h"

namespace afd::cli {

void addBenchCommand(CLI::App& app, int& exit_code) {
    CLI::App* bench = app.add_subcommand("bench", "GPU benchmarks, and a load client for OpenAI-compatible servers");
    bench->require_subcommand(1);
    addBenchMoeCommand(*bench, exit_code);
    addBenchRouterCommand(*bench, exit_code);
    addBenchStreamCommand(*bench, exit_code);
    addBenchGenerateCommand(*bench, exit_code);
    addBenchGemmCommand(*bench, exit_code);
    addBenchTransportCommand(*bench, exit_code);
    addBenchServeCommand(*bench, exit_code);
}

}  // namespace afd::cli
