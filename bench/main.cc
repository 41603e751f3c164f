#include <sys/mman.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "bench/bench.h"
#include "common/malloc_tuning.h"

namespace zeroshard::bench {

std::map<std::string, BenchInfo>& Registry() {
  static auto* registry = new std::map<std::string, BenchInfo>();
  return *registry;
}

double MeasureTriadBytesPerSecond(size_t bytes_per_array, int threads,
                                  int reps);

namespace {
bool smoke = false;
}  // namespace

bool Smoke() { return smoke; }

bool ParseUpdateArgs(const std::vector<std::string>& args, const char* name,
                     UpdateArgs* out) {
  out->n = Smoke() ? 1'000'000 : 100'000'000;
  out->bf16 = true;
  out->reps = Smoke() ? 1 : 5;
  for (const std::string& a : args) {
    if (absl::StartsWith(a, "--n=") && absl::SimpleAtoi(a.substr(4), &out->n) &&
        out->n > 0) {
    } else if (a == "--grad=bf16" || a == "--grad=fp32") {
      out->bf16 = a == "--grad=bf16";
    } else if (absl::StartsWith(a, "--reps=") &&
               absl::SimpleAtoi(a.substr(7), &out->reps) && out->reps > 0) {
    } else {
      std::fprintf(stderr,
                   "usage: zeroshard-bench %s [--n=100000000] "
                   "[--grad=bf16|fp32] [--reps=5]\n  bad argument: %s\n",
                   name, a.c_str());
      return false;
    }
  }
  return true;
}
void SetSmoke(bool on) { smoke = on; }

void* AllocHugeBytes(size_t bytes, const char* who) {
  constexpr size_t kAlign = size_t{2} << 20;
  bytes = (bytes + kAlign - 1) / kAlign * kAlign;
  void* p = std::aligned_alloc(kAlign, bytes);
  if (p == nullptr) {
    std::fprintf(stderr, "%s: cannot allocate %zu bytes\n", who, bytes);
    std::exit(1);
  }
  madvise(p, bytes, MADV_HUGEPAGE);
  return p;
}

std::string SelfDir() {
  std::error_code ec;
  auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? "." : exe.parent_path().string();
}

int NoDeviceExitCode() {
  const char* v = std::getenv("ZS_EXPECT_CUDA_DEVICE");
  return v != nullptr && std::string(v) == "1" ? 1 : 0;
}

}  // namespace zeroshard::bench

int main(int argc, char** argv) {
  // The benchmarks stand for worker and server processes, whose mains tune
  // glibc malloc the same way.
  zeroshard::TuneMallocForLargeBuffers();
  auto& reg = zeroshard::bench::Registry();
  if (argc < 2 || reg.find(argv[1]) == reg.end()) {
    std::fprintf(stderr, "usage: zeroshard-bench NAME [--smoke] [args...]\n");
    for (const auto& [name, info] : reg) {
      std::fprintf(stderr, "  %-8s %s\n", name.c_str(), info.help.c_str());
    }
    return 2;
  }
  std::vector<std::string> args;
  for (int i = 2; i < argc; ++i) {
    if (std::string(argv[i]) == "--smoke") {
      zeroshard::bench::SetSmoke(true);
    } else {
      args.emplace_back(argv[i]);
    }
  }
  if (zeroshard::bench::Smoke()) {
    std::printf("%s: smoke run (tiny sizes: the figures mean nothing)\n",
                argv[1]);
  }
  return reg[argv[1]].fn(args);
}
