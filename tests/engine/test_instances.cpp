// The plan of an instance set (engine/instances.hpp): which split, how many SMs each, and refusals that
// name what fits. Host only: the driver's group counts are given as a function.
#include <gtest/gtest.h>

#include <string>

#include "engine/engine.hpp"
#include "engine/instances.hpp"
#include "model/model.hpp"
#include "util/error.hpp"

using namespace hotpath;

namespace {

// The lent H200's splits (measured 2026-12-02): 132 SMs; the plain split gives 15 groups of 8 (16 of
// its SMs are in GPCs that do not make a whole group), the fine split groups of 2 (66).
int h200_groups(int sms, bool fine) {
  if (fine) return 132 / ((sms + 1) / 2 * 2);
  const int s = (sms + 7) / 8 * 8;
  return 120 / s;
}

engine::InstanceLayout plan(int count, int sms_each = 0, bool beside = false) {
  engine::InstanceOptions io;
  io.count = count;
  io.sms_each = sms_each;
  io.beside = beside;
  return engine::plan_instances(io, 132, 8, 2, h200_groups);
}

}  // namespace

TEST(InstancePlan, TheLargestEqualShareOfThePlainSplitElseTheFineOne) {
  EXPECT_EQ(plan(1).sms_each, 120);
  EXPECT_FALSE(plan(1).fine);
  EXPECT_EQ(plan(2).sms_each, 56);   // 66 rounds down to 64: 1 group; 56 gives 2
  EXPECT_EQ(plan(8).sms_each, 8);
  EXPECT_EQ(plan(15).sms_each, 8);
  EXPECT_FALSE(plan(15).fine);
  EXPECT_TRUE(plan(16).fine);        // 15 plain groups of 8: the 16th comes from the fine split
  EXPECT_EQ(plan(16).sms_each, 8);
  EXPECT_EQ(plan(32).sms_each, 4);
  EXPECT_EQ(plan(64).sms_each, 2);
  EXPECT_EQ(plan(66).sms_each, 2);
  EXPECT_EQ(plan(64).rest_sms, 0);   // nothing kept without `beside`
}

TEST(InstancePlan, BesideAThroughputEngineTheInstancesTakeTheSmallestGroups) {
  const auto l = plan(8, 0, true);
  EXPECT_EQ(l.sms_each, 8);
  EXPECT_EQ(l.rest_sms, 132 - 64);
  EXPECT_TRUE(plan(15, 0, true).fine == false);
  EXPECT_EQ(plan(20, 0, true).sms_each, 2);
  EXPECT_EQ(plan(20, 0, true).rest_sms, 92);
  EXPECT_THROW(plan(66, 0, true), UnsupportedError);  // nothing would be left
}

TEST(InstancePlan, AskedSizesRoundUpAndRefusalsSayWhatFits) {
  EXPECT_EQ(plan(4, 16).sms_each, 16);
  EXPECT_FALSE(plan(4, 16).fine);
  EXPECT_EQ(plan(4, 3).sms_each, 4);  // fine split, rounded up to its groups of 2
  EXPECT_TRUE(plan(4, 3).fine);
  try {
    plan(67);
    FAIL() << "67 instances fit";
  } catch (const UnsupportedError& e) {
    EXPECT_NE(std::string(e.what()).find("at most 66"), std::string::npos) << e.what();
  }
  EXPECT_THROW(plan(9, 16), UnsupportedError);
  EXPECT_THROW(plan(0), Error);
  // The mechanism and the placement are read by their name tables (the CLI's, C ABI's and Python's).
  try {
    (void)util::parse_name<engine::Isolation>("mps");
    ADD_FAILURE() << "isolation mps was read";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "unknown isolation 'mps' (valid: green or shared)");
  }
  try {
    (void)util::parse_name<engine::Placement>("gpc");
    ADD_FAILURE() << "placement gpc was read";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "unknown placement 'gpc' (valid: sm or block)");
  }
}

// Refused before any device is asked: a backend other than cuda, a fallback.
TEST(InstanceSet, OptionsTheSetCannotServeAreRefused) {
  const Model m = open_model(std::string(HOTPATH_GOLDEN_DIR) + "/tiny.model.safetensors", {});
  engine::InstanceOptions io;
  io.count = 2;
  EngineOptions eo;
  eo.mode = Mode::streaming;
  eo.backend = BackendKind::cpu;
  try {
    engine::InstanceSet set(m, eo, io);
    FAIL() << "a cpu instance set was made";
  } catch (const UnsupportedError&) {
    FAIL() << "refused as unsupported, not as a bad option";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("need the cuda backend"), std::string::npos) << e.what();
  }
  eo.backend = BackendKind::cuda;
  eo.fallback = Fallback::cpu;
  try {
    engine::InstanceSet set(m, eo, io);
    FAIL() << "an instance set with a fallback was made";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--fallback is not available"), std::string::npos) << e.what();
  }
}

TEST(InstancePlan, OneSharedLaunchNeedsTwoSmsAnInstance) {
  engine::InstanceOptions io;
  io.isolation = engine::Isolation::shared;
  io.count = 64;
  auto l = engine::plan_instances(io, 132, 8, 2, h200_groups);
  EXPECT_EQ(l.sms_each, 2);
  EXPECT_EQ(l.launch_sms, 132);
  io.count = 66;
  EXPECT_EQ(engine::plan_instances(io, 132, 8, 2, h200_groups).sms_each, 2);
  io.count = 67;
  EXPECT_THROW(engine::plan_instances(io, 132, 8, 2, h200_groups), UnsupportedError);
  // Beside a throughput engine: the launch's partition is the smallest group that holds it.
  io.count = 8;
  io.beside = true;
  l = engine::plan_instances(io, 132, 8, 2, h200_groups);
  EXPECT_EQ(l.launch_sms, 16);
  EXPECT_FALSE(l.fine);
  EXPECT_EQ(l.rest_sms, 116);
  io.count = 20;  // 40 SMs: a plain group of 40
  EXPECT_EQ(engine::plan_instances(io, 132, 8, 2, h200_groups).launch_sms, 40);
  // Where an instance's blocks go: by SM (the default) or by block index, reported.
  EXPECT_EQ(engine::plan_instances(io, 132, 8, 2, h200_groups).placement, engine::Placement::sm);
  io.placement = engine::Placement::block;
  EXPECT_EQ(engine::plan_instances(io, 132, 8, 2, h200_groups).placement, engine::Placement::block);
  io.isolation = engine::Isolation::green;  // a placement only the shared launch has
  EXPECT_FALSE(engine::plan_instances(io, 132, 8, 2, h200_groups).placement.has_value());
}
