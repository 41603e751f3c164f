#include "common/command_line.h"

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/flags/commandlineflag.h"
#include "absl/flags/parse.h"
#include "absl/flags/reflection.h"
#include "absl/flags/usage.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/edit_distance.h"

namespace zeroshard {
namespace {

// absl's own flags (parse.cc, usage flags): not the program's.
bool IsAbslFlag(const absl::CommandLineFlag& f) {
  return absl::StrContains(f.Filename(), "absl/");
}

bool IsHelp(absl::string_view name) {
  return name == "help" || name == "helpfull" || name == "helpshort" ||
         name == "h" || name == "?";
}

std::vector<const absl::CommandLineFlag*> ProgramFlags() {
  std::vector<const absl::CommandLineFlag*> out;
  for (const auto& [name, flag] : absl::GetAllFlags()) {
    if (!IsAbslFlag(*flag) && !flag->IsRetired()) out.push_back(flag);
  }
  std::sort(out.begin(), out.end(),
            [](const absl::CommandLineFlag* a, const absl::CommandLineFlag* b) {
              return a->Name() < b->Name();
            });
  return out;
}

void PrintHelp(absl::string_view usage) {
  std::string text = absl::StrCat("Usage: ", usage, "\n\nFlags:\n");
  for (const absl::CommandLineFlag* f : ProgramFlags()) {
    const std::string def = f->DefaultValue();
    absl::StrAppend(&text, "  --", f->Name(),
                    def.empty() ? "" : absl::StrCat(" (default ", def, ")"),
                    "\n      ", f->Help(), "\n");
  }
  std::fputs(text.c_str(), stdout);
  std::fflush(stdout);
}

int Bad(absl::string_view program, const std::string& message) {
  std::fprintf(stderr, "%s: %s (--help lists the flags)\n",
               std::string(program).c_str(), message.c_str());
  return 2;
}

}  // namespace

std::string NearestName(absl::string_view name,
                        const std::vector<std::string>& candidates) {
  std::string best;
  size_t best_d = std::max<size_t>(2, name.size() / 3) + 1;
  for (const std::string& c : candidates) {
    const size_t d = EditDistance(name, c);
    if (d < best_d) {
      best_d = d;
      best = c;
    }
  }
  return best;
}

CommandLine ParseProgramFlags(int argc, char** argv, absl::string_view program,
                              absl::string_view usage) {
  absl::SetProgramUsageMessage(usage);
  CommandLine out;
  bool help = false;
  for (int i = 1; i < argc; ++i) {
    const absl::string_view arg = argv[i];
    if (arg == "--") break;
    if (arg.size() < 2 || arg[0] != '-') continue;  // positional
    absl::string_view body = arg.substr(arg[1] == '-' ? 2 : 1);
    const size_t eq = body.find('=');
    const absl::string_view name = body.substr(0, eq);
    const bool has_value = eq != absl::string_view::npos;
    if (IsHelp(name)) {
      help = true;
      continue;
    }
    absl::CommandLineFlag* flag = absl::FindCommandLineFlag(name);
    bool negated = false;
    if (flag == nullptr && absl::StartsWith(name, "no")) {
      absl::CommandLineFlag* plain = absl::FindCommandLineFlag(name.substr(2));
      if (plain != nullptr && plain->IsOfType<bool>() && !has_value) {
        flag = plain;
        negated = true;
      }
    }
    if (flag == nullptr || flag->IsRetired()) {
      std::vector<std::string> names;
      for (const absl::CommandLineFlag* f : ProgramFlags()) {
        names.emplace_back(f->Name());
      }
      const std::string near = NearestName(name, names);
      out.exit_code = Bad(program, absl::StrCat(
          "--", name, ": no such flag",
          near.empty() ? "" : absl::StrCat("; did you mean --", near, "?")));
      return out;
    }
    out.given.emplace_back(flag->Name());
    if (IsAbslFlag(*flag) || negated) continue;  // absl's own, or --noX
    std::string value;
    if (has_value) {
      value = std::string(body.substr(eq + 1));
    } else if (flag->IsOfType<bool>()) {
      value = "true";
    } else if (i + 1 < argc) {
      value = argv[++i];
    } else {
      out.exit_code = Bad(program, absl::StrCat("--", name, " needs a value"));
      return out;
    }
    // Parsing sets the flag; ParseCommandLine below sets it again from the
    // same text.
    std::string error;
    if (!flag->ParseFrom(value, &error)) {
      out.exit_code = Bad(program, absl::StrCat("--", name, "=", value, ": ",
                                                error));
      return out;
    }
  }
  if (help) {
    PrintHelp(usage);
    out.exit_code = 0;
    return out;
  }
  out.positional = absl::ParseCommandLine(argc, argv);
  return out;
}

}  // namespace zeroshard
