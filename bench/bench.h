// zeroshard-bench: one binary, one subcommand per benchmark.
//
// Each benchmark prints its figures, measured in the same run against this
// machine's own limit or a peer, and ends with one line
//   NAME ratio=X target=Y
// A benchmark registers itself with ZS_REGISTER_BENCH in its own file
// (bench/*_bench.cc); bench/main.cc dispatches on argv[1]. With --smoke
// (Smoke() below) each runs at a tiny size; the test suite runs every one so
// (tests/bench/smoke.sh).
#ifndef ZEROSHARD_BENCH_BENCH_H_
#define ZEROSHARD_BENCH_BENCH_H_

#include <cstddef>
#include <functional>
#include <map>
#include <cstdint>
#include <string>
#include <vector>

namespace zeroshard::bench {

// Runs a benchmark with its own arguments (argv after the subcommand); returns
// the process exit code.
using BenchFn = std::function<int(const std::vector<std::string>& args)>;

struct BenchInfo {
  std::string help;
  BenchFn fn;
};

std::map<std::string, BenchInfo>& Registry();

// `zeroshard-bench NAME --smoke`: every benchmark once at a tiny size, end
// to end, so that the test suite sees each one run and print its ratio line
// (the figures themselves mean nothing then). Set by main before the
// benchmark runs; the flag is taken out of the benchmark's arguments.
bool Smoke();
void SetSmoke(bool smoke);

struct Registrar {
  Registrar(const std::string& name, const std::string& help, BenchFn fn) {
    Registry()[name] = {help, std::move(fn)};
  }
};

// Triad bandwidth in bytes/s (STREAM counting: 3 arrays x 8 bytes per element
// for doubles) over arrays of `bytes_per_array`, using `threads` threads; the
// best of `reps` runs.
double MeasureTriadBytesPerSecond(size_t bytes_per_array, int threads, int reps);

// `bytes` rounded up to 2 MiB, 2 MiB-aligned and advised for transparent huge
// pages, never freed; exits naming `who` when the memory is not there.
void* AllocHugeBytes(size_t bytes, const char* who);
template <typename T>
T* AllocHugeArray(size_t n, const char* who) {
  return static_cast<T*>(AllocHugeBytes(n * sizeof(T), who));
}

// The arguments of the optimizer-update benchmarks (lion, adam8bit):
// --n=PARAMS, --grad=bf16|fp32, --reps=R, with their defaults (100 M, BF16,
// 5; 1 M and 1 rep under --smoke). False, after printing the usage line
// for `name`, on any other argument.
struct UpdateArgs {
  uint64_t n = 0;
  bool bf16 = true;
  int reps = 0;
};
bool ParseUpdateArgs(const std::vector<std::string>& args, const char* name,
                     UpdateArgs* out);

// The directory of the running zeroshard-bench (where zeroshard-server is
// built beside it), or "." when /proc/self/exe cannot be read.
std::string SelfDir();

// The exit code of a device benchmark that found no CUDA device and measured
// nothing: 0, or 1 when ZS_EXPECT_CUDA_DEVICE=1 (tests/gpu/device_check.sh on
// a machine whose nvidia-smi lists a GPU: a runtime that sees none is then a
// failure).
int NoDeviceExitCode();

}  // namespace zeroshard::bench

#define ZS_BENCH_CONCAT_INNER_(a, b) a##b
#define ZS_BENCH_CONCAT_(a, b) ZS_BENCH_CONCAT_INNER_(a, b)
#define ZS_REGISTER_BENCH(name, help, fn)                                \
  static ::zeroshard::bench::Registrar ZS_BENCH_CONCAT_(zs_bench_reg_,   \
                                                        __LINE__)(name, help, fn)

#endif  // ZEROSHARD_BENCH_BENCH_H_
