// zeroshard-ctl export, inspect --tensor, checkpoint, list and restore run as
// processes against real servers (server side: ReadSnapshot of in-memory
// snapshots). Training runs in this process through ShardClient: one thread
// pushes steps and, after each, gathers the FP32 masters of the new version,
// so the test knows the servers' weights at every version and can check that
// what ctl read at step v is exactly version v, although training went on.
// Files are read back here with independent readers (safetensors: the JSON
// header and raw bytes; .npy: magic, header, data).
#include <atomic>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <optional>
#include <thread>

#include <nlohmann/json.hpp>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "client/set_weights.h"
#include "client/shard_client.h"
#include "client/snapshot_reader.h"
#include "common/init_values.h"
#include "gtest/gtest.h"
#include "tests/integration/local_cluster.h"

namespace zeroshard {
namespace {

using testing::RunBinary;

constexpr absl::Duration kTimeout = absl::Seconds(120);
// The run InitCluster starts; the trainer's pushes and ctl smoke name it.
constexpr char kRunId[] = "ctl-snapshot-test";

std::vector<std::string> Shape() {
  return {"--layers=2", "--heads=2", "--width=64", "--vocab=96",
          "--context=32", "--workers=2"};
}

void InitCluster(const testing::LocalCluster& cluster) {
  std::vector<std::string> init = {"init", "--servers=" + cluster.server_list(),
                                   "--seed=3", "--lr=0.01",
                                   std::string("--run_id=") + kRunId};
  for (const auto& f : Shape()) init.push_back(f);
  auto r = RunBinary("zeroshard-ctl", init, kTimeout);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_TRUE(r->status.success()) << r->err;
}

absl::StatusOr<testing::CommandResult> Ctl(std::vector<std::string> args) {
  return RunBinary("zeroshard-ctl", args, kTimeout);
}

// Pushes steps from `first` (both workers' partitions, seeded gradients) and
// records the FP32 masters of every version reached, until stopped.
class Trainer {
 public:
  Trainer(std::unique_ptr<ShardClient> client, uint64_t first)
      : client_(std::move(client)), next_(first) {}
  ~Trainer() { Stop(); }

  absl::Status Step() {
    const FlatLayout& L = client_->layout();
    const uint64_t s = next_;
    for (uint32_t w = 0; w < L.num_workers(); ++w) {
      std::vector<FlatRange> ranges = L.WorkerRanges(w);
      uint64_t n = 0;
      for (const FlatRange& r : ranges) n += r.size();
      std::vector<float> g(n);
      std::vector<GradSpan> spans;
      uint64_t at = 0;
      for (const FlatRange& r : ranges) {
        for (uint64_t i = 0; i < r.size(); ++i) {
          g[at + i] = 1e-2f * CounterNormal(77 + s, r.begin + i);
        }
        spans.push_back({r, DType::kFp32, g.data() + at});
        at += r.size();
      }
      auto p = client_->PushGrad(s, w, spans, StepCommit{1.0, false}, false);
      if (!p.ok()) return p.status();
    }
    std::vector<float> w(L.total_elems());
    auto got = client_->Gather({{FlatRange{0, L.total_elems()}}},
                               DType::kFp32, s + 1, w.data(),
                               w.size() * sizeof(float));
    if (!got.ok()) return got.status();
    absl::MutexLock lock(&mu_);
    weights_[s + 1] = std::move(w);
    while (weights_.size() > 400) weights_.erase(weights_.begin());
    next_ = s + 1;
    return absl::OkStatus();
  }

  void StartBackground() {
    thread_ = std::thread([this] {
      while (!stop_.load()) {
        absl::Status s = Step();
        absl::SleepFor(absl::Milliseconds(2));  // bounded versions kept
        if (!s.ok()) {
          absl::MutexLock lock(&mu_);
          error_ = s;
          return;
        }
      }
    });
  }
  void Stop() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
  }
  uint64_t version() {
    absl::MutexLock lock(&mu_);
    return next_;
  }
  absl::Status error() {
    absl::MutexLock lock(&mu_);
    return error_;
  }
  // The masters at version v (empty if not recorded).
  std::vector<float> At(uint64_t v) {
    absl::MutexLock lock(&mu_);
    auto it = weights_.find(v);
    return it == weights_.end() ? std::vector<float>() : it->second;
  }

