// The command line's own help beyond CLI11's: an unknown command named with the nearest one, and
// a bash completion script written from the same command tree the parser uses.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace CLI {
class App;
}

namespace rc::controller {

// ARGV's first word that should be a command of APP (or of one of its commands that requires
// one: `lab`, `certs`, `baseline`) and is none, as the message to print: the word, the nearest
// command by edit distance and the list of the visible ones. Nothing when every command word is known (options and
// their values are CLI11's to judge).
std::optional<std::string> unknownCommand(const CLI::App& app, const std::vector<std::string>& args);

// Levenshtein distance, for "did you mean".
size_t editDistance(const std::string& a, const std::string& b);

// A bash completion script for APP: commands, each command's options, fault kinds after
// `inject`, workload kinds after --kind, playbook (.toml) and result (.json) files where a
// command takes them.
std::string bashCompletion(const CLI::App& app);

}  // namespace rc::controller
