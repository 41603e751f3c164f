// Writes the seed corpus of every fuzz target (tests/fuzz/corpus/<name>/):
// a few valid inputs of each kind and a few near misses, built with the
// same APIs the server and clients use, so the fuzzers start past the
// outer checks. Deterministic; rerun after a format change and commit the
// result:
//
//   build/tests/zs_fuzz_seeds tests/fuzz/corpus
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "common/checkpoint_manifest.h"
#include "common/safetensors.h"
#include "server/shard_checkpoint.h"
#include "tests/fuzz/fuzz_shard.h"
#include "tests/fuzz/fuzz_util.h"
#include "wire/push_grad_codec.h"
#include "data/token_file.h"

namespace zeroshard::fuzz {
namespace {

namespace fs = std::filesystem;

class Corpus {
 public:
  Corpus(const fs::path& root, const std::string& name) : dir_(root / name) {
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void Add(const std::string& label, const std::string& bytes) {
    char name[64];
    std::snprintf(name, sizeof(name), "seed-%02d-", n_++);
    std::ofstream out(dir_ / (name + label), std::ios::binary);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    if (!out) {
      std::fprintf(stderr, "cannot write %s\n", (dir_ / name).c_str());
      std::exit(1);
    }
  }

 private:
  fs::path dir_;
  int n_ = 0;
};

void Check(const absl::Status& s) {
  if (!s.ok()) {
    std::fprintf(stderr, "make_seeds: %s\n", s.ToString().c_str());
    std::exit(1);
  }
}

std::string Floats(size_t n, float start) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = start + 0.25f * static_cast<float>(i);
  return std::string(reinterpret_cast<const char*>(v.data()), n * 4);
}

std::string Serialized(const google::protobuf::MessageLite& m) {
  return m.SerializeAsString();
}

v1::PushGradMessage HeaderMsg(const std::string& run_id, bool known) {
  v1::PushGradMessage m;
  v1::PushGradHeader* h = m.mutable_header();
  h->set_step(0);
  h->set_run_id(run_id);
  h->set_coefficient_known(known);
  if (known) h->set_coefficient(0.5);
  return m;
}

v1::PushGradMessage PieceMsg(uint64_t offset, v1::DType dtype,
                             std::string data) {
  v1::PushGradMessage m;
  m.mutable_piece()->set_offset(offset);
  m.mutable_piece()->set_dtype(dtype);
  m.mutable_piece()->set_data(std::move(data));
  return m;
}

v1::PushGradMessage CommitMsg(double coefficient, bool prepare) {
  v1::PushGradMessage m;
  m.mutable_commit()->set_coefficient(coefficient);
  m.mutable_commit()->set_prepare(prepare);
  return m;
}

// The canonical raw form EncodePushPiece writes, as contiguous bytes.
std::string EncodedPiece(uint64_t offset, DType dtype,
                         const std::string& data) {
  grpc::ByteBuffer b =
      EncodePushPiece(offset, dtype, data.data(), data.size(), nullptr);
  std::vector<grpc::Slice> slices;
  (void)b.Dump(&slices);
  std::string out;
  for (const grpc::Slice& s : slices) {
    out.append(reinterpret_cast<const char*>(s.begin()), s.size());
  }
  return out;
}

std::string ReadFile(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)),
                     std::istreambuf_iterator<char>());
}