 private:
  std::unique_ptr<ShardClient> client_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
  absl::Mutex mu_;
  uint64_t next_ ABSL_GUARDED_BY(mu_);
  std::map<uint64_t, std::vector<float>> weights_ ABSL_GUARDED_BY(mu_);
  absl::Status error_ ABSL_GUARDED_BY(mu_);
};

std::unique_ptr<Trainer> MakeTrainer(const testing::LocalCluster& cluster,
                                     std::optional<FlatLayout>* layout_out) {
  auto channels = ShardChannels::Connect(cluster.addresses(), {});
  EXPECT_TRUE(channels.ok()) << channels.status();
  if (!channels.ok()) return nullptr;
  auto view = InspectCluster(**channels);
  EXPECT_TRUE(view.ok()) << view.status();
  if (!view.ok()) return nullptr;
  layout_out->emplace(view->layout);
  ShardClientOptions options;
  options.run_id = kRunId;
  auto client = ShardClient::Create(cluster.addresses(), view->layout, options);
  EXPECT_TRUE(client.ok()) << client.status();
  if (!client.ok()) return nullptr;
  return std::make_unique<Trainer>(*std::move(client), view->max_version);
}

// An independent safetensors reader: name -> (shape, FP32 values), plus
// the metadata.
struct StFile {
  std::map<std::string, std::pair<std::vector<int64_t>, std::vector<float>>>
      tensors;
  std::map<std::string, std::string> metadata;
};
StFile ReadSafetensors(const std::string& bytes) {
  StFile out;
  EXPECT_GE(bytes.size(), 8u);
  if (bytes.size() < 8) return out;
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = n << 8 | static_cast<uint8_t>(bytes[i]);
  EXPECT_LE(8 + n, bytes.size());
  if (8 + n > bytes.size()) return out;
  const nlohmann::json h = nlohmann::json::parse(bytes.substr(8, n));
  const size_t base = 8 + n;
  for (auto it = h.begin(); it != h.end(); ++it) {
    if (it.key() == "__metadata__") {
      for (auto m = it->begin(); m != it->end(); ++m) {
        out.metadata[m.key()] = m->get<std::string>();
      }
      continue;
    }
    EXPECT_EQ((*it)["dtype"], "F32") << it.key();
    const auto shape = (*it)["shape"].get<std::vector<int64_t>>();
    const auto off = (*it)["data_offsets"].get<std::vector<uint64_t>>();
    EXPECT_TRUE(off.size() == 2 && off[0] <= off[1] &&
                base + off[1] <= bytes.size())
        << it.key();
    if (off.size() != 2 || base + off[1] > bytes.size()) continue;
    std::vector<float> v((off[1] - off[0]) / 4);
    std::memcpy(v.data(), bytes.data() + base + off[0], v.size() * 4);
    out.tensors[it.key()] = {shape, std::move(v)};
  }
  return out;
}

// Every tensor of the file equals the flat weights at its layout offset.
void ExpectFileEquals(const StFile& f, const FlatLayout& layout,
                      const std::vector<float>& flat) {
  ASSERT_EQ(flat.size(), layout.total_elems());
  EXPECT_EQ(f.tensors.size(), layout.tensors().size());
  for (const TensorInfo& t : layout.tensors()) {
    auto it = f.tensors.find(t.name);
    ASSERT_NE(it, f.tensors.end()) << t.name;
    EXPECT_EQ(it->second.first, t.shape) << t.name;
    ASSERT_EQ(it->second.second.size(), t.numel) << t.name;
    EXPECT_EQ(std::memcmp(it->second.second.data(), flat.data() + t.offset,
                          t.numel * 4),
              0)
        << t.name;
  }
}

TEST(CtlSnapshotTest, ExportWhileTrainingIsOneVersionAndInspectMatchesIt) {
  auto cluster = testing::LocalCluster::Start(2);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  ASSERT_NO_FATAL_FAILURE(InitCluster(**cluster));
  const std::string servers = "--servers=" + (*cluster)->server_list();
  std::optional<FlatLayout> layout;
  std::unique_ptr<Trainer> trainer = MakeTrainer(**cluster, &layout);
  ASSERT_NE(trainer, nullptr);
  const FlatLayout& L = *layout;
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(trainer->Step().ok());

  const std::string dir = testing::MakeTempDir("zs_ctl_export_");
  trainer->StartBackground();
  // Let training get going, then export while it runs.
  const absl::Time until = absl::Now() + absl::Seconds(30);
  while (trainer->version() < 10 && absl::Now() < until) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  const uint64_t before = trainer->version();
  auto r = Ctl({"export", servers, "--out=" + dir + "/live.safetensors"});
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_TRUE(r->status.success()) << r->out << r->err;
  const uint64_t after = trainer->version();
  auto rf = Ctl({"export", servers, "--format=f32", "--out=" + dir + "/live.f32"});
  ASSERT_TRUE(rf.ok()) << rf.status();
  ASSERT_TRUE(rf->status.success()) << rf->out << rf->err;
  // Beside the raw floats, the names and shapes to read them by.
  const nlohmann::json index =
      nlohmann::json::parse(testing::ReadFile(dir + "/live.json"));
  EXPECT_EQ(index["format"], "zeroshard-weights-v1");
  EXPECT_EQ(index["tensors"].size(), L.tensors().size());
  EXPECT_EQ(index["total_elems"].get<uint64_t>() * sizeof(float),
            testing::ReadFile(dir + "/live.f32").size());
  trainer->Stop();
  ASSERT_TRUE(trainer->error().ok()) << trainer->error();
  EXPECT_GT(after, before) << "training did not run during the export";

  StFile f = ReadSafetensors(testing::ReadFile(dir + "/live.safetensors"));
  ASSERT_TRUE(f.metadata.count("zeroshard_step")) << r->out;
  uint64_t v = 0;
  ASSERT_TRUE(absl::SimpleAtoi(f.metadata["zeroshard_step"], &v));
  EXPECT_GE(v, before);
  const std::vector<float> at_v = trainer->At(v);
  ASSERT_FALSE(at_v.empty()) << "version " << v << " not recorded";
  ExpectFileEquals(f, L, at_v);
  // It differs from the neighbouring versions (training changed weights).
  EXPECT_NE(trainer->At(v + 1), at_v);

  // The raw export is one version too, padding included.
  const std::string raw = testing::ReadFile(dir + "/live.f32");
  ASSERT_EQ(raw.size(), L.total_elems() * 4);
  std::vector<float> flat(L.total_elems());
  std::memcpy(flat.data(), raw.data(), raw.size());
  bool matched = false;
  for (uint64_t w = v; w <= trainer->version() && !matched; ++w) {
    matched = trainer->At(w) == flat;
  }
  EXPECT_TRUE(matched) << "the f32 export is no recorded version";

  // Idle now: inspect --tensor reads the last version; its numbers match
  // those computed from an export of the same version.
  const uint64_t last = trainer->version();
  r = Ctl({"export", servers, "--out=" + dir + "/idle.safetensors"});
  ASSERT_TRUE(r.ok() && r->status.success()) << r->err;
  f = ReadSafetensors(testing::ReadFile(dir + "/idle.safetensors"));
  EXPECT_EQ(f.metadata["zeroshard_step"], std::to_string(last));
  ExpectFileEquals(f, L, trainer->At(last));

  const std::string name = "h.1.attn.c_attn.weight";
  const std::string npy = dir + "/c_attn.npy";
  r = Ctl({"inspect", servers, "--tensor=" + name, "--state=master",
           "--out=" + npy});
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_TRUE(r->status.success()) << r->out << r->err;
  EXPECT_NE(r->out.find("shape [64, 192]"), std::string::npos) << r->out;
  EXPECT_NE(r->out.find("step " + std::to_string(last)), std::string::npos)
      << r->out;
  EXPECT_NE(r->out.find("adam step " + std::to_string(last)),
            std::string::npos)
      << r->out;
  const std::vector<float>& want = f.tensors[name].second;
  ASSERT_EQ(want.size(), 64u * 192u);
  double sq = 0, sum = 0;
  float lo = want[0], hi = want[0];
  for (float x : want) {
    sq += double{x} * x;
    sum += x;
    lo = std::min(lo, x);
    hi = std::max(hi, x);
  }
  // The "master" row: state l2_norm min max mean.
  std::vector<double> got;
  for (absl::string_view line : absl::StrSplit(r->out, '\n')) {
    std::vector<std::string> cells =
        absl::StrSplit(line, ' ', absl::SkipEmpty());
    if (cells.size() == 5 && cells[0] == "master") {
      for (int c = 1; c < 5; ++c) {
        double d = 0;
        ASSERT_TRUE(absl::SimpleAtod(cells[c], &d)) << line;
        got.push_back(d);
      }
    }
  }
  ASSERT_EQ(got.size(), 4u) << r->out;
  EXPECT_NEAR(got[0], std::sqrt(sq), 1e-6 * std::sqrt(sq));
  EXPECT_EQ(static_cast<float>(got[1]), lo);
  EXPECT_EQ(static_cast<float>(got[2]), hi);
  EXPECT_NEAR(got[3], sum / want.size(), 1e-7);

  // The .npy: magic, version 1.0, header, shape, data.
  const std::string bytes = testing::ReadFile(npy);
  ASSERT_GE(bytes.size(), 10u);
  EXPECT_EQ(bytes.substr(0, 6), "\x93NUMPY");
  EXPECT_EQ(bytes[6], 1);
  EXPECT_EQ(bytes[7], 0);
  const size_t hlen = static_cast<uint8_t>(bytes[8]) |
                      static_cast<size_t>(static_cast<uint8_t>(bytes[9])) << 8;
  EXPECT_EQ((10 + hlen) % 64, 0u);
  ASSERT_EQ(bytes.size(), 10 + hlen + want.size() * 4);
  const std::string header = bytes.substr(10, hlen);
  EXPECT_NE(header.find("'descr': '<f4'"), std::string::npos) << header;
  EXPECT_NE(header.find("'fortran_order': False"), std::string::npos);
  EXPECT_NE(header.find("'shape': (64, 192)"), std::string::npos) << header;
  EXPECT_EQ(header.back(), '\n');
  EXPECT_EQ(std::memcmp(bytes.data() + 10 + hlen, want.data(), want.size() * 4),
            0);

  // All three states by default; Adam moments are non-zero after training.
  r = Ctl({"inspect", servers, "--tensor=wte.weight"});
  ASSERT_TRUE(r.ok() && r->status.success()) << r->err;
  EXPECT_NE(r->out.find("shape [96, 64]"), std::string::npos) << r->out;
  for (const char* s : {"master", "exp_avg", "exp_avg_sq"}) {
    EXPECT_NE(r->out.find(std::string("\n") + s + " "), std::string::npos)
        << s << "\n" << r->out;
  }
}

TEST(CtlSnapshotTest, CheckpointListRestoreOntoAnotherServerCount) {
  auto a = testing::LocalCluster::Start(2);
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_NO_FATAL_FAILURE(InitCluster(**a));
  const std::string servers_a = "--servers=" + (*a)->server_list();
  auto r = Ctl({"smoke", servers_a, "--steps=3",
                std::string("--run_id=") + kRunId});
  ASSERT_TRUE(r.ok() && r->status.success()) << r->err;

  const std::string dir = testing::MakeTempDir("zs_ctl_ckpt_");
  r = Ctl({"checkpoint", servers_a, "--dir=" + dir});
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_TRUE(r->status.success()) << r->out << r->err;
  EXPECT_NE(r->out.find("checkpoint of step 3"), std::string::npos) << r->out;
  EXPECT_NE(r->out.find("step-00000000000000000003"), std::string::npos);
  EXPECT_NE(r->out.find("shard-1-of-2.bin"), std::string::npos) << r->out;

  // A folder without a manifest is listed as incomplete.
  std::filesystem::create_directories(dir + "/step-00000000000000000099");
  r = Ctl({"list", "--dir=" + dir});
  ASSERT_TRUE(r.ok() && r->status.success()) << r->err;
  EXPECT_NE(r->out.find("1 complete checkpoint in"), std::string::npos) << r->out;
  EXPECT_NE(r->out.find("incomplete: step-00000000000000000099"),
            std::string::npos)
      << r->out;
  std::vector<std::string> row;
  for (absl::string_view line : absl::StrSplit(r->out, '\n')) {
    std::vector<std::string> cells =
        absl::StrSplit(line, ' ', absl::SkipEmpty());
    if (!cells.empty() && cells[0] == "3") row = cells;
  }
  ASSERT_EQ(row.size(), 7u) << r->out;
  EXPECT_EQ(row[1], "2");  // servers
  EXPECT_EQ(row[5], "intact");  // every file hashed against the manifest

  // smoke pushes gradients to the padding too, which a restore leaves zero:
  // compare the tensors (safetensors holds no padding), file for file.
  r = Ctl({"export", servers_a, "--out=" + dir + "/a.safetensors"});
  ASSERT_TRUE(r.ok() && r->status.success()) << r->err;

  // Fresh servers, three of them: restore, then the same weights.
  auto b = testing::LocalCluster::Start(3);
  ASSERT_TRUE(b.ok()) << b.status();
  ASSERT_NO_FATAL_FAILURE(InitCluster(**b));
  const std::string servers_b = "--servers=" + (*b)->server_list();
  r = Ctl({"restore", servers_b, "--dir=" + dir});
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_TRUE(r->status.success()) << r->out << r->err;
  EXPECT_NE(r->out.find("restored 3 servers"), std::string::npos) << r->out;
  EXPECT_NE(r->out.find("at step 3"), std::string::npos) << r->out;
  r = Ctl({"export", servers_b, "--out=" + dir + "/b.safetensors"});
  ASSERT_TRUE(r.ok() && r->status.success()) << r->err;
  const std::string wa = testing::ReadFile(dir + "/a.safetensors");
  const std::string wb = testing::ReadFile(dir + "/b.safetensors");
  ASSERT_FALSE(wa.empty());
  EXPECT_TRUE(wa == wb) << "restored master weights differ";

  // A second checkpoint of B at an explicit step that B has passed fails.
  r = Ctl({"checkpoint", servers_b, "--dir=" + dir, "--step=1"});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->status.code, 1) << r->out << r->err;
  EXPECT_NE(r->err.find("FAILED_PRECONDITION"), std::string::npos) << r->err;
}

