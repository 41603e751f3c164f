// The registered rules over the wire: a server Init'ed with kind RULE (the
// rule's name and params as the proto carries them), its weights set by
// SetWeights, each step pushed over gRPC and gathered back, matches torch's
// own optimizer class bit for bit (tests/fixtures/rules_golden.json, made
// by make_rules_golden.py); a rule this build has not registered is
// refused at Init, naming those it has.
#include <cstring>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/dtype.h"
#include "common/layout.h"
#include "common/optimizer_rules.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/server/auth_test_util.h"
#include "tests/server/server_test_util.h"
#include "tests/support/golden_json.h"
#include "wire/proto_convert.h"

namespace zeroshard {
namespace {

using json = nlohmann::json;

// One tensor of n elements.
v1::ModelManifest RulesManifest(uint64_t n) {
  ModelManifest m;
  UnitSpec unit{"model", {}};
  unit.tensors.push_back(TensorSpec{"w", {static_cast<int64_t>(n)}});
  m.units = {unit};
  m.partition_count = 1;
  return ToProto(m);
}

TEST(RegisteredRulesRpcTest, EachCaseMatchesTorchOverTheWire) {
  std::ifstream in("tests/fixtures/rules_golden.json");
  ASSERT_TRUE(in.good()) << "tests run from the repo root";
  const json doc = json::parse(in);
  int cases = 0;
  for (const json& c : doc.at("cases")) {
    SCOPED_TRACE(c.at("name").get<std::string>());
    const RuleInfo* rule = FindRule(c.at("rule").get<std::string>());
    ASSERT_NE(rule, nullptr);
    std::map<std::string, double> params;
    for (const auto& [key, v] : c.at("params").items()) {
      params[key] = v.is_boolean() ? (v.get<bool>() ? 1.0 : 0.0) : v.get<double>();
    }
    absl::StatusOr<OptimizerConfig> config = MakeRuleConfig(*rule, params);
    ASSERT_TRUE(config.ok()) << config.status();
    const std::vector<float> param0 = testing::GoldenFloats(c.at("param0"));
    const uint64_t n = param0.size();
    const v1::ModelManifest manifest = RulesManifest(n);
    absl::StatusOr<FlatLayout> layout = FlatLayout::Create(FromProto(manifest), 1, 1);
    ASSERT_TRUE(layout.ok()) << layout.status();
    const uint64_t total = layout->total_elems();

    testing::TestServer server = testing::StartServer(0, 1);
    ASSERT_NE(server.stub, nullptr);
    v1::InitRequest init = testing::MakeInit(manifest, 1, 0, /*seed=*/3, 64);
    *init.mutable_optimizer() = ToProto(*config);
    ASSERT_EQ(init.optimizer().kind(), v1::OptimizerConfig::RULE);
    const grpc::Status inited = testing::InitServer(*server.stub, init);
    ASSERT_TRUE(inited.ok()) << inited.error_message();
    ASSERT_TRUE(testing::SetWeightsAs(*server.stub, 0, param0).ok());

    const bool bf16 = c.at("grad_dtype") == "bf16";
    const double coefficient = c.at("coefficient").get<double>();
    uint64_t step = 0;
    for (const json& st : c.at("steps")) {
      SCOPED_TRACE(absl::StrCat("t ", st.at("t").get<int>()));
      testing::Piece piece;
      if (bf16) {
        std::vector<uint16_t> g = st.at("grad").get<std::vector<uint16_t>>();
        g.resize(total, 0);
        piece = testing::Bf16Piece(0, g);
      } else {
        std::vector<float> g = testing::GoldenFloats(st.at("grad"));
        g.resize(total, 0.0f);
        piece = testing::Fp32Piece(0, g);
      }
      const grpc::Status pushed = testing::Push(
          *server.stub, testing::Header(step), {piece}, coefficient, false);
      ASSERT_TRUE(pushed.ok()) << pushed.error_message();
      ++step;
      const std::vector<float> got = testing::GatherFp32(*server.stub, {0, n});
      const std::vector<float> want = testing::GoldenFloats(st.at("param"));
      ASSERT_EQ(got.size(), n);
      ASSERT_EQ(std::memcmp(got.data(), want.data(), n * sizeof(float)), 0);
    }
    const v1::InspectResponse info = testing::Inspect(*server.stub);
    EXPECT_EQ(info.adam_step(), step);
    EXPECT_EQ(info.optimizer().rule(), rule->name);
    ++cases;
  }
  EXPECT_EQ(cases, 5);
}

// One server's Init naming `rule` on the wire (kind RULE), no params.
v1::InitRequest RuleInit(const std::string& rule) {
  v1::InitRequest init = testing::MakeInit(RulesManifest(64), 1, 0, 3, 64);
  init.mutable_optimizer()->set_kind(v1::OptimizerConfig::RULE);
  init.mutable_optimizer()->set_rule(rule);
  return init;
}

TEST(RegisteredRulesRpcTest, AnUnregisteredRuleIsRefusedAtInit) {
  testing::TestServer server = testing::StartServer(0, 1);
  ASSERT_NE(server.stub, nullptr);
  v1::InitRequest init = RuleInit("rmsprop");
  grpc::Status s = testing::InitServer(*server.stub, init);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("sgd, adagrad"), std::string::npos)
      << s.error_message();
  // A param the rule does not take, and a rule name on another kind.
  init.mutable_optimizer()->set_rule("sgd");
  (*init.mutable_optimizer()->mutable_rule_params())["betas"] = 0.9;
  s = testing::InitServer(*server.stub, init);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("betas"), std::string::npos) << s.error_message();
  init.mutable_optimizer()->clear_rule_params();
  init.mutable_optimizer()->set_kind(v1::OptimizerConfig::ADAMW);
  s = testing::InitServer(*server.stub, init);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << s.error_message();
}

// Every rule can be named on the wire: kind RULE with "lion" is Lion (its
// params in the common fields; rule_params refused), and the server keeps
// Lion's one slot.
TEST(RegisteredRulesRpcTest, ARuleWithAKindIsNamedOnTheWireToo) {
  testing::TestServer server = testing::StartServer(0, 1);
  ASSERT_NE(server.stub, nullptr);
  v1::InitRequest init = RuleInit("lion");
  (*init.mutable_optimizer()->mutable_rule_params())["momentum"] = 0.9;
  grpc::Status s = testing::InitServer(*server.stub, init);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("lr, beta1, beta2, eps and weight_decay"),
            std::string::npos) << s.error_message();
  init.mutable_optimizer()->clear_rule_params();
  s = testing::InitServer(*server.stub, init);
  ASSERT_TRUE(s.ok()) << s.error_message();
  absl::StatusOr<OptimizerConfig> back = FromProto(init.optimizer());
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->kind, OptimizerKind::kLion);
  EXPECT_EQ(OptimizerStateSlots(*back).size(), 1u);
}

}  // namespace
}  // namespace zeroshard