void PushReceiver(const fs::path& root) {
  Corpus c(root, "push_receiver");
  const std::string run = FuzzInit(1, 0).run_id();
  const std::string bf16(128, '\x3f');
  for (int raw = 0; raw < 2; ++raw) {
    const uint8_t flags = static_cast<uint8_t>(raw | 2);
    auto rec = [&](FuzzInputWriter& w, const v1::PushGradMessage& m) {
      w.Byte(0).Byte(0).Record(Serialized(m));
    };
    FuzzInputWriter commit;
    commit.Byte(flags);
    rec(commit, HeaderMsg(run, false));
    rec(commit, PieceMsg(0, v1::DTYPE_FP32, Floats(64, 1)));
    rec(commit, PieceMsg(64, v1::DTYPE_BF16, bf16));
    rec(commit, CommitMsg(1.0, false));
    c.Add(raw ? "raw-commit" : "proto-commit", commit.bytes());

    FuzzInputWriter known;
    known.Byte(flags);
    rec(known, HeaderMsg(run, true));
    rec(known, PieceMsg(128, v1::DTYPE_FP32, Floats(200, -3)));
    c.Add(raw ? "raw-known" : "proto-known", known.bytes());

    FuzzInputWriter prepare;
    prepare.Byte(flags);
    rec(prepare, HeaderMsg(run, false));
    rec(prepare, PieceMsg(0, v1::DTYPE_FP32, Floats(448, 0)));
    rec(prepare, CommitMsg(0.25, true));
    c.Add(raw ? "raw-prepare" : "proto-prepare", prepare.bytes());
  }
  FuzzInputWriter split;  // the raw decoder with the piece cut mid-element
  split.Byte(3);
  split.Byte(0).Byte(0).Record(Serialized(HeaderMsg(run, false)));
  split.Byte(7).Byte(130).Record(
      Serialized(PieceMsg(64, v1::DTYPE_FP32, Floats(64, 2))));
  split.Byte(0).Byte(0).Record(Serialized(CommitMsg(1.0, false)));
  c.Add("raw-split", split.bytes());
  FuzzInputWriter overlap;
  overlap.Byte(2);
  overlap.Byte(0).Byte(0).Record(Serialized(HeaderMsg(run, false)));
  overlap.Byte(0).Byte(0).Record(
      Serialized(PieceMsg(0, v1::DTYPE_FP32, Floats(64, 1))));
  overlap.Byte(0).Byte(0).Record(
      Serialized(PieceMsg(32, v1::DTYPE_FP32, Floats(64, 1))));
  c.Add("overlap", overlap.bytes());
  // Pieces in the shared-memory region (flag 4 points them at it): applied
  // at once, buffered until a commit, and one past the region's end.
  auto region_piece = [](uint64_t offset, uint64_t region_offset,
                         uint64_t bytes) {
    v1::PushGradMessage m;
    v1::PushGradRegionPiece* p = m.mutable_region_piece();
    p->set_offset(offset);
    p->set_dtype(v1::DTYPE_FP32);
    p->set_region(1);
    p->set_region_offset(region_offset);
    p->set_bytes(bytes);
    return Serialized(m);
  };
  for (bool known : {true, false}) {
    FuzzInputWriter w;
    w.Byte(2 | 4);
    w.Byte(0).Byte(0).Record(Serialized(HeaderMsg(run, known)));
    w.Byte(0).Byte(0).Record(region_piece(0, 4096, 256));
    w.Byte(0).Byte(0).Record(region_piece(64, 4096 + 512, 1024));
    if (!known) w.Byte(0).Byte(0).Record(Serialized(CommitMsg(1.0, false)));
    c.Add(known ? "region-known" : "region-commit", w.bytes());
  }
  FuzzInputWriter past;
  past.Byte(2 | 4);
  past.Byte(0).Byte(0).Record(Serialized(HeaderMsg(run, true)));
  past.Byte(0).Byte(0).Record(region_piece(0, 4 * 4096 - 128, 256));
  c.Add("region-past-end", past.bytes());
  FuzzInputWriter no_header;
  no_header.Byte(0).Byte(0).Byte(0).Record(
      Serialized(PieceMsg(0, v1::DTYPE_FP32, Floats(8, 1))));
  c.Add("no-header", no_header.bytes());
}