TEST(CtlSnapshotTest, BadInputIsAClearError) {
  auto cluster = testing::LocalCluster::Start(1);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  ASSERT_NO_FATAL_FAILURE(InitCluster(**cluster));
  const std::string servers = "--servers=" + (*cluster)->server_list();
  struct Case {
    std::vector<std::string> args;
    std::string message;
  };
  const std::vector<Case> cases = {
      {{"inspect", servers, "--tensor=h.9.nope"}, "unknown tensor 'h.9.nope'"},
      {{"inspect", servers, "--tensor=wte.weight", "--state=grads"},
       "state 'grads'"},
      {{"inspect", "--tensor=wte.weight"}, "needs --servers"},
      {{"export", "--out=/tmp/x.safetensors"}, "needs --servers"},
      {{"export", servers}, "needs --out"},
      {{"export", servers, "--out=/tmp/x", "--format=onnx"}, "--format"},
      {{"checkpoint", servers}, "needs --dir"},
      {{"list"}, "needs --dir"},
  };
  for (const Case& c : cases) {
    auto r = Ctl(c.args);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_TRUE(r->status.exited);
    EXPECT_EQ(r->status.code, 2) << c.args[0] << ": " << r->out << r->err;
    EXPECT_NE(r->err.find(c.message), std::string::npos)
        << c.message << " not in: " << r->err;
  }

  // ReadSnapshot itself: no snapshot of the step, a range outside the
  // owned one.
  auto channels = ShardChannels::Connect((*cluster)->addresses(), {});
  ASSERT_TRUE(channels.ok()) << channels.status();
  auto view = InspectCluster(**channels);
  ASSERT_TRUE(view.ok()) << view.status();
  const uint64_t total = view->layout.total_elems();
  std::vector<float> buf(total + 64);
  absl::Status s = ReadSnapshotRange(**channels, 0, 12345, {0, 64},
                                     kMasterState, {}, buf.data());
  EXPECT_TRUE(absl::IsNotFound(s)) << s;
  EXPECT_NE(s.message().find("step 12345"), std::string::npos) << s;
  auto snap = ReadConsistentSnapshot(**channels, view->layout, {0, 64},
                                     {"exp_avg_sq"}, {});
  ASSERT_TRUE(snap.ok()) << snap.status();
  EXPECT_EQ(snap->step, 0u);
  // A state the servers' optimizer does not keep is refused by name, by the
  // client before any call and by the server for a request made by hand.
  EXPECT_EQ(view->state_slots,
            (std::vector<std::string>{"exp_avg", "exp_avg_sq"}));
  const absl::Status unknown = view->CheckStateName("momentum_buffer");
  EXPECT_TRUE(absl::IsInvalidArgument(unknown)) << unknown;
  EXPECT_NE(unknown.message().find("master, exp_avg, exp_avg_sq"),
            std::string::npos) << unknown;
  s = ReadSnapshotRange(**channels, 0, 0, {0, 64}, "momentum_buffer", {},
                        buf.data());
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
  EXPECT_NE(s.message().find("no state 'momentum_buffer'"), std::string::npos)
      << s;
  s = ReadSnapshotRange(**channels, 0, 0, {total - 64, total + 64},
                        kMasterState, {}, buf.data());
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
  EXPECT_NE(s.message().find("outside the owned range"), std::string::npos)
      << s;
}

