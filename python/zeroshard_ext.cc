// zeroshard._zeroshard: the Python package's native half, a thin binding of
// the client library's public API (client/shard_cluster.h) and of the
// configuration parser (common/config.h). docs/DESIGN.md, "The PyTorch
// front-end".
//
// Buffers cross as Python buffer objects (a torch CPU tensor's .numpy(), a
// BF16 tensor viewed as int16): their memory is read or written in place,
// never copied, and its size is checked against what the call needs before
// anything is sent. Every blocking call releases the GIL. An absl::Status
// error raises zeroshard.ZeroshardError (a RuntimeError) with the status
// code's name first: "INVALID_ARGUMENT: ...".
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "client/live_run.h"
#include "client/checkpoint_commit.h"
#include "client/kv_client.h"
#include "client/client_options.h"
#include "client/copy_audit.h"
#include "client/replica_catch_ups.h"
#include "client/shard_cluster.h"
#include "common/checkpoint_manifest.h"
#include "common/config.h"
#include "common/dtype.h"
#include "common/layout.h"
#include "common/loss_scaler.h"
#include "common/param_groups.h"
#include "common/resolved_config.h"
#include "client/run_tokens.h"
#include "python/checkpoint_files.h"
#include "python/optimizer_rules.h"
#include "python/ext_status.h"
#include "python/run_outputs.h"
#include "python/catch_up_binding.h"
#include "python/step_binding.h"
#include "comm/collectives.h"

namespace py = pybind11;

namespace zeroshard {
namespace {

absl::StatusOr<TensorClass> ClassOfName(const std::string& name) {
  for (int c = 0; c < kNumTensorClasses; ++c) {
    if (TensorClassName(static_cast<TensorClass>(c)) == name) {
      return static_cast<TensorClass>(c);
    }
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "tensor class \"", name,
      "\" is none of matrices, embeddings, biases, norms"));
}

// unit name, [(tensor name, shape, class name)]
using TensorEntry = std::tuple<std::string, std::vector<int64_t>, std::string>;
using UnitEntry = std::pair<std::string, std::vector<TensorEntry>>;

// `resolved`, when given, is the resolved configuration: the tensors of a
// class whose parameter group has a tensor rule (Muon) are kept whole.
FlatLayout MakeLayout(const std::vector<UnitEntry>& units, uint32_t servers,
                      uint32_t workers, const std::string& arch,
                      const TrainingConfig* resolved) {
  ModelManifest m;
  m.partition_count = workers;
  m.arch = arch;
  for (const auto& [unit_name, tensors] : units) {
    UnitSpec u;
    u.name = unit_name;
    for (const auto& [name, shape, cls] : tensors) {
      // The weights come from the caller's model (SetMasterWeights), so the
      // servers' own init is zeros.
      u.tensors.push_back(TensorSpec{name, shape,
                                     InitRule{InitRule::Kind::kZeros, 1.0},
                                     Value(ClassOfName(cls))});
    }
    m.units.push_back(std::move(u));
  }
  if (resolved != nullptr) MarkWholeTensors(resolved->param_groups, &m);
  return Value(FlatLayout::Create(m, servers, workers));
}

py::dict StatusDict(const ServerStatus& s) {
  py::dict d;
  d["initialized"] = s.initialized;
  d["server_index"] = s.server_index;
  d["num_servers"] = s.num_servers;
  d["owned"] = Range{s.owned.begin, s.owned.end};
  d["total_elems"] = s.total_elems;
  d["min_version"] = s.min_version;
  d["max_version"] = s.max_version;
  d["optimizer_step"] = s.optimizer_step;
  d["placement"] = s.placement;
  d["master_norm"] = s.master_norm;
  py::dict norms;
  for (const auto& [slot, norm] : s.state_norms) norms[py::str(slot)] = norm;
  d["state_norms"] = norms;
  d["state_slots"] = s.state_slots;
  py::dict bytes;
  for (const auto& [kind, n] : s.bytes_by_kind) bytes[py::str(kind)] = n;
  d["bytes_by_kind"] = bytes;
  py::dict calls;
  for (const auto& [method, n] : s.counters.calls) calls[py::str(method)] = n;
  d["rpc_calls"] = calls;
  d["rpc_bytes_in"] = s.counters.bytes_in;
  d["rpc_bytes_out"] = s.counters.bytes_out;
  d["arch"] = s.manifest.arch;
  return d;
}

// The ranks of one Python run: the worker's collectives (Gloo on the CPU),
// met through server 0's key-value store. Buffers are FP32 (reduce-scatter)
// or raw bytes (all-gather).
class PyGroup {
 public:
  PyGroup(std::unique_ptr<KvClient> kv, std::unique_ptr<WorkerGroup> group)
      : kv_(std::move(kv)), group_(std::move(group)) {}