void PushGradCodec(const fs::path& root) {
  Corpus c(root, "push_grad_codec");
  FuzzInputWriter a;
  a.Byte(5).Byte(9).Byte(0).Raw(EncodedPiece(64, DType::kFp32, Floats(32, 1)));
  c.Add("encoded-fp32", a.bytes());
  FuzzInputWriter b;
  b.Byte(3).Byte(0).Byte(0).Raw(
      EncodedPiece(1 << 20, DType::kBf16, std::string(64, '\x40')));
  c.Add("encoded-bf16", b.bytes());
  FuzzInputWriter h;
  h.Byte(0).Byte(0).Byte(0).Raw(Serialized(HeaderMsg("run-1", true)));
  c.Add("header", h.bytes());
  FuzzInputWriter p;
  p.Byte(2).Byte(1).Byte(0).Raw(
      Serialized(PieceMsg(7, v1::DTYPE_FP32, Floats(3, 0))));
  c.Add("protobuf-piece", p.bytes());
  FuzzInputWriter m;
  m.Byte(0).Byte(0).Byte(0).Raw(Serialized(CommitMsg(2.0, true)));
  c.Add("commit", m.bytes());
  FuzzInputWriter e;
  e.Byte(1).Byte(4).Byte(1).Uint(1 << 12, 8).Byte(1).Raw(Floats(16, 5));
  c.Add("encode", e.bytes());
  // The crash this fuzzer found in CI: a piece length as a 10-byte varint
  // with bits past the 64th, which the decoder once read as 0.
  FuzzInputWriter o;
  o.Byte(2).Byte(1).Byte(0).Raw(
      std::string("\x12\x80\x80\x80\x80\x80\x80\x80\x80\x80\x02", 11));
  c.Add("overflowing-length", o.bytes());
}

void GatherPlan(const fs::path& root) {
  Corpus c(root, "gather_plan");
  const FlatRange own = FuzzShard(2, 1)->owned();
  v1::GatherRequest one;
  auto* r = one.add_ranges();
  r->set_offset(own.begin);
  r->set_length(own.size());
  one.set_dtype(v1::DTYPE_BF16);
  c.Add("whole", Serialized(one));
  v1::GatherRequest two;
  for (uint64_t at : {own.begin + 64, own.begin}) {
    auto* x = two.add_ranges();
    x->set_offset(at);
    x->set_length(32);
  }
  two.set_dtype(v1::DTYPE_FP32);
  two.set_min_version(3);
  two.set_max_message_bytes(100);
  c.Add("two-ranges", Serialized(two));
  v1::GatherRequest overlap = two;
  overlap.mutable_ranges(0)->set_offset(own.begin + 16);
  c.Add("overlap", Serialized(overlap));
  v1::GatherRequest outside = one;
  outside.mutable_ranges(0)->set_offset(own.begin - 8);
  c.Add("outside", Serialized(outside));
  v1::GatherRequest region = two;  // an odd id names the open region
  region.set_region(1);
  region.set_region_offset(4096 + 8);
  c.Add("region", Serialized(region));
  region.set_region_offset(4 * 4096 - 64);
  c.Add("region-past-end", Serialized(region));
}

void Init(const fs::path& root) {
  Corpus c(root, "init");
  c.Add("one-server", Serialized(FuzzInit(1, 0)));
  c.Add("server-1-of-2", Serialized(FuzzInit(2, 1)));
  v1::InitRequest zeros = FuzzInit(1, 0);
  zeros.mutable_init()->set_zeros(true);
  zeros.set_chunk_elems(0);
  c.Add("zeros-default-chunk", Serialized(zeros));
  v1::InitRequest four = FuzzInit(3, 2);
  four.mutable_manifest()->set_partition_count(4);
  c.Add("partitions", Serialized(four));
  v1::InitRequest small = FuzzInit(1, 0);
  small.set_chunk_elems(100);
  c.Add("bad-chunk", Serialized(small));
  v1::InitRequest wide = FuzzInit(2, 0);
  for (int i = 0; i < 3; ++i) {
    v1::UnitSpec* u = wide.mutable_manifest()->add_units();
    *u = wide.manifest().units(i % 2);
    u->set_name("extra" + std::to_string(i));
    u->mutable_tensors(0)->set_name("extra" + std::to_string(i) + ".t");
  }
  wide.set_num_workers(2);
  wide.mutable_manifest()->set_partition_count(2);
  c.Add("more-units", Serialized(wide));
}

