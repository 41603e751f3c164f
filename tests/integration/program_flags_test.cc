// Every program's command line as the README promises it
// (common/command_line.h): --help prints the usage and the program's flags
// to stdout and exits 0; an unknown flag exits 2 naming the nearest known
// one; a value its flag cannot take, or a flag without its value, exits 2;
// zeroshard-ctl's unknown subcommand exits 2 naming the nearest. Each row
// runs the program as a process; none of these starts a server or worker.
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "tests/integration/local_cluster.h"

namespace zeroshard::testing {
namespace program_flags_test {

struct Row {
  std::string program;
  std::vector<std::string> args;
  int code;
  std::string out;  // stdout contains it ("" = anything)
  std::string err;  // stderr contains it ("" = anything)
};

TEST(ProgramFlagsTest, HelpAndBadFlagsExitAsTheReadmeSays) {
  const std::vector<Row> rows = {
      // --help: the usage line and the program's own flags, exit 0.
      {"zeroshard-train", {"--help"}, 0, "--max_restarts", ""},
      {"zeroshard-train", {"-h"}, 0, "Usage: zeroshard-train --config=FILE", ""},
      {"zeroshard-train", {"--helpfull"}, 0, "--resume", ""},
      {"zeroshard-server", {"--help"}, 0, "--listen", ""},
      {"zeroshard-worker", {"--help"}, 0, "--world_size", ""},
      {"zeroshard-ctl", {"--help"}, 0, "Usage: zeroshard-ctl", ""},
      {"zeroshard-ctl", {"inspect", "--help"}, 0, "--tensor", ""},
      // Unknown flags: exit 2, the nearest known name.
      {"zeroshard-train", {"--step=5"}, 2, "",
       "--step: no such flag; did you mean --steps?"},
      {"zeroshard-server", {"--lisen=127.0.0.1:0"}, 2, "", "did you mean --listen?"},
      {"zeroshard-worker", {"--rnak=0"}, 2, "", "did you mean --rank?"},
      {"zeroshard-ctl", {"inspect", "--servres=x"}, 2, "", "did you mean --servers?"},
      {"zeroshard-train", {"--zzzzzzzz"}, 2, "", "--zzzzzzzz: no such flag"},
      // Values their flags cannot take, and a missing value.
      {"zeroshard-train", {"--steps=abc"}, 2, "", "--steps=abc"},
      {"zeroshard-train", {"--quiet=maybe"}, 2, "", "--quiet=maybe"},
      {"zeroshard-server", {"--server_index=-x"}, 2, "", "--server_index=-x"},
      {"zeroshard-train", {"--config"}, 2, "", "--config needs a value"},
      // An --out that is a file (here the README; nothing is written).
      {"zeroshard-train",
       {"--config=examples/gpt-small.json", "--steps=2", "--out=README.md", "--quiet"},
       2, "", "--out=README.md is a file, not a directory"},
      // Copies of each slot: 1 or 2, and 2 only with 2 servers or more.
      {"zeroshard-ctl", {"estimate", "--params=7e9", "--servers=4", "--replicas=3"},
       2, "", "--replicas must be 1 or 2, got 3"},
      {"zeroshard-ctl", {"estimate", "--params=7e9", "--servers=1", "--replicas=2"},
       2, "", "--replicas 2 needs at least 2 servers, got 1"},
      {"zeroshard-ctl", {"smoke", "--servers=127.0.0.1:1", "--replicas=3"}, 2, "",
       "replicas 3 with 1 servers: it must be 1, or 2 with at least 2 servers"},
      // ctl's subcommands.
      {"zeroshard-ctl", {"expotr"}, 2, "", "unknown command 'expotr'; did you mean 'export'?"},
      {"zeroshard-ctl", {"frobnicate"}, 2, "", "unknown command 'frobnicate'"},
  };
  for (const Row& r : rows) {
    SCOPED_TRACE(r.program + " " + (r.args.empty() ? "" : r.args[0]));
    absl::StatusOr<CommandResult> c =
        RunBinary(r.program, r.args, absl::Seconds(30));
    ASSERT_TRUE(c.ok()) << c.status();
    EXPECT_TRUE(c->status.exited) << "signal " << c->status.signal;
    EXPECT_EQ(c->status.code, r.code) << c->err;
    EXPECT_TRUE(absl::StrContains(c->out, r.out)) << c->out;
    EXPECT_TRUE(absl::StrContains(c->err, r.err)) << c->err;
    if (r.code == 0) {
      EXPECT_FALSE(absl::StrContains(c->out, "No flags matched")) << c->out;
    }
  }
}

}  // namespace program_flags_test
}  // namespace zeroshard::testing