  int rank() const { return group_->rank(); }
  int size() const { return group_->size(); }
  std::string backend() const { return std::string(group_->backend()); }

  // out = scale * the sum over ranks of their in[rank * part, ...), part =
  // out's length; `in` holds size() parts.
  void ReduceScatter(const py::buffer& in, const py::buffer& out,
                     float scale) {
    NeedHost("reduce_scatter");
    py::buffer_info oi = out.request(true);
    const uint64_t part = static_cast<uint64_t>(oi.size);
    Bytes o = BufferOf(out, true, part * sizeof(float), "reduce_scatter out");
    Bytes i = BufferOf(in, false, part * size() * sizeof(float),
                       "reduce_scatter in");
    py::gil_scoped_release release;
    Check(group_->ReduceScatter(
        absl::MakeConstSpan(static_cast<const float*>(i.data), part * size()),
        absl::MakeSpan(static_cast<float*>(o.data), part), scale));
  }

  // This rank's part of `buf` (size() equal parts) is in place; on return
  // every part is filled.
  void AllGatherInPlace(const py::buffer& buf) {
    NeedHost("all_gather_in_place");
    py::buffer_info bi = buf.request(true);
    const uint64_t bytes = static_cast<uint64_t>(bi.size * bi.itemsize);
    Bytes b = BufferOf(buf, true, bytes, "all_gather");
    py::gil_scoped_release release;
    Check(group_->AllGatherInPlace(
        absl::MakeSpan(static_cast<uint8_t*>(b.data), b.size)));
  }

  // Element-wise sum, max or min of a few doubles; every rank gets the same.
  std::vector<double> AllReduce(std::vector<double> values,
                                const std::string& op) {
    ReduceOp o = op == "sum"   ? ReduceOp::kSum
                 : op == "max" ? ReduceOp::kMax
                 : op == "min" ? ReduceOp::kMin
                               : (Raise(absl::InvalidArgumentError(absl::StrCat(
                                      "op \"", op, "\" is not sum, max or min"))),
                                  ReduceOp::kSum);
    py::gil_scoped_release release;
    Check(group_->AllReduce(absl::MakeSpan(values), o));
    return values;
  }

  py::bytes Broadcast(const std::string& bytes, int root) {
    std::string b = bytes;
    {
      py::gil_scoped_release release;
      Check(group_->Broadcast(&b, root));
    }
    return py::bytes(b);
  }

  void Barrier() {
    py::gil_scoped_release release;
    Check(group_->Barrier());
  }

  WorkerGroup* get() const { return group_.get(); }

 private:
  void NeedHost(const char* call) const {
    if (group_->device_buffers()) {
      Raise(absl::FailedPreconditionError(absl::StrCat(
          call, ": this ", group_->backend(), " group takes device buffers; "
          "its collectives run through Cluster.step_protocol's _device "
          "calls")));
    }
  }

  std::unique_ptr<KvClient> kv_;
  std::unique_ptr<WorkerGroup> group_;
};

class PyCluster {
 public:
  PyCluster(std::vector<std::string> addresses, const FlatLayout& layout,
            const std::string& credentials_dir, const std::string& role,
            const std::string& run_id, uint64_t attempt,
            double call_timeout_s, int replicas) {
    ShardClientOptions o;
    o.replicas = replicas;
    if (!(call_timeout_s > 0)) {
      Raise(absl::InvalidArgumentError("call_timeout_s must be > 0"));
    }
    o.call_timeout = absl::Seconds(call_timeout_s);
    o.run_id = run_id;
    o.attempt = attempt;
    o.security = Value(LoadClientCredentials(credentials_dir, role));
    cluster_ = Value(ShardCluster::Connect(addresses, o, layout));
  }