void SetWeights(const fs::path& root) {
  Corpus c(root, "set_weights");
  auto piece = [](uint64_t offset, v1::DType dtype, std::string data) {
    v1::WeightPiece p;
    p.set_offset(offset);
    p.set_dtype(dtype);
    p.set_data(std::move(data));
    return Serialized(p);
  };
  FuzzInputWriter ok;
  ok.Record(piece(0, v1::DTYPE_FP32, Floats(64, 1)))
      .Record(piece(64, v1::DTYPE_BF16, std::string(64, '\x3f')));
  c.Add("two-pieces", ok.bytes());
  FuzzInputWriter bad;
  bad.Record(piece(0, v1::DTYPE_FP32, Floats(4, 1)))
      .Record(piece(1 << 30, v1::DTYPE_FP32, Floats(4, 1)));
  c.Add("outside", bad.bytes());
  FuzzInputWriter odd;
  odd.Record(piece(8, v1::DTYPE_BF16, std::string(3, '\x01')));
  c.Add("odd-bytes", odd.bytes());
}

void KvStore(const fs::path& root) {
  Corpus c(root, "kv_store");
  FuzzInputWriter w;  // wait for two keys, set them, read one
  w.Byte(0);
  w.Byte(2).Byte(0).Byte(2).Record("gloo/0").Record("gloo/1");
  w.Byte(0).Byte(0).Record("gloo/0").Record("10.0.0.1:7000");
  w.Byte(4).Byte(0);
  w.Byte(0).Byte(0).Record("gloo/1").Record("10.0.0.2:7000");
  w.Byte(1).Byte(0).Record("gloo/0");
  w.Byte(6).Byte(0);
  c.Add("rendezvous", w.bytes());
  FuzzInputWriter a;  // a newer attempt drops the older one's keys
  a.Byte(1);
  a.Byte(0).Byte(1).Record("k").Record("v1");
  a.Byte(2).Byte(1).Byte(1).Record("other");
  a.Byte(0).Byte(1 | 4).Record("k").Record("v2");
  a.Byte(3).Byte(0);
  a.Byte(5).Byte(2);
  a.Byte(0)
      .Byte(3)
      .Record("custom-run")
      .Record("k")
      .Record(std::string(80, 'x'));
  c.Add("attempts-limits", a.bytes());
}

void Config(const fs::path& root, const fs::path& examples) {
  Corpus c(root, "config");
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(examples)) {
    if (e.path().extension() == ".json") files.push_back(e.path());
  }
  std::sort(files.begin(), files.end());
  for (const fs::path& p : files) {
    c.Add(p.stem().string(), std::string(1, '\0') + ReadFile(p));
  }
  c.Add("overrides", std::string("\x07\x04\x02\x10", 4) + ReadFile(files[0]));
}

CheckpointManifest SampleManifest() {
  CheckpointManifest m;
  m.step = 30;
  m.num_servers = 2;
  m.total_elems = 1024;
  m.model_fingerprint = 11;
  m.config_fingerprint = 12;
  m.model.partition_count = 2;
  UnitSpec u;
  u.name = "unit";
  u.tensors.push_back({"w", {32, 32}});
  m.model.units.push_back(u);
  m.data_position = 240;
  m.shards.push_back({0, {0, 512}, ShardFileName(0, 2), 123, 6200});
  m.shards.push_back({1, {512, 1024}, ShardFileName(1, 2), 456, 6200});
  return m;
}

void Manifest(const fs::path& root) {
  Corpus c(root, "checkpoint_manifest");
  CheckpointManifest m = SampleManifest();
  c.Add("two-servers", CheckpointManifestJson(m));
  m.shards[1].owned.begin = 500;
  c.Add("overlap", CheckpointManifestJson(m));
  m = SampleManifest();
  m.shards[0].file = "../escape.bin";
  c.Add("bad-file", CheckpointManifestJson(m));
}

void Safetensors(const fs::path& root, const fs::path& tmp) {
  Corpus c(root, "safetensors");
  std::vector<float> a(6, 1.5f), b(4, -2.0f);
  std::vector<SafetensorsTensorView> views = {
      {"a", {2, 3}, absl::MakeConstSpan(a)},
      {"b", {4}, absl::MakeConstSpan(b)}};
  absl::StatusOr<std::string> header =
      SafetensorsHeader(views, {{"format", "pt"}});
  Check(header.status());
  FuzzInputWriter h;
  h.Byte(0).Uint(40, 4).Raw(*header);
  c.Add("header", h.bytes());
  const fs::path file = tmp / "seed.safetensors";
  Check(WriteSafetensors(file.string(), views, {{"format", "pt"}}));
  c.Add("file", std::string(1, '\1') + ReadFile(file));
  // BF16 and F16 tensors, which the writer does not make.
  const std::string json =
      R"({"h":{"dtype":"F16","shape":[2],"data_offsets":[0,4]},)"
      R"("g":{"dtype":"BF16","shape":[1,2],"data_offsets":[4,8]},)"
      R"("i":{"dtype":"I64","shape":[1],"data_offsets":[8,16]}})";
  std::string body = json;
  while (body.size() % 8 != 0) body += ' ';
  FuzzInputWriter f;
  f.Byte(1).Uint(body.size(), 8).Raw(body).Raw(std::string(16, '\x3c'));
  c.Add("half-types", f.bytes());
}

