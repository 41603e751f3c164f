// The command line of a zeroshard program, with the exit codes the README
// promises: --help (also -h, --helpfull, --helpshort) prints the program's
// usage and every flag it defines, with defaults and help, to stdout, and
// the program exits 0; an unknown flag exits 2 naming the nearest known one
// ("--step: no such flag; did you mean --steps?"); a value its flag cannot
// take, or a flag without its value, exits 2 with absl's reason. Everything
// else is absl::ParseCommandLine's.
//
//   int main(int argc, char** argv) {
//     const CommandLine c = ParseProgramFlags(argc, argv, "zeroshard-train", kUsage);
//     if (c.exit_code.has_value()) return *c.exit_code;
//     ... c.positional ...
//
// Nothing here exits: the program returns the code.
#ifndef ZEROSHARD_COMMON_COMMAND_LINE_H_
#define ZEROSHARD_COMMON_COMMAND_LINE_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace zeroshard {

struct CommandLine {
  // argv[0] and the arguments that are not flags, as ParseCommandLine
  // returns them.
  std::vector<char*> positional;
  // Set when the program should end now with this code (help printed: 0;
  // a bad flag, said on stderr: 2).
  std::optional<int> exit_code;
  // The flags the command line gave, by name (a --noX as X).
  std::vector<std::string> given;
  bool Given(absl::string_view name) const {
    for (const std::string& g : given) {
      if (g == name) return true;
    }
    return false;
  }
};

// `program` names the program in messages; `usage` is its usage text
// (absl::SetProgramUsageMessage is set to it).
CommandLine ParseProgramFlags(int argc, char** argv, absl::string_view program,
                              absl::string_view usage);

// The candidate nearest to `name` by edit distance, or "" when none is
// near enough to be a likely typo (at most 2 edits, or a third of the
// name's length). For flags and subcommands alike.
std::string NearestName(absl::string_view name,
                        const std::vector<std::string>& candidates);

}  // namespace zeroshard

#endif  // ZEROSHARD_COMMON_COMMAND_LINE_H_