  // The optimizer, its schedule and the parameter groups come from the
  // resolved configuration (the same parser zeroshard-train uses); `groups`,
  // when given, are the caller's own (weight_decay, lr_scale, ranges) in
  // place of the configuration's classes.
  void Init(const TrainingConfig& config,
            const std::optional<std::vector<
                std::tuple<double, double, std::vector<Range>>>>& groups,
            uint32_t num_workers, uint64_t chunk_elems, bool replace) {
    InitOptions o;
    o.replace = replace;
    o.optimizer = config.optimizer;
    o.param_groups = config.param_groups;
    o.seed = std::nullopt;  // zeros: the caller sets the model's weights
    o.num_workers = num_workers;
    o.chunk_elems = chunk_elems;
    o.replicas = static_cast<uint32_t>(config.cluster.replicas);
    if (groups.has_value()) {
      o.param_groups = ParamGroups::Single();
      int i = 0;
      for (const auto& [wd, lr_scale, ranges] : *groups) {
        ResolvedGroup g;
        g.name = absl::StrCat("group", i++);
        g.weight_decay = wd;
        g.lr_scale = lr_scale;
        for (const FlatRange& r : ToRanges(ranges)) {
          g.ranges.push_back(r);
          g.elems += r.size();
        }
        o.explicit_groups.push_back(std::move(g));
      }
    }
    py::gil_scoped_release release;
    Check(cluster_->Init(o).status());
    init_ = o;
  }

  // With replicas (docs/DESIGN.md, "Replicas"): the servers this client
  // left, whether server k answers again (a replacement, or the server back
  // from a partition), and its two copies restored from `directory`'s
  // checkpoint of `step` with this cluster's Init (rank 0, between steps);
  // the other ranks' clients reach it again through mark_server_back.
  std::vector<int> GoneServers() const { return cluster_->GoneServers(); }
  bool AnswersAgain(int k, double timeout_s) const {
    CheckServer(k);
    py::gil_scoped_release release;
    absl::StatusOr<bool> again =
        cluster_->AnswersAgain(k, absl::Seconds(timeout_s));
    return again.ok() && *again;
  }
  void ReviveServer(int k, const std::string& directory, uint64_t step) {
    CheckServer(k);
    if (!init_.has_value()) {
      Raise(absl::FailedPreconditionError(
          "revive_server: this cluster has not sent Init"));
    }
    py::gil_scoped_release release;
    Check(cluster_->ReviveServer(k, *init_, directory, step));
  }
  void MarkServerBack(int k) const {
    CheckServer(k);
    cluster_->MarkServerBack(k);
  }
  // Rank 0's catch-ups, checkpoints under `directory` (catch_up_binding.h).
  std::unique_ptr<ReplicaCatchUps> CatchUps(const std::string& directory,
                                            double timeout_s) {
    if (!init_.has_value()) {
      Raise(absl::FailedPreconditionError(
          "catch_ups: this cluster has not sent Init"));
    }
    return std::make_unique<ReplicaCatchUps>(cluster_.get(), *init_, directory,
                                             absl::Seconds(timeout_s));
  }
  // Rank 0 with replicas: the two copies of every slot compared while a
  // step computes, every `every` steps (client/copy_audit.h): started once
  // the servers hold version `step`, the verdict heard before it is
  // applied (a copy that differs raises, naming the slot).
  void AuditStart(uint64_t step, uint64_t every) {
    if (audit_ == nullptr || audit_every_ != every) {
      if (audit_ != nullptr) Check(audit_->Finish());
      audit_ = std::make_unique<CopyAudit>(cluster_.get(), every);
      audit_every_ = every;
    }
    audit_->Start(step);
  }
  void AuditFinish() {
    if (audit_ == nullptr) return;
    py::gil_scoped_release release;
    Check(audit_->Finish());
  }
  uint64_t AuditsCompared() const {
    return audit_ == nullptr ? 0 : audit_->compared();
  }

  void SetMasterWeights(const py::buffer& flat) {
    const uint64_t n = cluster_->layout().total_elems();
    Bytes b = BufferOf(flat, false, n * sizeof(float), "set_master_weights");
    py::gil_scoped_release release;
    Check(cluster_->SetMasterWeights(
        absl::MakeConstSpan(static_cast<const float*>(b.data), n)));
  }

  // FP32 `values` (the ranges' elements concatenated) overwrite those
  // ranges of the master weights; the rest, m, v and the steps stay.
  void SetMasterWeightRanges(const std::vector<Range>& ranges,
                             const py::buffer& values) {
    WriteRanges(ranges, "", values, std::nullopt, "set_master_weight_ranges");
  }

