// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// `trainbench-engine ladder` and `trainbench-engine advise`: their options
// and what they do, kept out of main.cpp, which only registers them.
#include <atomic>
#include <functional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

namespace tb {
class StoreSink;
}

namespace tb::cli {

// What a parsed invocation does with the run store: the default store's
// folder is made only for one that records runs.
enum class StoreUse { None, Reads, Records };

struct Command {
  CLI::App* app;                          // the subcommand, to ask parsed()
  std::function<StoreUse()> store_use;    // once parsed
  std::function<int(const std::string& db)> run;  // its exit code
};

// The engine's stop signals as a command that trains sees them: the flag the
// first SIGINT/SIGTERM sets, how to start listening (a long command calls it),
// and where the training run's store sink is registered (nullptr once it is
// closed), so that a second signal records that run as stopped.
struct Signals {
  const std::atomic<bool>& stop;
  std::function<void()> install;
  std::function<void(StoreSink*)> current_sink;
};

// Adds `ladder` and `advise` to `app`.
std::vector<Command> add_ladder_commands(CLI::App& app, Signals signals);

}  // namespace tb::cli