void ShardCheckpoint(const fs::path& root, const fs::path& tmp) {
  Corpus c(root, "shard_checkpoint");
  std::shared_ptr<ModelShard> shard = FuzzShard(2, 1);
  const uint64_t n = shard->owned().size();
  std::vector<float> master(n, 0.5f), m(n, 0.0f), v(n, 1.0f);
  ShardCheckpointContents contents{shard->CheckpointHeader(), master.data(),
                                   {m.data(), v.data()}};
  for (size_t i = 0; i < shard->store().num_chunks(); ++i) {
    contents.header.add_chunk_versions(3);
    contents.header.add_chunk_adam_steps(3);
  }
  const fs::path file = tmp / "seed-shard.bin";
  Check(WriteShardCheckpoint(file.string(), contents).status());
  const std::string bytes = ReadFile(file);
  FuzzInputWriter a;
  a.Byte(0).Uint(3, 8).Uint(40, 8).Raw(bytes);
  c.Add("valid", a.bytes());
  FuzzInputWriter b;  // the harness rewrites the checksum
  b.Byte(1 | 2).Uint(0, 8).Uint(1000, 8).Raw(bytes);
  c.Add("fixed-sum", b.bytes());
  FuzzInputWriter t;
  t.Byte(1).Uint(0, 8).Uint(1, 8).Raw(bytes.substr(0, bytes.size() - 12));
  c.Add("truncated", t.bytes());
}

void TokenFiles(const fs::path& root, const fs::path& tmp) {
  Corpus c(root, "token_file");
  const std::vector<uint16_t> tokens = {1, 2, 3, 500, 7, 0};
  const fs::path shard = tmp / "seed-shard.bin";
  Check(WriteLlmcFile(shard.string(), tokens));
  const std::string llmc = ReadFile(shard);
  FuzzInputWriter a;
  a.Byte(0).Uint(511, 2).Raw(llmc);  // llmc, vocab 512
  c.Add("llmc", a.bytes());
  FuzzInputWriter b;
  b.Byte(2).Uint(499, 2).Raw(llmc);  // auto, vocab 500: token 500 is out
  c.Add("llmc-oov", b.bytes());
  FuzzInputWriter d;
  d.Byte(2).Uint(511, 2).Raw(llmc.substr(0, llmc.size() - 2));
  c.Add("llmc-short", d.bytes());
  FuzzInputWriter u;
  u.Byte(1).Uint(1023, 2).Raw(llmc.substr(kLlmcHeaderBytes));
  c.Add("uint16", u.bytes());
}

}  // namespace
}  // namespace zeroshard::fuzz

int main(int argc, char** argv) {
  namespace fs = std::filesystem;
  using namespace zeroshard::fuzz;
  if (argc != 2) {
    std::fprintf(stderr,
                 "usage: %s CORPUS_DIR (run from the repository root)\n",
                 argv[0]);
    return 2;
  }
  const fs::path root = argv[1];
  const fs::path tmp = fs::temp_directory_path() /
                       ("zs-fuzz-seeds-" + std::to_string(::getpid()));
  fs::create_directories(tmp);
  PushReceiver(root);
  PushGradCodec(root);
  GatherPlan(root);
  Init(root);
  SetWeights(root);
  KvStore(root);
  Config(root, "examples");
  Manifest(root);
  Safetensors(root, tmp);
  ShardCheckpoint(root, tmp);
  TokenFiles(root, tmp);
  fs::remove_all(tmp);
  std::printf("seeds written under %s\n", root.c_str());
  return 0;
}