  // Returns (min_version, max_version) of the pieces received.
  Range Gather(const std::vector<Range>& ranges, const std::string& dtype,
               const py::buffer& out, int64_t min_version) {
    const DType t = Value(WireDType(dtype));
    const std::vector<FlatRange> r = ToRanges(ranges);
    Bytes b = BufferOf(out, true, RangesBytes(r, t), "gather");
    py::gil_scoped_release release;
    GatherResult g =
        Value(cluster_->Gather(r, t, min_version, b.data, b.size));
    return {g.min_version, g.max_version};
  }

  // `grad` holds the ranges' elements concatenated, in `dtype`. Returns
  // the elements the servers applied (0 for a prepared push). With
  // `known`, the coefficient goes in the streams' headers and the servers
  // apply each piece as it arrives (the caller has checked that none will
  // be refused: finite, and within the servers' bound once scaled).
  uint64_t Push(uint64_t step, uint32_t worker,
                const std::vector<Range>& ranges, const std::string& dtype,
                const py::buffer& grad, double coefficient, bool skip,
                bool prepare, bool known,
                const std::optional<std::vector<
                    std::tuple<double, double, double, double, double>>>&
                    settings) {
    if (known && prepare) {
      Raise(absl::InvalidArgumentError(
          "push: a prepared push cannot carry a known coefficient"));
    }
    const DType t = Value(WireDType(dtype));
    const std::vector<FlatRange> r = ToRanges(ranges);
    Bytes b = BufferOf(grad, false, RangesBytes(r, t), "push");
    std::vector<GradSpan> spans;
    const char* p = static_cast<const char*>(b.data);
    for (const FlatRange& fr : r) {
      spans.push_back(GradSpan{fr, t, p});
      p += fr.size() * DTypeSize(t);
    }
    StepCommit c{coefficient, skip, prepare};
    if (settings.has_value()) {
      // (lr, weight_decay, beta1, beta2, eps) of each group, in order.
      for (const auto& [lr, wd, b1, b2, eps] : *settings) {
        c.settings.push_back({lr, wd, b1, b2, eps});
      }
    }
    Check(ValidateStepCommit(c));
    py::gil_scoped_release release;
    return Value(cluster_->PushGrad(step, worker, spans, c, known))
        .applied_elems;
  }

  // FP32 `values` (the ranges' elements concatenated) overwrite array
  // `state` ("" the masters, or a state slot such as "exp_avg") over those
  // ranges; with optimizer_step, the servers' Adam step counts too.
  void SetStateRanges(const std::vector<Range>& ranges,
                      const std::string& state, const py::buffer& values,
                      std::optional<uint64_t> optimizer_step) {
    WriteRanges(ranges, state, values, optimizer_step, "set_state_ranges");
  }

  // A consistent copy of `range` ([begin, end); the whole flat space by
  // default) of `arrays` ("master" or state slots) at one step, into `out`
  // (len(arrays) * range size FP32 values, array after array); returns the
  // step (client/snapshot_reader.h).
  uint64_t ReadState(const std::vector<std::string>& arrays,
                     const py::buffer& out, std::optional<Range> range) {
    const uint64_t total = cluster_->layout().total_elems();
    const FlatRange r = range.has_value()
                            ? FlatRange{range->first, range->second}
                            : FlatRange{0, total};
    if (r.begin > r.end || r.end > total) {
      Raise(absl::InvalidArgumentError(absl::StrCat(
          "read_state: range [", r.begin, ", ", r.end,
          ") is not inside the flat space [0, ", total, ")")));
    }
    const uint64_t n = r.size();
    Bytes b = BufferOf(out, true, arrays.size() * n * sizeof(float),
                       "read_state");
    ConsistentSnapshot snap;
    {
      py::gil_scoped_release release;
      snap = Value(cluster_->ReadConsistentSnapshot(
          cluster_->layout(), r, arrays, SnapshotReadOptions{}));
    }
    float* dst = static_cast<float*>(b.data);
    for (size_t k = 0; k < arrays.size(); ++k) {
      std::memcpy(dst + k * n, snap.arrays[k].data(), n * sizeof(float));
    }
    return snap.step;
  }

