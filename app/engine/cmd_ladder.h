// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// `trainbench-engine ladder` and `trainbench-engine advise`: their options
// and what they do, kept out of main.cpp, which only registers them.
#include <atomic>
#include <functional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

namespace tb::cli {

struct Command {
  CLI::App* app;                          // the subcommand, to ask parsed()
  std::function<int(const std::string& db)> run;  // its exit code
};

// Adds `ladder` and `advise` to `app`. `stop` is the engine's SIGINT/SIGTERM
// flag and install_signals sets it up (a long command calls it).
std::vector<Command> add_ladder_commands(CLI::App& app, const std::atomic<bool>& stop,
                                         std::function<void()> install_signals);

}  // namespace tb::cli