// SetWeights with a state slot (WeightPiece.state, optimizer_step): what
// torch's optimizer.load_state_dict sends. The write is read back by the
// next consistent snapshot of the same step (an in-memory snapshot taken
// before it is not served again), the step count follows, and a state the
// rule does not keep is refused by name with nothing written.
TEST(CtlSnapshotTest, SetWeightsWritesAStateSlotAndTheStepCount) {
  auto cluster = testing::LocalCluster::Start(2);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  ASSERT_NO_FATAL_FAILURE(InitCluster(**cluster));
  auto channels = ShardChannels::Connect((*cluster)->addresses(), {});
  ASSERT_TRUE(channels.ok()) << channels.status();
  auto view = InspectCluster(**channels);
  ASSERT_TRUE(view.ok()) << view.status();
  const FlatLayout& L = view->layout;
  const uint64_t total = L.total_elems();
  // Read once at step 0: this snapshot must not be served after the write.
  auto before = ReadConsistentSnapshot(**channels, L, {0, total},
                                       {"exp_avg"}, {});
  ASSERT_TRUE(before.ok()) << before.status();
  std::vector<float> m(total);
  for (uint64_t i = 0; i < total; ++i) m[i] = 1e-3f * CounterNormal(5, i);
  // Across the two servers' boundary, and a second range apart.
  const FlatRange a{0, total / 2 + 100}, b{total - 64, total};
  const WeightRange pieces[] = {{a, m.data()}, {b, m.data() + b.begin}};
  ASSERT_TRUE(SetStateRanges(**channels, L, pieces, "exp_avg", 7).ok());
  auto after = ReadConsistentSnapshot(**channels, L, {0, total},
                                      {"master", "exp_avg", "exp_avg_sq"}, {});
  ASSERT_TRUE(after.ok()) << after.status();
  EXPECT_EQ(after->step, 0u);
  for (uint64_t i = 0; i < total; ++i) {
    const bool written = (i >= a.begin && i < a.end) || (i >= b.begin && i < b.end);
    ASSERT_EQ(after->arrays[1][i], written ? m[i] : before->arrays[0][i]) << i;
    ASSERT_EQ(after->arrays[2][i], 0.0f) << i;  // the other slot stays
  }
  auto status = InspectCluster(**channels);
  ASSERT_TRUE(status.ok()) << status.status();
  for (const auto& s : status->servers) EXPECT_EQ(s.optimizer_step, 7u);
  // A slot the rule does not keep: refused by name, nothing written.
  const absl::Status bad =
      SetStateRanges(**channels, L, pieces, "momentum_buffer", std::nullopt);
  EXPECT_TRUE(absl::IsInvalidArgument(bad)) << bad;
  EXPECT_NE(bad.message().find("\"exp_avg\", \"exp_avg_sq\""),
            std::string::npos) << bad;
}

}  // namespace
}  // namespace zeroshard