  // Shared memory with the servers on this host for the caller's `ranges`
  // (ShardCluster::AttachSharedMemory): (servers attached, the first reason
  // one was not).
  std::pair<int, std::string> AttachSharedMemory(
      const std::vector<Range>& ranges) {
    const std::vector<FlatRange> r = ToRanges(ranges);
    py::gil_scoped_release release;
    std::string why;
    const int n = Value(cluster_->AttachSharedMemory(r, &why));
    return {n, why};
  }

  void DetachSharedMemory() {
    py::gil_scoped_release release;
    cluster_->DetachSharedMemory();
  }

  // The run's end, in server 0's store (client/live_run.h).
  void MarkRunEnded(uint64_t step) {
    py::gil_scoped_release release;
    Check(zeroshard::MarkRunEnded(*cluster_, cluster_->options().run_id,
                                  cluster_->options().attempt, step));
  }

  void ApplyStep(uint64_t step, uint64_t attempt, double timeout_s) {
    py::gil_scoped_release release;
    Check(cluster_->ApplyStep(step, attempt, absl::Seconds(timeout_s))
              .status());
  }

  py::list InspectAll() {
    std::vector<absl::StatusOr<ServerStatus>> all;
    {
      py::gil_scoped_release release;
      all = cluster_->InspectAll();
    }
    py::list out;
    for (auto& s : all) out.append(StatusDict(Value(std::move(s))));
    return out;
  }

  // A coordinated checkpoint of version `step` (the weights after `step`
  // optimizer steps) in `directory`: armed, written by every server and
  // committed (client/checkpoint_commit.h), keeping the newest `keep_last`
  // (0: all). `before_commit(folder)`, when given, runs once the shard files
  // are written and before the manifest that makes the folder complete, so
  // what it writes there is part of every complete checkpoint. Returns the
  // folder.
  std::string Checkpoint(uint64_t step, const std::string& directory,
                         const TrainingConfig& config, int keep_last,
                         double timeout_s, const py::object& before_commit) {
    const std::string folder =
        absl::StrCat(directory, "/", CheckpointFolderName(step));
    std::vector<ShardFile> files;
    {
      py::gil_scoped_release release;
      Check(cluster_->ArmCheckpoint(step, directory));
      files = Value(
          cluster_->WaitCheckpoint(step, directory, absl::Seconds(timeout_s)));
    }
    if (!before_commit.is_none()) before_commit(folder);
    CheckpointInfo info;
    info.step = step;
    info.layout = &cluster_->layout();
    info.config_fingerprint = ConfigFingerprint(config);
    info.schedule_total_steps = config.optimizer.total_steps;
    py::gil_scoped_release release;
    Check(CommitCheckpoint(directory, files, info, keep_last));
    return folder;
  }

  // Restores every server from `directory` (its newest checkpoint when
  // `step` is None); returns the version they all stand at and its folder.
  std::pair<uint64_t, std::string> Restore(const std::string& directory, std::optional<uint64_t> step,
                   double timeout_s) {
    py::gil_scoped_release release;
    std::vector<ServerRestore> r = Value(
        cluster_->Restore(directory, step, absl::Seconds(timeout_s)));
    const uint64_t v = r.empty() ? 0 : r.front().version;
    return {v, absl::StrCat(directory, "/", CheckpointFolderName(v))};
  }

  uint64_t total_elems() const { return cluster_->layout().total_elems(); }

  // Joins the run's `world` ranks through server 0's key-value store under
  // `name` (every rank passes the same), each call bounded by timeout_s.
  // backend "gloo" (host buffers) or "nccl" (device buffers, CUDA builds:
  // on CUDA device `cuda_device`, -1 for rank % devices, its collectives on
  // the cudaStream_t `cuda_stream`, 0 for one of its own).
  // The step's protocol over this cluster and `group` (None: one rank);
  // the returned object keeps both alive.
  std::unique_ptr<StepProtocol> StepProtocolFor(PyGroup* group, int rank,
                                                int world,
                                                double step_timeout_s,
                                                bool two_phase) {
    return MakePyStepProtocol(cluster_.get(),
                              group == nullptr ? nullptr : group->get(), rank,
                              world, step_timeout_s, two_phase);
  }

