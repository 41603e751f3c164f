// The headers every test parses, precompiled once per build and reused by
// each zs_test target (the top-level CMakeLists.txt, ZS_TEST_PCH): about
// 3.5 s of each test source's 4-8 s of compiling is these headers. CMake
// only; the Bazel build, which does not use it, keeps each source's own
// includes honest.
#ifndef ZEROSHARD_TESTS_SUPPORT_TEST_PCH_H_
#define ZEROSHARD_TESTS_SUPPORT_TEST_PCH_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "gtest/gtest.h"
#include "proto/zeroshard/v1/checkpoint.grpc.pb.h"
#include "proto/zeroshard/v1/shard.grpc.pb.h"

#endif  // ZEROSHARD_TESTS_SUPPORT_TEST_PCH_H_
