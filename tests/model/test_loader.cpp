// From a PyTorch state_dict in safetensors to a Model (docs/model.md, "The model"), and back. Synthetic
// state dicts are built in memory with the project's own writer; the golden files come from PyTorch
// itself.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include <unistd.h>

#include "common/within_seconds.hpp"
#include "model/loader.hpp"
#include "model/model.hpp"
#include "model/safetensors.hpp"
#include "model/zoo.hpp"
#include "util/error.hpp"
#include "util/half.hpp"

namespace st = hotpath::safetensors;
using hotpath::Error;
using hotpath::LoadOptions;
using hotpath::Model;

namespace {

#define EXPECT_HAS(haystack, needle) EXPECT_NE(std::string(haystack).find(needle), std::string::npos) << (haystack)

struct Spec {
  int I = 3, H = 4, L = 2, O = 2;
  std::string lstm = "lstm.", head = "fc.";
  bool bias = true, head_bias = true;
  st::DType dtype = st::DType::F32;
  uint64_t seed = 1;
};

std::vector<double> random_values(std::mt19937_64& rng, size_t n) {
  std::vector<double> v(n);
  // Multiples of 2^-8 in [-1, 1): exact in every accepted dtype, so round trips compare exactly.
  for (auto& x : v) x = double(int(rng() % 512) - 256) / 256.0;
  return v;
}

// What `safetensors.torch.save_file(net.state_dict())` writes for an nn.LSTM + nn.Linear module.
std::vector<st::OutTensor> state_dict(const Spec& s) {
  std::mt19937_64 rng(s.seed);
  std::vector<st::OutTensor> out;
  const int64_t g = 4 * s.H;
  for (int k = 0; k < s.L; ++k) {
    const std::string l = "_l" + std::to_string(k);
    const int64_t in = k == 0 ? s.I : s.H;
    out.push_back(st::make_tensor(s.lstm + "weight_ih" + l, s.dtype, {g, in}, random_values(rng, size_t(g * in))));
    out.push_back(st::make_tensor(s.lstm + "weight_hh" + l, s.dtype, {g, s.H}, random_values(rng, size_t(g * s.H))));
    if (s.bias) {
      out.push_back(st::make_tensor(s.lstm + "bias_ih" + l, s.dtype, {g}, random_values(rng, size_t(g))));
      out.push_back(st::make_tensor(s.lstm + "bias_hh" + l, s.dtype, {g}, random_values(rng, size_t(g))));
    }
  }
  out.push_back(st::make_tensor(s.head + "weight", s.dtype, {s.O, s.H}, random_values(rng, size_t(s.O * s.H))));
  if (s.head_bias) out.push_back(st::make_tensor(s.head + "bias", s.dtype, {s.O}, random_values(rng, size_t(s.O))));
  return out;
}

st::File as_file(const std::vector<st::OutTensor>& tensors, const std::map<std::string, std::string>& meta = {}) {
  return st::File::parse(st::serialize(tensors, meta), "model.safetensors");
}

Model load(const std::vector<st::OutTensor>& tensors, const std::map<std::string, std::string>& meta = {},
           const LoadOptions& opt = {}) {
  return hotpath::model_from_safetensors(as_file(tensors, meta), opt);
}

std::string load_error(const std::vector<st::OutTensor>& tensors, const std::map<std::string, std::string>& meta = {},
                       const LoadOptions& opt = {}) {
  try {
    load(tensors, meta, opt);
  } catch (const Error& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "non-hotpath exception: " << e.what();
    return {};
  }
  ADD_FAILURE() << "the model loaded";
  return {};
}

st::OutTensor& find(std::vector<st::OutTensor>& v, const std::string& name) {
  for (auto& t : v)
    if (t.name == name) return t;
  throw std::runtime_error("test bug: no " + name);
}

void drop(std::vector<st::OutTensor>& v, const std::string& name) {
  std::erase_if(v, [&](const st::OutTensor& t) { return t.name == name; });
}

st::OutTensor f32(const std::string& name, std::vector<int64_t> shape) {
  size_t n = 1;
  for (auto d : shape) n *= size_t(d);
  return st::make_tensor(name, st::DType::F32, std::move(shape), std::vector<double>(n, 0.5));
}

void expect_same_weights(const Model& a, const Model& b) {
  ASSERT_EQ(a.layers.size(), b.layers.size());
  for (size_t k = 0; k < a.layers.size(); ++k) {
    EXPECT_EQ(a.layers[k].w_ih, b.layers[k].w_ih) << k;
    EXPECT_EQ(a.layers[k].w_hh, b.layers[k].w_hh) << k;
    EXPECT_EQ(a.layers[k].b_ih, b.layers[k].b_ih) << k;
    EXPECT_EQ(a.layers[k].b_hh, b.layers[k].b_hh) << k;
  }
  EXPECT_EQ(a.head_w, b.head_w);
  EXPECT_EQ(a.head_b, b.head_b);
}

struct TempDir {
  std::filesystem::path path;
  TempDir() {
    std::string test = ::testing::UnitTest::GetInstance()->current_test_info()->name();
    for (char& c : test)
      if (c == '/') c = '_';
    path = std::filesystem::temp_directory_path() / ("hotpath_loader_" + std::to_string(::getpid()) + "_" + test);
    std::filesystem::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  std::string file(const std::string& name) const { return (path / name).string(); }
};

}  // namespace

// --- golden models from PyTorch -----------------------------------------------------------------

class GoldenModel : public ::testing::TestWithParam<const char*> {};

TEST_P(GoldenModel, LoadsWithTheShapesOfItsGoldenMetadata) {
  const std::string dir = HOTPATH_GOLDEN_DIR;
  const std::string path = dir + "/" + GetParam() + ".model.safetensors";
  const Model m = hotpath::load_model_file(path);
  const st::File golden = st::File::open(dir + "/" + GetParam() + ".golden.safetensors");
  const auto& meta = golden.metadata();
  EXPECT_EQ(m.config.input_size, std::stoi(meta.at("input_size")));
  EXPECT_EQ(m.config.hidden_size, std::stoi(meta.at("hidden_size")));
  EXPECT_EQ(m.config.num_layers, std::stoi(meta.at("num_layers")));
  EXPECT_EQ(m.config.output_size, std::stoi(meta.at("output_size")));
  EXPECT_EQ(m.config.lstm_bias, meta.at("bias") == "True");
  EXPECT_TRUE(m.config.head_bias);
  EXPECT_EQ(m.lstm_prefix, meta.at("lstm_prefix"));
  EXPECT_EQ(m.head_prefix, meta.at("head_prefix"));
  EXPECT_FALSE(m.config.window.has_value());  // the model files carry no __metadata__
  EXPECT_EQ(m.dtype, hotpath::DType::F32);
  EXPECT_EQ(m.name, path);
  // Values are the file's, unchanged.
  const st::File f = st::File::open(path);
  EXPECT_EQ(m.layers.back().w_hh, f.read_f64(f.at("lstm.weight_hh_l" + std::to_string(m.config.num_layers - 1))));
  EXPECT_EQ(m.head_b, f.read_f64(f.at("fc.bias")));

  // The window comes from __metadata__ when present: re-save with the golden window and reload.
  TempDir tmp;
  Model with_window = m;
  with_window.config.window = std::stoi(meta.at("window"));
  hotpath::save_model_file(with_window, tmp.file("m.safetensors"));
  const Model again = hotpath::load_model_file(tmp.file("m.safetensors"));
  EXPECT_EQ(again.config, with_window.config);
  expect_same_weights(again, m);
}

INSTANTIATE_TEST_SUITE_P(Golden, GoldenModel, ::testing::Values("tiny", "small2x128", "multi_out"));

TEST(Loader, GoldenSizes) {
  const Model tiny = hotpath::load_model_file(HOTPATH_GOLDEN_DIR "/tiny.model.safetensors");
  EXPECT_EQ(tiny.config.input_size, 4);
  EXPECT_EQ(tiny.config.hidden_size, 8);
  EXPECT_EQ(tiny.config.num_layers, 1);
  EXPECT_EQ(tiny.config.output_size, 1);
  const Model multi = hotpath::load_model_file(HOTPATH_GOLDEN_DIR "/multi_out.model.safetensors");
  EXPECT_EQ(multi.config.input_size, 16);
  EXPECT_EQ(multi.config.hidden_size, 64);
  EXPECT_EQ(multi.config.num_layers, 3);
  EXPECT_EQ(multi.config.output_size, 4);
}

// --- unsupported variants are named first ----------------------------------------------------------

TEST(LoaderVariants, ProjSizeNamedEvenWhenOtherThingsAreWrong) {
  auto t = state_dict({});
  // What nn.LSTM(proj_size=2) saves: weight_hh is [4H, P], plus weight_hr [P, H]. Also drop the head.
  find(t, "lstm.weight_hh_l0") = f32("lstm.weight_hh_l0", {16, 2});
  t.push_back(f32("lstm.weight_hr_l0", {2, 4}));
  drop(t, "fc.weight");
  const std::string e = load_error(t);
  EXPECT_HAS(e, "unsupported LSTM variant: proj_size > 0 (found key 'lstm.weight_hr_l0')");
  EXPECT_HAS(e, "model.safetensors");
  // Even with no weight_ih_l0 at all, and through an explicit prefix that does not exist.
  std::vector<st::OutTensor> only = {f32("rnn.weight_hr_l1", {2, 4})};
  EXPECT_HAS(load_error(only, {}, {"nope.", "nope."}), "proj_size > 0 (found key 'rnn.weight_hr_l1')");
}

TEST(LoaderVariants, BidirectionalNamedEvenWhenOtherThingsAreWrong) {
  auto t = state_dict({});
  t.push_back(f32("lstm.weight_ih_l0_reverse", {16, 3}));
  t.push_back(f32("lstm.weight_hh_l0_reverse", {16, 4}));
  find(t, "fc.weight") = f32("fc.weight", {2, 8});  // [O, 2H], as a bidirectional model's head is
  find(t, "lstm.bias_ih_l1") = f32("lstm.bias_ih_l1", {3});
  EXPECT_HAS(load_error(t), "unsupported LSTM variant: bidirectional (found key 'lstm.weight_hh_l0_reverse')");
  EXPECT_HAS(load_error(t, {{"hidden_size", "99"}, {"window", "x"}}), "bidirectional");
}

// --- prefixes -------------------------------------------------------------------------------------

TEST(LoaderPrefixes, RenamedPrefixesDetected) {
  Spec s;
  s.lstm = "encoder.rnn.";
  s.head = "head.";
  const Model m = load(state_dict(s));
  EXPECT_EQ(m.lstm_prefix, "encoder.rnn.");
  EXPECT_EQ(m.head_prefix, "head.");
  EXPECT_EQ(m.config.num_layers, 2);
  // A bare nn.LSTM state_dict has no prefix at all.
  s.lstm = "";
  s.head = "out.";
  const Model bare = load(state_dict(s));
  EXPECT_EQ(bare.lstm_prefix, "");
  EXPECT_EQ(bare.head_prefix, "out.");
}

TEST(LoaderPrefixes, AmbiguousLstmListsCandidatesAndExplicitPrefixResolves) {
  Spec a, b;
  a.lstm = "enc.";
  b.lstm = "dec.";
  b.I = 5;
  auto t = state_dict(a);
  for (auto& x : state_dict(b))
    if (x.name.rfind("dec.", 0) == 0) t.push_back(x);
  const std::string e = load_error(t);
  EXPECT_HAS(e, "'dec.'");
  EXPECT_HAS(e, "'enc.'");
  EXPECT_HAS(e, "--lstm-prefix");
  // The other LSTM's tensors must then be ignored explicitly: every tensor is used or named.
  EXPECT_EQ(load(t, {}, {"dec.", "", {"enc."}}).config.input_size, 5);
  EXPECT_EQ(load(t, {}, {"enc.", "", {"dec."}}).config.input_size, 3);
  EXPECT_EQ(load(t, {}, {"dec", "", {"enc."}}).lstm_prefix, "dec.");  // the trailing dot may be left out
  EXPECT_EQ(load(t, {}, {"", "", {"enc."}}).lstm_prefix, "dec.");  // an ignored LSTM is no candidate
  EXPECT_HAS(load_error(t, {}, {"dec.", ""}), "tensors 'enc.bias_hh_l0', ");
  // __metadata__ lstm_prefix is the default when no option is given, and an option beats it.
  EXPECT_EQ(load(t, {{"lstm_prefix", "dec."}}, {"", "", {"enc."}}).lstm_prefix, "dec.");
  EXPECT_EQ(load(t, {{"lstm_prefix", "dec."}}, {"enc.", "", {"dec."}}).lstm_prefix, "enc.");
  // Still validated.
  const std::string bad = load_error(t, {{"lstm_prefix", "rnn."}});
  EXPECT_HAS(bad, "'rnn.weight_ih_l0'");
  EXPECT_HAS(bad, "'enc.'");
  EXPECT_HAS(load_error(t, {}, {"rnn.", ""}), "--lstm-prefix 'rnn.' names no tensor 'rnn.weight_ih_l0'");
}

TEST(LoaderPrefixes, NoLstm) {
  const std::string e = load_error({f32("fc.weight", {1, 4})});
  EXPECT_HAS(e, "no tensor key ends in 'weight_ih_l0'");
  EXPECT_HAS(e, "'fc.weight'");
  EXPECT_HAS(load_error({}), "no tensor key ends in 'weight_ih_l0'");
}

TEST(LoaderPrefixes, AmbiguousHeadListsCandidatesAndExplicitPrefixResolves) {
  auto t = state_dict({});
  t.push_back(f32("aux.weight", {3, 4}));
  const std::string e = load_error(t);
  EXPECT_HAS(e, "'aux.weight'");
  EXPECT_HAS(e, "'fc.weight'");
  EXPECT_HAS(e, "--head-prefix");
  const Model aux = load(t, {}, {"", "aux.", {"fc."}});
  EXPECT_EQ(aux.config.output_size, 3);
  EXPECT_FALSE(aux.config.head_bias);
  EXPECT_EQ(aux.head_prefix, "aux.");
  EXPECT_EQ(load(t, {}, {"", "fc", {"aux.weight"}}).config.output_size, 2);
  EXPECT_EQ(load(t, {}, {"", "", {"aux.weight"}}).config.output_size, 2);  // an ignored tensor is no candidate
  EXPECT_EQ(load(t, {{"head_prefix", "aux."}}, {"", "", {"fc."}}).config.output_size, 3);
  // Choosing one head does not drop the other in silence.
  EXPECT_HAS(load_error(t, {}, {"", "aux."}), "tensors 'fc.bias', 'fc.weight' are not used by the model");
  EXPECT_HAS(load_error(t, {}, {"", "nope."}), "--head-prefix 'nope.' names no tensor 'nope.weight'");
  EXPECT_HAS(load_error(t, {{"head_prefix", "x."}}), "__metadata__ head_prefix 'x.'");
  // An explicit head of the wrong shape.
  t.push_back(f32("bad.weight", {3, 5}));
  EXPECT_HAS(load_error(t, {}, {"", "bad."}), "'bad.weight' has shape [3, 5], expected [O, 4]");
}

TEST(LoaderPrefixes, UnrelatedTensorsRefusedUnlessIgnoredAndNeverAHead) {
  auto t = state_dict({});
  t.push_back(f32("norm.running_mean", {4}));
  t.push_back(st::make_tensor("norm.num_batches_tracked", st::DType::I64, {}, std::vector<double>{3}));
  t.push_back(f32("embed.table", {10, 4}));   // [*, H] but not a `weight`
  t.push_back(f32("proj.weight", {4, 7}));    // a weight, but not [*, H]
  t.push_back(st::make_tensor("mask.weight", st::DType::U8, {2, 4}, std::vector<double>(8, 1)));  // not float
  // Every tensor the model does not use is named: loading without them would compute another network.
  EXPECT_EQ(load_error(t),
            "model.safetensors: tensors 'embed.table', 'mask.weight', 'norm.num_batches_tracked', 'norm.running_mean', "
            "'proj.weight' are not used by the model (nn.LSTM 'lstm.' -> nn.Linear 'fc.'); hotpath computes one "
            "nn.LSTM and one nn.Linear, not a deeper head (Linear -> ReLU -> Linear ...); only if the module never "
            "uses them, name them in --ignore-tensors (Python: ignore=)");
  const Model m = load(t, {}, {"", "", {"norm.", "embed.table", "proj.weight", "mask.weight"}});
  EXPECT_EQ(m.head_prefix, "fc.");
  EXPECT_EQ(m.config.output_size, 2);
  t.erase(t.begin() + ptrdiff_t(t.size()) - 4, t.end());
  EXPECT_EQ(load_error(t), "model.safetensors: tensor 'norm.running_mean' is not used by the model (nn.LSTM 'lstm.' -> "
                           "nn.Linear 'fc.'); only if the module never uses them, name them in --ignore-tensors "
                           "(Python: ignore=)");
  t.push_back(st::make_tensor("norm.num_batches_tracked", st::DType::I64, {}, std::vector<double>{3}));
  t.push_back(f32("embed.table", {10, 4}));
  // With the head gone, the [*, H] non-weight is listed to help the user.
  drop(t, "fc.weight");
  drop(t, "fc.bias");
  const std::string e = load_error(t);
  EXPECT_HAS(e, "no head found");
  EXPECT_HAS(e, "'embed.table'");
}

// --- every tensor used ----------------------------------------------------------------------------

// nn.LSTM -> fc1 -> ReLU -> fc2: naming fc2 the head used to drop fc1 without a word (wrong answers).
TEST(LoaderStrict, MlpHeadIsRefusedNamingTheUnusedLayer) {
  Spec s;
  s.head = "fc1.";
  s.O = 4;  // fc1: [F, H] with F = H, so fc2 [O, F] is a head candidate too
  auto t = state_dict(s);
  t.push_back(f32("fc2.weight", {1, 4}));
  t.push_back(f32("fc2.bias", {1}));
  EXPECT_HAS(load_error(t), "several head candidates");
  const std::string e = load_error(t, {}, {"", "fc2."});
  EXPECT_HAS(e, "tensors 'fc1.bias', 'fc1.weight' are not used by the model (nn.LSTM 'lstm.' -> nn.Linear 'fc2.')");
  EXPECT_HAS(e, "not a deeper head");
  EXPECT_EQ(e.find('\n'), std::string::npos);
  // F != H: fc1 alone looks like the head, and fc2 is named instead.
  Spec w = s;
  w.O = 6;
  auto t2 = state_dict(w);
  t2.push_back(f32("fc2.weight", {1, 6}));
  t2.push_back(f32("fc2.bias", {1}));
  EXPECT_HAS(load_error(t2), "tensors 'fc2.bias', 'fc2.weight' are not used by the model (nn.LSTM 'lstm.' -> nn.Linear 'fc1.')");
  // The deliberate case: the module's forward never uses fc1.
  EXPECT_EQ(load(t, {}, {"", "fc2.", {"fc1."}}).config.output_size, 1);
}

TEST(LoaderStrict, IgnoreEntriesAreChecked) {
  auto t = state_dict({});
  t.push_back(f32("aux.scale", {3}));
  EXPECT_EQ(load(t, {}, {"", "", {"aux.scale"}}).config.output_size, 2);
  EXPECT_EQ(load(t, {}, {"", "", {"aux."}}).config.output_size, 2);
  EXPECT_EQ(load_error(t, {}, {"", "", {"aux.scale", "aux.shift"}}),
            "model.safetensors: the tensors to ignore name 'aux.shift', which matches no tensor of the file "
            "(a prefix ends in '.')");
  EXPECT_EQ(load_error(t, {}, {"", "", {"aux"}}),
            "model.safetensors: the tensors to ignore name 'aux', which matches no tensor of the file (a prefix ends in '.')");
  EXPECT_EQ(load_error(t, {}, {"", "", {"aux.", "fc.bias"}}),
            "model.safetensors: the tensors to ignore include 'fc.bias', which the model uses");
  EXPECT_HAS(load_error(t, {}, {"", "", {"aux.", ""}}), "an empty name among the tensors to ignore");
  EXPECT_EQ(hotpath::split_ignore_list("a.,b.weight", "--ignore-tensors"), (std::vector<std::string>{"a.", "b.weight"}));
  for (const char* bad : {"", "a,,b", "a,", ",a"})
    EXPECT_THROW(hotpath::split_ignore_list(bad, "--ignore-tensors"), Error) << bad;
}

// Other recurrent layers share the LSTM's key names; their gate count gives them away.
TEST(LoaderStrict, GruAndRnnNamedNotShapeErrors) {
  const int64_t H = 4, I = 3;
  const std::vector<st::OutTensor> gru = {f32("gru.weight_ih_l0", {3 * H, I}), f32("gru.weight_hh_l0", {3 * H, H}),
                                          f32("gru.bias_ih_l0", {3 * H}), f32("gru.bias_hh_l0", {3 * H}),
                                          f32("fc.weight", {1, H}), f32("fc.bias", {1})};
  EXPECT_EQ(load_error(gru), "model.safetensors: tensor 'gru.weight_hh_l0' has shape [12, 4], [3H, H]: this is an "
                             "nn.GRU's state_dict; GRU is not supported, only nn.LSTM ([4H, H])");
  const std::vector<st::OutTensor> rnn = {f32("rnn.weight_ih_l0", {H, I}), f32("rnn.weight_hh_l0", {H, H}),
                                          f32("fc.weight", {1, H})};
  EXPECT_HAS(load_error(rnn), "this is an nn.RNN's state_dict; a plain RNN is not supported");
}

// Files that are something else than safetensors are named as what they are.
TEST(LoaderStrict, PicklesAndOnnxNamed) {
  TempDir tmp;
  auto write = [&](const std::string& name, const std::string& bytes) {
    const std::string p = tmp.file(name);
    std::FILE* fp = std::fopen(p.c_str(), "wb");
    std::fwrite(bytes.data(), 1, bytes.size(), fp);
    std::fclose(fp);
    return p;
  };
  auto error_of = [](const std::string& path) {
    try {
      hotpath::resolve_model(path);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("(loaded)");
  };
  const std::string pad(600, 'x');
  // torch.save: a zip archive (since PyTorch 1.6), or the legacy pickle (protocol 2, then a magic number).
  const std::string zip = write("model.pt", std::string("PK\x03\x04\x14\x00\x08\x00", 8) + pad);
  EXPECT_EQ(error_of(zip), zip + ": is a PyTorch pickle (a torch.save zip archive), not safetensors: save the "
                                 "state_dict with safetensors.torch.save_file");
  const std::string legacy = write("legacy.pth", std::string("\x80\x02\x8a\x0a\x6c\xfc\x9c\x46\xf9\x20", 10) + pad);
  EXPECT_EQ(error_of(legacy), legacy + ": is a PyTorch pickle (torch.save's legacy format), not safetensors: save "
                                       "the state_dict with safetensors.torch.save_file");
  // A pickle whose first 8 bytes read as a plausible header length still fails at '{': named there too.
  const std::string framed = write("framed.pkl", std::string("\x80\x04\x95\x05\x00\x00\x00\x00", 8) + pad);
  EXPECT_HAS(error_of(framed), "is a PyTorch pickle");
  // ONNX: by its protobuf start whatever the name, and by the suffix whatever the bytes.
  const std::string onnx_msg = "is an ONNX model, not safetensors: ONNX models are imported with "
                               "hotpath.load(\"model.onnx\") in Python";
  const std::string proto = write("exported.bin", std::string("\x08\x07\x12\x07pytorch\x1a\x03" "2.1", 14) + pad);
  EXPECT_EQ(error_of(proto), proto + ": " + onnx_msg);
  const std::string suffix = write("model.ONNX", "{}");
  EXPECT_EQ(error_of(suffix), suffix + ": " + onnx_msg);
  // The same from bytes in memory (Python's load(bytes), the C ABI's open_bytes).
  std::vector<uint8_t> bytes = {'P', 'K', 3, 4, 0x14, 0, 8, 0, 'x', 'x'};
  try {
    st::File::parse(bytes, "<bytes>");
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_HAS(e.what(), "<bytes>: is a PyTorch pickle (a torch.save zip archive)");
  }
  // A valid safetensors file is never misnamed, even when its first bytes happen to match.
  EXPECT_EQ(st::foreign_format(std::vector<uint8_t>{0x08, 0x07, 0x12, 0, 0, 0, 0, 0}), onnx_msg);
  const auto good = st::serialize(state_dict({}), {});
  EXPECT_NO_THROW(st::File::parse(good, "good"));
}

TEST(LoaderResolve, ZooNameRefusesPrefixesAndIgnore) {
  if (!hotpath::find_zoo("lstm_s")) GTEST_SKIP() << "no zoo model lstm_s";
  auto error_of = [](const LoadOptions& o) {
    try {
      hotpath::resolve_model("lstm_s", o);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("(loaded)");
  };
  EXPECT_EQ(error_of({"lstm.", ""}), "'lstm_s' is a zoo model, but an LSTM prefix 'lstm.' was given: key prefixes and "
                                     "tensors to ignore apply to a model file only");
  EXPECT_HAS(error_of({"", "fc."}), "'lstm_s' is a zoo model, but a head prefix 'fc.' was given");
  EXPECT_HAS(error_of({"", "", {"aux."}}), "'lstm_s' is a zoo model, but a tensor to ignore 'aux.' was given");
  EXPECT_EQ(error_of({}), "(loaded)");
}

// --- biases ---------------------------------------------------------------------------------------

TEST(LoaderBias, NoBiasForLstmAndHead) {
  Spec s;
  s.bias = false;
  s.head_bias = false;
  const Model m = load(state_dict(s));
  EXPECT_FALSE(m.config.lstm_bias);
  EXPECT_FALSE(m.config.head_bias);
  EXPECT_TRUE(m.layers[0].b_ih.empty());
  EXPECT_TRUE(m.head_b.empty());
  EXPECT_EQ(m.layers[1].bias_sum(4), std::vector<double>(16, 0.0));
  EXPECT_EQ(m.config.parameter_count(), size_t(16 * 3 + 16 * 4 + 16 * 4 + 16 * 4 + 2 * 4));
  // Only one side of the head missing its bias is fine (nn.Linear(bias=False) with nn.LSTM(bias=True)).
  s.bias = true;
  const Model m2 = load(state_dict(s));
  EXPECT_TRUE(m2.config.lstm_bias);
  EXPECT_FALSE(m2.config.head_bias);
  std::vector<double> sum(16);
  for (size_t i = 0; i < 16; ++i) sum[i] = m2.layers[1].b_ih[i] + m2.layers[1].b_hh[i];
  EXPECT_EQ(m2.layers[1].bias_sum(4), sum);
}

TEST(LoaderBias, HalfPresentOrInconsistentBiasRefused) {
  auto t = state_dict({});
  drop(t, "lstm.bias_hh_l1");
  EXPECT_HAS(load_error(t), "'lstm.bias_ih_l1' is present but 'lstm.bias_hh_l1' is missing");
  drop(t, "lstm.bias_ih_l1");
  EXPECT_HAS(load_error(t), "layer 0 has biases but layer 1 has none");
}

// --- shapes ---------------------------------------------------------------------------------------

TEST(LoaderShapes, MisShapedTensorsNamed) {
  {
    auto t = state_dict({});
    find(t, "lstm.weight_hh_l0") = f32("lstm.weight_hh_l0", {17, 4});
    EXPECT_HAS(load_error(t), "'lstm.weight_hh_l0' has shape [17, 4], expected [4H, H]");
  }
  {
    auto t = state_dict({});
    find(t, "lstm.weight_hh_l0") = f32("lstm.weight_hh_l0", {16});
    EXPECT_HAS(load_error(t), "'lstm.weight_hh_l0' has shape [16]");
  }
  {
    auto t = state_dict({});
    find(t, "lstm.weight_ih_l0") = f32("lstm.weight_ih_l0", {12, 3});
    EXPECT_HAS(load_error(t), "'lstm.weight_ih_l0' has shape [12, 3], expected [16, I]");
  }
  {
    auto t = state_dict({});
    find(t, "lstm.weight_ih_l1") = f32("lstm.weight_ih_l1", {16, 3});  // in = I instead of H
    EXPECT_HAS(load_error(t), "'lstm.weight_ih_l1' has shape [16, 3], expected [16, 4]");
  }
  {
    auto t = state_dict({});
    find(t, "lstm.weight_hh_l1") = f32("lstm.weight_hh_l1", {16, 4, 1});
    EXPECT_HAS(load_error(t), "'lstm.weight_hh_l1' has shape [16, 4, 1], expected [16, 4]");
  }
  {
    auto t = state_dict({});
    find(t, "lstm.bias_hh_l0") = f32("lstm.bias_hh_l0", {15});
    EXPECT_HAS(load_error(t), "'lstm.bias_hh_l0' has shape [15], expected [16]");
  }
  {
    auto t = state_dict({});
    find(t, "fc.bias") = f32("fc.bias", {3});
    EXPECT_HAS(load_error(t), "'fc.bias' has shape [3], expected [2]");
  }
  {
    auto t = state_dict({});
    find(t, "fc.weight") = f32("fc.weight", {2, 5});  // not [*, H]: no head at all
    EXPECT_HAS(load_error(t), "no head found");
  }
  {
    auto t = state_dict({});
    find(t, "fc.weight") = f32("fc.weight", {0, 4});
    EXPECT_HAS(load_error(t), "'fc.weight' has shape [0, 4]");
  }
  {
    auto t = state_dict({});
    find(t, "lstm.weight_hh_l0") = f32("lstm.weight_hh_l0", {0, 0});
    EXPECT_HAS(load_error(t), "'lstm.weight_hh_l0' has shape [0, 0]");
  }
}

TEST(LoaderShapes, MissingAndStrayLayerTensors) {
  {
    auto t = state_dict({});
    drop(t, "lstm.weight_hh_l1");
    EXPECT_HAS(load_error(t), "missing tensor 'lstm.weight_hh_l1'");
  }
  {
    auto t = state_dict({});
    drop(t, "lstm.weight_hh_l0");
    EXPECT_HAS(load_error(t), "missing tensor 'lstm.weight_hh_l0'");
  }
  {
    auto t = state_dict({});
    t.push_back(f32("lstm.weight_hh_l2", {16, 4}));  // a third layer without its weight_ih
    EXPECT_HAS(load_error(t), "'lstm.weight_hh_l2' belongs to layer 2 but 'lstm.weight_ih_l2' is missing");
  }
  {
    auto t = state_dict({});
    drop(t, "lstm.weight_ih_l1");  // layer 1 incomplete; its other tensors are strays
    EXPECT_HAS(load_error(t), "'lstm.weight_ih_l1' is missing");
  }
}

// --- dtypes ---------------------------------------------------------------------------------------

TEST(LoaderDtypes, F16Bf16F64ModelsLoadExactly) {
  for (st::DType d : {st::DType::F16, st::DType::BF16, st::DType::F64, st::DType::F32}) {
    Spec s;
    s.dtype = d;
    const Model m = load(state_dict(s));
    Spec ref;  // same seed, values exact in every dtype
    ref.dtype = st::DType::F64;
    expect_same_weights(m, load(state_dict(ref)));
    EXPECT_STREQ(hotpath::dtype_name(m.dtype), st::dtype_name(d));
  }
}

TEST(LoaderDtypes, MixedRecordsLowestPrecision) {
  auto t = state_dict({});
  find(t, "fc.bias") = st::make_tensor("fc.bias", st::DType::F16, {2}, std::vector<double>{0.5, 1});
  EXPECT_EQ(load(t).dtype, hotpath::DType::F16);
  find(t, "lstm.weight_hh_l1") = st::make_tensor("lstm.weight_hh_l1", st::DType::BF16, {16, 4}, std::vector<double>(64, 1));
  EXPECT_EQ(load(t).dtype, hotpath::DType::BF16);
  Spec s;
  s.dtype = st::DType::F64;
  auto u = state_dict(s);
  find(u, "fc.weight") = f32("fc.weight", {2, 4});
  EXPECT_EQ(load(u).dtype, hotpath::DType::F32);
}

TEST(LoaderDtypes, NonFloatWeightRefusedNamingIt) {
  auto t = state_dict({});
  find(t, "lstm.weight_hh_l1") = st::make_tensor("lstm.weight_hh_l1", st::DType::I32, {16, 4}, std::vector<double>(64, 1));
  const std::string e = load_error(t);
  EXPECT_HAS(e, "'lstm.weight_hh_l1' has dtype I32");
  auto u = state_dict({});
  find(u, "fc.bias") = st::make_tensor("fc.bias", st::DType::I64, {2}, std::vector<double>(2, 1));
  EXPECT_HAS(load_error(u), "'fc.bias' has dtype I64");
}

// --- values ---------------------------------------------------------------------------------------

TEST(LoaderValues, NanAndInfWeightsRefusedNamingTensorAndIndex) {
  const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
  {
    Spec s;
    auto t = state_dict(s);
    std::vector<double> v(64, 0.25);
    v[17] = nan;
    find(t, "lstm.weight_hh_l1") = st::make_tensor("lstm.weight_hh_l1", st::DType::F32, {16, 4}, v);
    const std::string e = load_error(t);
    EXPECT_HAS(e, "model.safetensors: weight 'lstm.weight_hh_l1' holds NaN at index 17");
  }
  {
    Spec s;
    s.head = "head.";
    auto t = state_dict(s);
    find(t, "head.bias") = st::make_tensor("head.bias", st::DType::F16, {2}, std::vector<double>{0, -inf});
    EXPECT_HAS(load_error(t), "weight 'head.bias' holds -Inf at index 1");
  }
  {
    Spec s;
    s.dtype = st::DType::BF16;
    auto t = state_dict(s);
    std::vector<double> v(16, 0);
    v[0] = inf;
    find(t, "lstm.bias_ih_l0") = st::make_tensor("lstm.bias_ih_l0", st::DType::BF16, {16}, v);
    EXPECT_HAS(load_error(t), "'lstm.bias_ih_l0' holds +Inf at index 0");
  }
}

// --- metadata -------------------------------------------------------------------------------------

TEST(LoaderMetadata, WindowAndAgreeingConfig) {
  const auto t = state_dict({});
  const Model m = load(t, {{"window", "20"},
                           {"input_size", "3"},
                           {"hidden_size", "4"},
                           {"num_layers", "2"},
                           {"output_size", "2"},
                           {"bias", "True"},
                           {"oracle", "anything else is ignored"}});
  EXPECT_EQ(m.config.window, 20);
  EXPECT_FALSE(load(t).config.window.has_value());
}

TEST(LoaderMetadata, BadWindowRefused) {
  const auto t = state_dict({});
  for (const char* w : {"abc", "0", "-3", "", " 5", "5.0", "99999999999"})
    EXPECT_HAS(load_error(t, {{"window", w}}), "__metadata__ window");
}

TEST(LoaderMetadata, DisagreementNamed) {
  const auto t = state_dict({});
  EXPECT_HAS(load_error(t, {{"hidden_size", "64"}}), "__metadata__ hidden_size is 64 but the tensors give 4");
  EXPECT_HAS(load_error(t, {{"input_size", "4"}}), "input_size is 4 but the tensors give 3");
  EXPECT_HAS(load_error(t, {{"num_layers", "3"}}), "num_layers is 3 but the tensors give 2");
  EXPECT_HAS(load_error(t, {{"output_size", "1"}}), "output_size is 1 but the tensors give 2");
  EXPECT_HAS(load_error(t, {{"output_size", "two"}}), "__metadata__ output_size 'two' is not an integer");
  EXPECT_HAS(load_error(t, {{"bias", "False"}}), "__metadata__ bias is False but the LSTM has bias tensors");
  EXPECT_HAS(load_error(t, {{"bias", "maybe"}}), "__metadata__ bias 'maybe'");
  Spec s;
  s.bias = false;
  EXPECT_HAS(load_error(state_dict(s), {{"bias", "True"}}), "no bias tensors");
}

// --- writing and round trips ------------------------------------------------------------------------

TEST(LoaderRoundTrip, SaveThenLoadIsEqual) {
  TempDir tmp;
  for (const bool bias : {true, false}) {
    Spec s;
    s.bias = bias;
    s.head_bias = !bias;
    s.lstm = "encoder.rnn.";
    s.head = "head.";
    Model m = load(state_dict(s));
    m.config.window = 7;
    for (hotpath::DType d : {hotpath::DType::F32, hotpath::DType::F64, hotpath::DType::F16, hotpath::DType::BF16}) {
      const std::string path = tmp.file(std::string("m_") + hotpath::dtype_name(d) + ".safetensors");
      hotpath::save_model_file(m, path, d, m.lstm_prefix, m.head_prefix);
      const Model r = hotpath::load_model_file(path);
      EXPECT_EQ(r.config, m.config);
      EXPECT_EQ(r.dtype, d);
      EXPECT_EQ(r.lstm_prefix, "encoder.rnn.");
      EXPECT_EQ(r.head_prefix, "head.");
      expect_same_weights(r, m);  // test values are exact in every dtype
      const st::File f = st::File::open(path);
      EXPECT_EQ(f.metadata().at("bias"), bias ? "True" : "False");
      EXPECT_EQ(f.metadata().at("window"), "7");
      EXPECT_EQ(f.metadata().at("lstm_prefix"), "encoder.rnn.");
      EXPECT_EQ(f.find("encoder.rnn.bias_ih_l0") != nullptr, bias);
      EXPECT_EQ(f.find("head.bias") != nullptr, !bias);
    }
  }
}

TEST(LoaderRoundTrip, DefaultsAndRounding) {
  TempDir tmp;
  Model m = hotpath::load_model_file(HOTPATH_GOLDEN_DIR "/small2x128.model.safetensors");
  // Defaults: "lstm." and "fc."; no window key when the model has none.
  const auto meta = hotpath::model_metadata(m);
  EXPECT_EQ(meta.count("window"), 0u);
  EXPECT_EQ(meta.at("input_size"), "32");
  EXPECT_EQ(meta.at("bias"), "True");
  const auto tensors = hotpath::model_tensors(m, hotpath::DType::F32, "", "");
  EXPECT_EQ(tensors.front().name, "lstm.weight_ih_l0");
  EXPECT_EQ(tensors.back().name, "fc.bias");
  EXPECT_EQ(tensors.size(), size_t(4 * 2 + 2));
  // fp16: every value is the nearest fp16 of the original.
  hotpath::save_model_file(m, tmp.file("h.safetensors"), hotpath::DType::F16);
  const Model h = hotpath::load_model_file(tmp.file("h.safetensors"));
  EXPECT_EQ(h.dtype, hotpath::DType::F16);
  for (size_t i = 0; i < m.layers[1].w_hh.size(); ++i)
    ASSERT_EQ(h.layers[1].w_hh[i], hotpath::fp16_to_float(hotpath::float_to_fp16(float(m.layers[1].w_hh[i]))));
  // Refuses to write an invalid model.
  Model bad = m;
  bad.head_w.pop_back();
  EXPECT_THROW(hotpath::save_model_file(bad, tmp.file("bad.safetensors")), Error);
  EXPECT_FALSE(std::filesystem::exists(tmp.file("bad.safetensors")));
}

// A mutated model file either loads into a valid Model or is refused with hotpath::Error.
TEST(LoaderHostile, MutatedModelFiles) {
  const auto full = st::serialize(state_dict({}), {{"window", "5"}, {"lstm_prefix", "lstm."}});
  uint64_t n;
  std::memcpy(&n, full.data(), 8);
  std::mt19937_64 rng(31337);
  const std::string alphabet = "{}[]\",:0123456789-.e _lstmfcwhib";
  int loaded = 0;
  for (int iter = 0; iter < 3000; ++iter) {
    auto bytes = full;
    for (int e = 0, edits = 1 + int(rng() % 3); e < edits; ++e) {
      const size_t pos = 8 + size_t(rng() % n);
      bytes[pos] = (rng() % 2) ? uint8_t(alphabet[rng() % alphabet.size()]) : uint8_t(rng());
    }
    try {
      const Model m = hotpath::model_from_safetensors(st::File::parse(std::move(bytes), "fuzz"));
      m.validate();
      ++loaded;
    } catch (const Error&) {
    }
  }
  EXPECT_GT(loaded, 0);
}

// --- resolve_model and files ------------------------------------------------------------------------

TEST(LoaderResolve, FileZooOrError) {
  const Model f = hotpath::resolve_model(HOTPATH_GOLDEN_DIR "/tiny.model.safetensors");
  EXPECT_EQ(f.config.hidden_size, 8);
  TempDir tmp;
  try {
    hotpath::resolve_model(tmp.path.string());
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_HAS(e.what(), "directory");
    EXPECT_HAS(e.what(), tmp.path.string());
  }
  try {
    hotpath::resolve_model("no_such_model_xyz");
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_HAS(e.what(), "no model file or zoo model named 'no_such_model_xyz' (hotpath models lists the zoo)");
  }
  if (hotpath::find_zoo("lstm_s")) {
    const Model z = hotpath::resolve_model("lstm_s");
    EXPECT_EQ(z.config.hidden_size, 128);
    EXPECT_EQ(z.config.parameter_count(), 215169u);  // docs/model.md's zoo table: 215,169
  }
  // A corrupt file is refused naming it.
  const std::string junk = tmp.file("junk.safetensors");
  { std::FILE* fp = std::fopen(junk.c_str(), "wb"); std::fputs("not a model", fp); std::fclose(fp); }
  try {
    hotpath::resolve_model(junk);
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_HAS(e.what(), junk);
  }
}

// --- Model itself -----------------------------------------------------------------------------------

TEST(ModelTest, ParameterCountAndDtypeNames) {
  hotpath::ModelConfig c;
  c.input_size = 32;
  c.hidden_size = 128;
  c.num_layers = 2;
  c.output_size = 1;
  EXPECT_EQ(c.parameter_count(), 215169u);
  c.lstm_bias = false;
  c.head_bias = false;
  EXPECT_EQ(c.parameter_count(), 215169u - 2 * 1024 - 1);
  EXPECT_STREQ(hotpath::dtype_name(hotpath::DType::BF16), "BF16");
  EXPECT_STREQ(hotpath::dtype_name(hotpath::DType::F64), "F64");
}

TEST(ModelTest, ValidateSizes) {
  Model m = load(state_dict({}));
  EXPECT_NO_THROW(m.validate());
  Model a = m;
  a.layers[1].w_ih.push_back(0);
  EXPECT_THROW(a.validate(), Error);
  Model b = m;
  b.config.num_layers = 3;
  EXPECT_THROW(b.validate(), Error);
  Model c = m;
  c.config.head_bias = false;  // but head_b is still there
  EXPECT_THROW(c.validate(), Error);
  Model d = m;
  d.config.window = 0;
  EXPECT_THROW(d.validate(), Error);
  Model e = m;
  e.config.output_size = 0;
  EXPECT_THROW(e.validate(), Error);
}

// --- limits, checked up front ---------------------------------------------------------------------

TEST(LoaderHostile, ThousandsOfLayersRefusedInLinearTime) {
  // The valid-looking H = 1 models: 10,000 layers took 4.3 s to inspect, 40,000 took 207 s
  // (File::find scanned every tensor, once per layer). Now find() is a binary search and the layers
  // are counted no further than the limit.
  for (const int layers : {10000, 40000}) {
    Spec s;
    s.I = s.H = s.O = 1;
    s.L = layers;
    s.bias = false;
    const auto bytes = st::serialize(state_dict(s), {});
    hotpath::test_support::within_seconds(30, [&] {
      std::string e;
      try {
        hotpath::model_from_safetensors(st::File::parse(bytes, "deep.safetensors"));
      } catch (const Error& x) {
        e = x.what();
      }
      EXPECT_HAS(e, "deep.safetensors: the LSTM has more than 64 layers ('lstm.weight_ih_l64' exists); num_layers is "
                    "limited to 64");
    });
  }
  Spec s;
  s.I = s.H = s.O = 1;
  s.L = hotpath::kMaxNumLayers;
  EXPECT_EQ(load(state_dict(s)).config.num_layers, hotpath::kMaxNumLayers);
  s.L = hotpath::kMaxNumLayers + 1;
  EXPECT_HAS(load_error(state_dict(s)), "num_layers is limited to 64");
}

TEST(LoaderMetadata, EveryIntegerFieldRangeChecked) {
  const auto t = state_dict({});
  // One parser for all of them: digits only, within the field's range, the range named.
  for (const char* w : {"+5", " 5", "5 ", "5abc", "0x5", "5e1", "10001", "2147483648", "1000000"})
    EXPECT_HAS(load_error(t, {{"window", w}}), std::string("__metadata__ window '") + w + "' is not an integer in 1..10000");
  EXPECT_EQ(load(t, {{"window", "10000"}}).config.window, 10000);
  EXPECT_EQ(load(t, {{"window", "007"}}).config.window, 7);
  EXPECT_HAS(load_error(t, {{"num_layers", "65"}}), "__metadata__ num_layers '65' is not an integer in 1..64");
  EXPECT_HAS(load_error(t, {{"hidden_size", "0"}}), "__metadata__ hidden_size '0' is not an integer in 1..2147483647");
  EXPECT_HAS(load_error(t, {{"input_size", "-3"}}), "__metadata__ input_size '-3' is not an integer");
  EXPECT_HAS(load_error(t, {{"output_size", "4294967298"}}), "__metadata__ output_size '4294967298' is not an integer");
  // The parser itself, as verify uses it on golden files.
  const st::File f = as_file(t, {{"w", "+5"}, {"ok", "12"}});
  EXPECT_EQ(hotpath::metadata_int(f, "ok", 1, 12), 12);
  EXPECT_EQ(hotpath::metadata_int(f, "absent", 1, 12), std::nullopt);
  EXPECT_THROW(hotpath::metadata_int(f, "ok", 1, 11), Error);
  EXPECT_THROW(hotpath::metadata_int(f, "w", 1, 100), Error);
}

TEST(ModelLimits, ValidateRefusesTooManyLayersAndTooLongWindows) {
  Model m = *hotpath::zoo_model("lstm_s");
  m.config.window = hotpath::kMaxWindow + 1;
  try {
    m.validate();
    ADD_FAILURE() << "accepted";
  } catch (const Error& e) {
    EXPECT_HAS(e.what(), "window 10001 is outside 1..10000");
  }
}

// --- the input scaler (input_scaler.mean / input_scaler.scale, [I]) --------------------------------

namespace {
std::vector<st::OutTensor> with_scaler(const Spec& s, std::vector<double> mean, std::vector<double> scale,
                                       st::DType dtype = st::DType::F32) {
  auto t = state_dict(s);
  t.push_back(st::make_tensor("input_scaler.mean", dtype, {int64_t(mean.size())}, mean));
  t.push_back(st::make_tensor("input_scaler.scale", dtype, {int64_t(scale.size())}, scale));
  return t;
}
}  // namespace

TEST(LoaderScaler, ReadWithoutDisturbingDetectionOrDtype) {
  Spec s;
  s.lstm = "rnn.";
  s.head = "out.";
  s.dtype = st::DType::BF16;
  // F64 scaler tensors beside BF16 weights: the model's dtype stays the weights'.
  const Model m = load(with_scaler(s, {1.5, -2.0, 100.0}, {0.5, 2.0, 1e-3}, st::DType::F64), {{"input_scaler_fit", "x.npy ticks [0, 9) of 12"}});
  EXPECT_EQ(m.lstm_prefix, "rnn.");
  EXPECT_EQ(m.head_prefix, "out.");
  EXPECT_EQ(m.dtype, hotpath::DType::BF16);
  ASSERT_TRUE(m.input_scaler.has_value());
  EXPECT_EQ(m.input_scaler->mean, (std::vector<double>{1.5, -2.0, 100.0}));
  EXPECT_EQ(m.input_scaler->scale, (std::vector<double>{0.5, 2.0, 1e-3}));
  EXPECT_EQ(m.input_scaler->fitted_on, "x.npy ticks [0, 9) of 12");
  EXPECT_FALSE(load(state_dict(Spec{})).input_scaler.has_value());
}

TEST(LoaderScaler, BadScalerTensorsNamed) {
  const Spec s;  // I = 3
  auto only_mean = with_scaler(s, {0, 0, 0}, {1, 1, 1});
  drop(only_mean, "input_scaler.scale");
  EXPECT_HAS(load_error(only_mean), "'input_scaler.scale' is missing");
  auto only_scale = with_scaler(s, {0, 0, 0}, {1, 1, 1});
  drop(only_scale, "input_scaler.mean");
  EXPECT_HAS(load_error(only_scale), "'input_scaler.mean' is missing");
  const std::string shape = load_error(with_scaler(s, {0, 0}, {1, 1}));
  EXPECT_HAS(shape, "'input_scaler.mean' has shape [2], expected [3]");
  auto two_d = state_dict(s);
  two_d.push_back(f32("input_scaler.mean", {1, 3}));
  two_d.push_back(f32("input_scaler.scale", {3}));
  EXPECT_HAS(load_error(two_d), "'input_scaler.mean' has shape [1, 3]");
  auto ints = state_dict(s);
  ints.push_back(st::make_tensor("input_scaler.mean", st::DType::I32, {3}, std::vector<double>{0, 0, 0}));
  ints.push_back(f32("input_scaler.scale", {3}));
  EXPECT_HAS(load_error(ints), "'input_scaler.mean' has dtype I32");
  const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
  EXPECT_HAS(load_error(with_scaler(s, {0, nan, 0}, {1, 1, 1})), "'input_scaler.mean' holds NaN at index 1");
  EXPECT_HAS(load_error(with_scaler(s, {0, 0, 0}, {1, 1, inf})), "'input_scaler.scale' holds +Inf at index 2");
  EXPECT_HAS(load_error(with_scaler(s, {0, 0, 0}, {1, 0, 1})), "'input_scaler.scale' holds 0 at index 1");
  EXPECT_HAS(load_error(with_scaler(s, {0, 0, 0}, {-2, 1, 1})), "'input_scaler.scale' holds -2 at index 0");
}

TEST(LoaderScaler, SavedWithTheModel) {
  TempDir tmp;
  Model m = load(with_scaler(Spec{}, {1.25, -3.5, 1000.0}, {0.5, 2.0, 0.25}), {{"input_scaler_fit", "a.npy"}});
  for (hotpath::DType d : {hotpath::DType::F32, hotpath::DType::BF16}) {
    const std::string path = tmp.file(std::string("m_") + hotpath::dtype_name(d) + ".safetensors");
    hotpath::save_model_file(m, path, d);
    const Model r = hotpath::load_model_file(path);
    // Never rounded to a half-precision weight dtype (1000.0 - 1.25 would not survive bf16).
    ASSERT_TRUE(r.input_scaler.has_value());
    EXPECT_EQ(*r.input_scaler, *m.input_scaler);
  }
}