  std::unique_ptr<PyGroup> OpenGroup(int rank, int world,
                                     const std::string& name,
                                     double timeout_s,
                                     const std::string& backend,
                                     int cuda_device, uintptr_t cuda_stream) {
    if (!(timeout_s > 0)) {
      Raise(absl::InvalidArgumentError("timeout_s must be > 0"));
    }
    if (backend != "gloo" && backend != "nccl") {
      Raise(absl::InvalidArgumentError(absl::StrCat(
          "backend \"", backend, "\" is not gloo or nccl")));
    }
    Check(ValidateGroupShape(rank, world));
    py::gil_scoped_release release;
    std::unique_ptr<KvClient> kv = Value(cluster_->OpenKv(
        KvClient::Scope{cluster_->options().run_id, cluster_->options().attempt}));
    GroupOptions o;
    o.group = name;
    o.timeout = absl::Seconds(timeout_s);
    o.cuda_device = cuda_device;
    o.cuda_stream = reinterpret_cast<void*>(cuda_stream);
    std::unique_ptr<WorkerGroup> g =
        Value(CreateWorkerGroup(backend, rank, world, kv.get(), o));
    return std::make_unique<PyGroup>(std::move(kv), std::move(g));
  }

 private:
  // SetWeights of `state` over `ranges` (client/set_weights.h); `what`
  // names the Python call in a buffer error.
  void WriteRanges(const std::vector<Range>& ranges, const std::string& state,
                   const py::buffer& values,
                   std::optional<uint64_t> optimizer_step, const char* what) {
    const std::vector<FlatRange> r = ToRanges(ranges);
    Bytes b = BufferOf(values, false, RangesBytes(r, DType::kFp32), what);
    const float* p = static_cast<const float*>(b.data);
    py::gil_scoped_release release;
    Check(cluster_->SetStateRanges(
        r, absl::MakeConstSpan(p, b.size / sizeof(float)), state,
        optimizer_step));
  }

  void CheckServer(int k) const {
    if (k < 0 || k >= cluster_->num_servers()) {
      Raise(absl::InvalidArgumentError(absl::StrCat(
          "server ", k, " is not in [0, ", cluster_->num_servers(), ")")));
    }
  }

  std::unique_ptr<ShardCluster> cluster_;
  std::optional<InitOptions> init_;  // the Init this cluster sent
  // Declared after cluster_: stopped (joined) before the cluster goes.
  std::unique_ptr<CopyAudit> audit_;
  uint64_t audit_every_ = 0;
};

}  // namespace
}  // namespace zeroshard

PYBIND11_MODULE(_zeroshard, m) {
  using namespace zeroshard;
  m.doc() = "zeroshard's client library and configuration parser";
  static py::exception<StatusError> error(m, "ZeroshardError",
                                          PyExc_RuntimeError);
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const StatusError& e) {
      error(e.what());
    }
  });

  m.def(
      "resolve_config",
      [](const std::string& text, std::optional<int> servers,
         std::optional<int> workers, std::optional<uint64_t> steps) {
        ConfigOverrides o{servers, workers, steps};
        ParsedConfig p = Value(ParseTrainingConfig(text, o));
        return std::make_pair(ResolvedConfigJson(p.config), p.warnings);
      },
      py::arg("text"), py::arg("servers") = py::none(),
      py::arg("workers") = py::none(), py::arg("steps") = py::none(),
      "Parses and resolves a DeepSpeed-style JSON configuration as "
      "zeroshard-train does; returns (resolved JSON, warnings).");
  // The resolved configuration, parsed once per process and handed to the
  // calls that need it (Layout, Cluster.init, Cluster.checkpoint,
  // LossScaler) as this object rather than as text.
  py::class_<TrainingConfig>(m, "ResolvedConfig")
      .def(py::init([](const std::string& resolved_json) {
             return Value(ParseResolvedConfig(resolved_json));
           }),
           py::arg("resolved_json"))
      .def_property_readonly("json", &ResolvedConfigJson)
      .def(
          "learning_rate_at",
          [](const TrainingConfig& c, uint64_t t) {
            return LearningRateAt(c.optimizer, t);
          },
          "The learning rate of optimizer step t (1-based) under the "
          "schedule.");
  BindCheckpointFiles(m);
  BindOptimizerRules(m);
  m.def(
      "has_nccl",
      []() {
#ifdef ZS_HAVE_NCCL
        return true;
#else
        return false;
#endif
      },
      "Whether this build has the NCCL collectives (a CUDA build).");
  m.def(
      "make_run_tokens",
      [](const std::string& dir) { return Value(MakeRunTokens(dir)); },
      "Writes fresh per-run bearer tokens into dir; returns its absolute path.");

  // The loss scale of FP16 training, DeepSpeed's dynamic loss scaling
  // (common/loss_scaler.h), configured from the resolved configuration.
  py::class_<LossScaler>(m, "LossScaler")
      .def(py::init([](const TrainingConfig& config) {
        return Value(LossScaler::Create(LossScalerOptionsFor(config)));
      }))
      .def_property_readonly("scale", &LossScaler::scale)
      .def("update", [](LossScaler& s, bool overflow) {
        return Value(s.Update(overflow));
      }, "Records a step's overflow flag; True when the step is applied.")
      .def("state", [](const LossScaler& s) {
        const LossScalerState& st = s.state();
        py::dict d;
        d["scale"] = st.scale;
        d["hysteresis_left"] = st.hysteresis_left;
        d["iteration"] = st.iteration;
        d["last_overflow_iteration"] = st.last_overflow_iteration;
        d["overflows_at_min"] = st.overflows_at_min;
        d["skipped_steps"] = st.skipped_steps;
        return d;
      })
      .def("restore", [](LossScaler& s, const py::dict& d) {
        LossScalerState st;
        st.scale = d["scale"].cast<double>();
        st.hysteresis_left = d["hysteresis_left"].cast<int>();
        st.iteration = d["iteration"].cast<uint64_t>();
        st.last_overflow_iteration = d["last_overflow_iteration"].cast<int64_t>();
        st.overflows_at_min = d["overflows_at_min"].cast<int>();
        st.skipped_steps = d["skipped_steps"].cast<uint64_t>();
        Check(s.Restore(st));
      });
  py::class_<FlatLayout>(m, "Layout")
      .def(py::init(&MakeLayout), py::arg("units"), py::arg("servers"),
           py::arg("workers"), py::arg("arch") = "torch",
           py::arg("resolved") = nullptr)
      .def_property_readonly("total_elems", &FlatLayout::total_elems)
      .def_property_readonly("param_elems", &FlatLayout::param_elems)
      .def_property_readonly("num_servers", &FlatLayout::num_servers)
      .def_property_readonly("num_workers", &FlatLayout::num_workers)
      .def("tensors",
           [](const FlatLayout& l) {
             std::vector<std::tuple<std::string, uint64_t, uint64_t, int>> out;
             for (const TensorInfo& t : l.tensors()) {
               out.emplace_back(t.name, t.offset, t.numel, t.unit);
             }
             return out;
           },
           "(name, flat offset, elements, unit) per tensor, in order.")
      .def("units",
           [](const FlatLayout& l) {
             std::vector<std::tuple<std::string, uint64_t, uint64_t, uint64_t>>
                 out;
             for (const UnitInfo& u : l.units()) {
               out.emplace_back(u.name, u.offset, u.numel, u.padded);
             }
             return out;
           },
           "(name, flat offset, elements, padded elements) per unit.")
      .def("server_range",
           [](const FlatLayout& l, uint32_t k) {
             if (k >= l.num_servers()) {
               Raise(absl::OutOfRangeError(absl::StrCat(
                   "server ", k, " of ", l.num_servers())));
             }
             FlatRange r = l.ServerRange(k);
             return Range{r.begin, r.end};
           })
      .def("worker_ranges", [](const FlatLayout& l, uint32_t r) {
        if (r >= l.num_workers()) {
          Raise(absl::OutOfRangeError(
              absl::StrCat("worker ", r, " of ", l.num_workers())));
        }
        std::vector<Range> out;
        for (const FlatRange& f : l.WorkerRanges(r)) {
          out.emplace_back(f.begin, f.end);
        }
        return out;
      });

  py::class_<PyCluster>(m, "Cluster")
      .def(py::init<std::vector<std::string>, const FlatLayout&,
                    const std::string&, const std::string&,
                    const std::string&, uint64_t, double, int>(),
           py::arg("addresses"), py::arg("layout"),
           py::arg("credentials_dir") = "", py::arg("role") = "worker",
           py::arg("run_id") = "", py::arg("attempt") = 0,
           py::arg("call_timeout_s") = 120.0, py::arg("replicas") = 1)
      .def("init", &PyCluster::Init, py::arg("resolved_config"),
           py::arg("groups") = py::none(), py::arg("num_workers") = 0,
           py::arg("chunk_elems") = 0, py::arg("replace") = false)
      .def("set_master_weights", &PyCluster::SetMasterWeights)
      .def("set_master_weight_ranges", &PyCluster::SetMasterWeightRanges,
           py::arg("ranges"), py::arg("values"))
      .def("gather", &PyCluster::Gather, py::arg("ranges"), py::arg("dtype"),
           py::arg("out"), py::arg("min_version") = -1)
      .def("push", &PyCluster::Push, py::arg("step"), py::arg("worker"),
           py::arg("ranges"), py::arg("dtype"), py::arg("grad"),
           py::arg("coefficient") = 1.0, py::arg("skip") = false,
           py::arg("prepare") = false, py::arg("known") = false,
           py::arg("settings") = py::none())
      .def("set_state_ranges", &PyCluster::SetStateRanges, py::arg("ranges"),
           py::arg("state"), py::arg("values"),
           py::arg("optimizer_step") = py::none())
      .def("read_state", &PyCluster::ReadState, py::arg("arrays"),
           py::arg("out"), py::arg("range") = py::none())
      .def("attach_shared_memory", &PyCluster::AttachSharedMemory,
           py::arg("ranges"))
      .def("detach_shared_memory", &PyCluster::DetachSharedMemory)
      .def("apply_step", &PyCluster::ApplyStep, py::arg("step"),
           py::arg("attempt") = 0, py::arg("timeout_s") = 120.0)
      .def("inspect_all", &PyCluster::InspectAll)
      .def("mark_run_ended", &PyCluster::MarkRunEnded, py::arg("step"))
      .def("gone_servers", &PyCluster::GoneServers)
      .def("answers_again", &PyCluster::AnswersAgain, py::arg("k"),
           py::arg("timeout_s") = 0.5)
      .def("revive_server", &PyCluster::ReviveServer, py::arg("k"),
           py::arg("directory"), py::arg("step"))
      .def("mark_server_back", &PyCluster::MarkServerBack, py::arg("k"))
      .def("catch_ups", &PyCluster::CatchUps, py::arg("directory"),
           py::arg("timeout_s") = 120.0, py::keep_alive<0, 1>())
      .def("audit_start", &PyCluster::AuditStart, py::arg("step"),
           py::arg("every"))
      .def("audit_finish", &PyCluster::AuditFinish)
      .def("audits_compared", &PyCluster::AuditsCompared)
      .def("checkpoint", &PyCluster::Checkpoint, py::arg("step"),
           py::arg("directory"), py::arg("resolved_config"),
           py::arg("keep_last") = 0, py::arg("timeout_s") = 300.0,
           py::arg("before_commit") = py::none())
      .def("restore", &PyCluster::Restore, py::arg("directory"),
           py::arg("step") = py::none(), py::arg("timeout_s") = 300.0)
      .def("open_group", &PyCluster::OpenGroup, py::arg("rank"),
           py::arg("world"), py::arg("name"), py::arg("timeout_s") = 120.0,
           py::arg("backend") = "gloo", py::arg("cuda_device") = -1,
           py::arg("cuda_stream") = 0)
      .def("step_protocol", &PyCluster::StepProtocolFor, py::arg("group"),
           py::arg("rank"), py::arg("world"), py::arg("step_timeout_s"),
           py::arg("two_phase"), py::keep_alive<0, 1>(),
           py::keep_alive<0, 2>())
      .def_property_readonly("total_elems", &PyCluster::total_elems);

  py::class_<PyGroup>(m, "Group")
      .def_property_readonly("rank", &PyGroup::rank)
      .def_property_readonly("size", &PyGroup::size)
      .def_property_readonly("backend", &PyGroup::backend)
      .def("reduce_scatter", &PyGroup::ReduceScatter, py::arg("inp"),
           py::arg("out"), py::arg("scale") = 1.0f)
      .def("all_gather_in_place", &PyGroup::AllGatherInPlace)
      .def("all_reduce", &PyGroup::AllReduce, py::arg("values"),
           py::arg("op") = "sum")
      .def("broadcast", &PyGroup::Broadcast, py::arg("data"), py::arg("root"))
      .def("barrier", &PyGroup::Barrier);

  BindRunOutputs(m);
  BindStepProtocol(m);
  BindReplicaCatchUps(m);
}
