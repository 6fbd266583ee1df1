// A PyTorch state_dict of a module that owns an nn.LSTM and an nn.Linear, key prefixes
// detected. Order of checks: unsupported variants (by key, before anything else), prefixes, shapes and
// dtypes, __metadata__ agreement, then the values themselves (Model::validate: NaN/Inf).
//
// Head detection reads "the single remaining 2-D weight whose second dimension is H" as: among the
// tensors not consumed as LSTM parameters, the 2-D float tensors [O, H] whose key ends in `weight`.
// A tensor [*, H] not named `...weight` (a buffer) is never taken as the head, but is listed when no
// head is found.
#include "model/loader.hpp"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <climits>
#include <filesystem>
#include <optional>
#include <set>
#include <tuple>

#include "model/zoo.hpp"
#include "util/error.hpp"

namespace hotpath {
namespace {

namespace st = safetensors;

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}
bool starts_with(std::string_view s, std::string_view prefix) { return s.substr(0, prefix.size()) == prefix; }

using safetensors::quote_key;

std::string quote_keys(const std::vector<std::string>& items, size_t max_items = 12) {
  std::string s;
  for (size_t i = 0; i < items.size() && i < max_items; ++i) s += (i ? ", " : "") + quote_key(items[i]);
  if (items.size() > max_items) s += ", ... (" + std::to_string(items.size()) + " in all)";
  return s;
}

std::string shape_str(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

std::optional<bool> parse_bool(const std::string& s) {
  if (s == "True" || s == "true" || s == "1") return true;
  if (s == "False" || s == "false" || s == "0") return false;
  return std::nullopt;
}

// Precision order F64 > F32 > F16 > BF16 (bf16 keeps 8 significand bits, fp16 11).
int precision_rank(DType d) {
  switch (d) {
    case DType::F64: return 3;
    case DType::F32: return 2;
    case DType::F16: return 1;
    case DType::BF16: return 0;
  }
  return 0;
}

std::optional<DType> model_dtype(st::DType d) {
  switch (d) {
    case st::DType::F64: return DType::F64;
    case st::DType::F32: return DType::F32;
    case st::DType::F16: return DType::F16;
    case st::DType::BF16: return DType::BF16;
    default: return std::nullopt;
  }
}

st::DType file_dtype(DType d) {
  switch (d) {
    case DType::F64: return st::DType::F64;
    case DType::F32: return st::DType::F32;
    case DType::F16: return st::DType::F16;
    case DType::BF16: return st::DType::BF16;
  }
  return st::DType::F32;
}

// For a key `<prefix><kind>_l<k>` with kind one of the four LSTM parameter kinds, the layer index k.
std::optional<size_t> lstm_layer_of(std::string_view key, std::string_view prefix) {
  if (!starts_with(key, prefix)) return std::nullopt;
  std::string_view rest = key.substr(prefix.size());
  for (std::string_view kind : {"weight_ih_l", "weight_hh_l", "bias_ih_l", "bias_hh_l"}) {
    if (!starts_with(rest, kind)) continue;
    std::string_view digits = rest.substr(kind.size());
    size_t k = 0;
    const auto r = std::from_chars(digits.data(), digits.data() + digits.size(), k);
    if (!digits.empty() && r.ec == std::errc() && r.ptr == digits.data() + digits.size()) return k;
  }
  return std::nullopt;
}

class Loader {
 public:
  Loader(const st::File& file, const LoadOptions& options) : f_(file), opt_(options) {
    for (const auto& t : f_.tensors()) names_.push_back(t.name);
    std::sort(names_.begin(), names_.end());
    for (const auto& entry : opt_.ignore) {
      if (entry.empty()) throw fail("an empty name among the tensors to ignore");
      bool matched = false;
      for (const auto& n : names_)
        if (n == entry || (ends_with(entry, ".") && starts_with(n, entry))) {
          ignored_.insert(n);
          matched = true;
        }
      if (!matched)
        throw fail("the tensors to ignore name " + quote_key(entry) + ", which matches no tensor of the file" +
                   (ends_with(entry, ".") ? "" : " (a prefix ends in '.')"));
    }
  }

  Model load() {
    check_variants();
    Model m;
    m.name = f_.source();
    m.lstm_prefix = choose_lstm_prefix();
    read_lstm(m);
    m.head_prefix = choose_head_prefix(m.config.hidden_size);
    read_head(m);
    read_scaler(m);
    check_all_used(m);
    check_metadata(m.config);
    m.dtype = lowest_;
    m.validate();
    return m;
  }

 private:
  Error fail(const std::string& what) const { return Error(f_.source() + ": " + what); }

  void check_variants() const {
    for (const auto& n : names_)
      if (n.find("weight_hr_l") != std::string::npos)
        throw fail("unsupported LSTM variant: proj_size > 0 (found key " + quote_key(n) + ")");
    for (const auto& n : names_)
      if (n.find("_reverse") != std::string::npos)
        throw fail("unsupported LSTM variant: bidirectional (found key " + quote_key(n) + ")");
  }

  const st::TensorInfo* find(const std::string& name) const { return f_.find(name); }

  // An explicit prefix given without its trailing dot ("lstm") is taken as "lstm." when only that fits.
  std::string fit_prefix(const std::string& p, const char* probe) const {
    if (!find(p + probe) && !ends_with(p, ".") && find(p + "." + probe)) return p + ".";
    return p;
  }

  std::string choose_lstm_prefix() const {
    std::vector<std::string> candidates;
    for (const auto& n : names_)
      if (ends_with(n, "weight_ih_l0") && !ignored_.count(n)) candidates.push_back(n.substr(0, n.size() - 12));
    auto explicit_prefix = [&](const std::string& p, const std::string& from) {
      const std::string q = fit_prefix(p, "weight_ih_l0");
      if (!find(q + "weight_ih_l0"))
        throw fail(from + " " + quote_key(p) + " names no tensor " + quote_key(p + "weight_ih_l0") +
                   (candidates.empty() ? std::string(" (no key ends in 'weight_ih_l0')")
                                       : " (LSTM prefixes present: " + quote_keys(candidates) + ")"));
      return q;
    };
    if (!opt_.lstm_prefix.empty()) return explicit_prefix(opt_.lstm_prefix, "--lstm-prefix");
    if (auto it = f_.metadata().find("lstm_prefix"); it != f_.metadata().end())
      return explicit_prefix(it->second, "__metadata__ lstm_prefix");
    if (candidates.empty())
      throw fail("no LSTM found: no tensor key ends in 'weight_ih_l0'" +
                 (names_.empty() ? std::string(" (the file holds no tensors)") : " (keys: " + quote_keys(names_) + ")"));
    if (candidates.size() > 1)
      throw fail("several LSTMs found (prefixes " + quote_keys(candidates) +
                 "); pass --lstm-prefix to choose one");
    return candidates[0];
  }

  // The tensor, which must exist, be a float and have the given shape (-1: any size, checked later).
  const st::TensorInfo& tensor(const std::string& name) {
    const st::TensorInfo* t = find(name);
    if (!t) throw fail("missing tensor " + quote_key(name));
    const auto d = model_dtype(t->dtype);
    if (!d)
      throw fail("tensor " + quote_key(name) + " has dtype " + st::dtype_name(t->dtype) +
                 "; only F64, F32, F16 and BF16 weights are accepted");
    if (precision_rank(*d) < precision_rank(lowest_)) lowest_ = *d;
    return *t;
  }

  void expect_shape(const st::TensorInfo& t, const std::vector<int64_t>& expected, const std::string& meaning) const {
    if (t.shape != expected)
      throw fail("tensor " + quote_key(t.name) + " has shape " + shape_str(t.shape) + ", expected " +
                 shape_str(expected) + " (" + meaning + ")");
  }

  std::vector<double> values(const st::TensorInfo& t) {
    consumed_.insert(t.name);
    return f_.read_f64(t);
  }

  void read_lstm(Model& m) {
    const std::string& p = m.lstm_prefix;
    ModelConfig& c = m.config;

    const st::TensorInfo& hh0 = tensor(p + "weight_hh_l0");
    // Other recurrent layers use the same key names; their gate count gives them away.
    if (hh0.shape.size() == 2 && hh0.shape[1] >= 1 && hh0.shape[0] == 3 * hh0.shape[1])
      throw fail("tensor " + quote_key(hh0.name) + " has shape " + shape_str(hh0.shape) +
                 ", [3H, H]: this is an nn.GRU's state_dict; GRU is not supported, only nn.LSTM ([4H, H])");
    if (hh0.shape.size() == 2 && hh0.shape[1] >= 1 && hh0.shape[0] == hh0.shape[1])
      throw fail("tensor " + quote_key(hh0.name) + " has shape " + shape_str(hh0.shape) +
                 ", [H, H]: this is an nn.RNN's state_dict; a plain RNN is not supported, only nn.LSTM ([4H, H])");
    if (hh0.shape.size() != 2 || hh0.shape[1] < 1 || hh0.shape[1] > INT_MAX / 4 || hh0.shape[0] != 4 * hh0.shape[1])
      throw fail("tensor " + quote_key(hh0.name) + " has shape " + shape_str(hh0.shape) +
                 ", expected [4H, H] (rows four times the columns, H >= 1)");
    const int64_t h = hh0.shape[1], g = 4 * h;
    c.hidden_size = int(h);

    const st::TensorInfo& ih0 = tensor(p + "weight_ih_l0");
    if (ih0.shape.size() != 2 || ih0.shape[0] != g || ih0.shape[1] < 1 || ih0.shape[1] > INT_MAX)
      throw fail("tensor " + quote_key(ih0.name) + " has shape " + shape_str(ih0.shape) + ", expected [" +
                 std::to_string(g) + ", I] ([4H, input_size] with H = " + std::to_string(h) + ", I >= 1)");
    c.input_size = int(ih0.shape[1]);

    // Counted no further than the limit: a hostile file may name a million layers.
    size_t layers = 0;
    while (layers <= size_t(kMaxNumLayers) && find(p + "weight_ih_l" + std::to_string(layers))) ++layers;
    if (layers > size_t(kMaxNumLayers))
      throw fail("the LSTM has more than " + std::to_string(kMaxNumLayers) + " layers (" +
                 quote_key(p + "weight_ih_l" + std::to_string(kMaxNumLayers)) + " exists); num_layers is limited to " +
                 std::to_string(kMaxNumLayers));
    for (const auto& n : names_)
      if (auto k = lstm_layer_of(n, p); k && *k >= layers)
        throw fail("tensor " + quote_key(n) + " belongs to layer " + std::to_string(*k) + " but " +
                   quote_key(p + "weight_ih_l" + std::to_string(layers)) + " is missing (" +
                   (layers == 1 ? std::string("only layer 0 is complete")
                                : "layers 0.." + std::to_string(layers - 1) + " are complete") +
                   ")");
    c.num_layers = int(layers);

    const std::string hs = "H = " + std::to_string(h);
    for (size_t k = 0; k < layers; ++k) {
      const std::string l = "_l" + std::to_string(k);
      LstmLayer layer;
      const int64_t in = c.layer_input_size(int(k));
      const st::TensorInfo& wih = tensor(p + "weight_ih" + l);
      expect_shape(wih, {g, in}, k == 0 ? "[4H, I]" : "[4H, H] for layers after the first, " + hs);
      const st::TensorInfo& whh = tensor(p + "weight_hh" + l);
      expect_shape(whh, {g, h}, "[4H, H], " + hs);
      layer.w_ih = values(wih);
      layer.w_hh = values(whh);

      const bool has_ih = find(p + "bias_ih" + l) != nullptr, has_hh = find(p + "bias_hh" + l) != nullptr;
      if (has_ih != has_hh)
        throw fail("tensor " + quote_key(p + (has_ih ? "bias_ih" : "bias_hh") + l) + " is present but " +
                   quote_key(p + (has_ih ? "bias_hh" : "bias_ih") + l) +
                   " is missing (an LSTM has both biases or neither)");
      if (k == 0) c.lstm_bias = has_ih;
      if (has_ih != c.lstm_bias)
        throw fail(std::string("layer 0 ") + (c.lstm_bias ? "has biases but " : "has no biases but ") + "layer " +
                   std::to_string(k) + (has_ih ? " has " : " has none: ") + quote_key(p + "bias_ih" + l) +
                   " (bias is one setting for the whole nn.LSTM)");
      if (has_ih) {
        const st::TensorInfo& bih = tensor(p + "bias_ih" + l);
        expect_shape(bih, {g}, "[4H], " + hs);
        const st::TensorInfo& bhh = tensor(p + "bias_hh" + l);
        expect_shape(bhh, {g}, "[4H], " + hs);
        layer.b_ih = values(bih);
        layer.b_hh = values(bhh);
      }
      m.layers.push_back(std::move(layer));
    }
  }

  std::string choose_head_prefix(int hidden) const {
    std::vector<std::string> heads, others;
    for (const auto& t : f_.tensors()) {
      if (consumed_.count(t.name) || ignored_.count(t.name) || t.shape.size() != 2 || t.shape[1] != hidden || !st::is_float(t.dtype)) continue;
      (ends_with(t.name, "weight") ? heads : others).push_back(t.name);
    }
    std::sort(heads.begin(), heads.end());
    std::sort(others.begin(), others.end());
    auto explicit_prefix = [&](const std::string& p, const std::string& from) {
      const std::string q = fit_prefix(p, "weight");
      if (!find(q + "weight"))
        throw fail(from + " " + quote_key(p) + " names no tensor " + quote_key(p + "weight") +
                   (heads.empty() ? std::string() : " (head candidates: " + quote_keys(heads) + ")"));
      return q;
    };
    if (!opt_.head_prefix.empty()) return explicit_prefix(opt_.head_prefix, "--head-prefix");
    if (auto it = f_.metadata().find("head_prefix"); it != f_.metadata().end())
      return explicit_prefix(it->second, "__metadata__ head_prefix");
    const std::string h = std::to_string(hidden);
    if (heads.empty())
      throw fail("no head found: expected one 2-D float tensor [O, " + h +
                 "] whose key ends in 'weight' besides the LSTM's" +
                 (others.empty() ? std::string() : " (2-D tensors [*, " + h + "] not named '...weight': " +
                                                       quote_keys(others) + ")"));
    if (heads.size() > 1)
      throw fail("several head candidates (2-D tensors [O, " + h + "]: " + quote_keys(heads) +
                 "); pass --head-prefix to choose one");
    return heads[0].substr(0, heads[0].size() - 6);
  }

  void read_head(Model& m) {
    const std::string& p = m.head_prefix;
    const int64_t h = m.config.hidden_size;
    const st::TensorInfo& w = tensor(p + "weight");
    if (consumed_.count(w.name)) throw fail("head weight " + quote_key(w.name) + " is one of the LSTM's tensors");
    if (w.shape.size() != 2 || w.shape[1] != h || w.shape[0] < 1 || w.shape[0] > INT_MAX)
      throw fail("tensor " + quote_key(w.name) + " has shape " + shape_str(w.shape) + ", expected [O, " +
                 std::to_string(h) + "] ([output_size, H], O >= 1)");
    const int64_t o = w.shape[0];
    m.config.output_size = int(o);
    m.head_w = values(w);
    m.config.head_bias = find(p + "bias") != nullptr;
    if (m.config.head_bias) {
      const st::TensorInfo& b = tensor(p + "bias");
      if (consumed_.count(b.name)) throw fail("head bias " + quote_key(b.name) + " is one of the LSTM's tensors");
      expect_shape(b, {o}, "[O] with O = " + std::to_string(o));
      m.head_b = values(b);
    }
  }

  // The optional input normalization: both tensors or neither, float, shape [I]. Their values (finite,
  // scale > 0) are checked by Model::validate. Their dtype is not the weights' (m.dtype).
  void read_scaler(Model& m) {
    const st::TensorInfo* mean = find(kScalerMeanKey);
    const st::TensorInfo* scale = find(kScalerScaleKey);
    if (!mean && !scale) return;
    if (!mean || !scale)
      throw fail("tensor " + quote_key(mean ? kScalerMeanKey : kScalerScaleKey) + " is present but " +
                 quote_key(mean ? kScalerScaleKey : kScalerMeanKey) +
                 " is missing (an input scaler has both, shape [I])");
    const int64_t in = m.config.input_size;
    for (const st::TensorInfo* t : {mean, scale}) {
      if (!st::is_float(t->dtype))
        throw fail("tensor " + quote_key(t->name) + " has dtype " + st::dtype_name(t->dtype) +
                   "; an input scaler is F64, F32, F16 or BF16");
      expect_shape(*t, {in}, "[I] with I = " + std::to_string(in) + ", one value per input feature");
    }
    InputNormalization n;
    n.mean = f_.read_f64(*mean);
    n.scale = f_.read_f64(*scale);
    consumed_.insert(mean->name);
    consumed_.insert(scale->name);
    if (auto it = f_.metadata().find(kScalerFitMetadataKey); it != f_.metadata().end()) n.fitted_on = it->second;
    m.input_scaler = std::move(n);
  }

  // Every tensor of the file is used or explicitly ignored: a tensor dropped in silence (the first
  // Linear of an MLP head, say) would make the model answer wrongly without a word.
  void check_all_used(const Model& m) const {
    std::vector<std::string> used_but_ignored, unused;
    for (const auto& n : names_) {
      if (consumed_.count(n) && ignored_.count(n)) used_but_ignored.push_back(n);
      if (!consumed_.count(n) && !ignored_.count(n)) unused.push_back(n);
    }
    if (!used_but_ignored.empty())
      throw fail("the tensors to ignore include " + quote_keys(used_but_ignored) + ", which the model uses");
    if (unused.empty()) return;
    const bool layer = std::any_of(unused.begin(), unused.end(), [](const std::string& n) { return ends_with(n, "weight"); });
    throw fail("tensor" + std::string(unused.size() > 1 ? "s " : " ") + quote_keys(unused) + (unused.size() > 1 ? " are" : " is") +
               " not used by the model (nn.LSTM " + quote_key(m.lstm_prefix) + " -> nn.Linear " + quote_key(m.head_prefix) +
               ")" +
               (layer ? "; hotpath computes one nn.LSTM and one nn.Linear, not a deeper head (Linear -> ReLU -> Linear ...)"
                      : "") +
               "; only if the module never uses them, name them in --ignore-tensors (Python: ignore=)");
  }

  void check_metadata(ModelConfig& c) const {
    const auto& meta = f_.metadata();
    if (const auto w = metadata_int(f_, "window", 1, kMaxWindow)) c.window = *w;
    const std::tuple<const char*, int, int> sizes[] = {{"input_size", c.input_size, INT_MAX},
                                                       {"hidden_size", c.hidden_size, INT_MAX},
                                                       {"num_layers", c.num_layers, kMaxNumLayers},
                                                       {"output_size", c.output_size, INT_MAX}};
    for (const auto& [key, actual, limit] : sizes) {
      const auto v = metadata_int(f_, key, 1, limit);
      if (v && *v != actual)
        throw fail(std::string("__metadata__ ") + key + " is " + std::to_string(*v) + " but the tensors give " +
                   std::to_string(actual));
    }
    if (auto it = meta.find("bias"); it != meta.end()) {
      const auto b = parse_bool(it->second);
      if (!b) throw fail("__metadata__ bias " + quote_key(it->second) + " is not True or False");
      if (*b != c.lstm_bias)
        throw fail("__metadata__ bias is " + it->second + " but the LSTM has " +
                   (c.lstm_bias ? "bias tensors" : "no bias tensors"));
    }
  }

  const st::File& f_;
  const LoadOptions& opt_;
  std::vector<std::string> names_;
  std::set<std::string> consumed_;
  std::set<std::string> ignored_;  // the tensors LoadOptions::ignore matches
  DType lowest_ = DType::F64;
};

}  // namespace

std::optional<int> metadata_int(const safetensors::File& file, const std::string& key, int lo, int hi) {
  const auto it = file.metadata().find(key);
  if (it == file.metadata().end()) return std::nullopt;
  const std::string& s = it->second;
  int v = 0;
  const bool digits = !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
  const auto r = std::from_chars(s.data(), s.data() + s.size(), v);
  if (!digits || r.ec != std::errc() || r.ptr != s.data() + s.size() || v < lo || v > hi)
    throw Error(file.source() + ": __metadata__ " + key + " " + quote_key(s) + " is not an integer in " +
                std::to_string(lo) + ".." + std::to_string(hi));
  return v;
}

Model model_from_safetensors(const safetensors::File& file, const LoadOptions& options) {
  return Loader(file, options).load();
}

std::vector<std::string> split_ignore_list(const std::string& list, const std::string& what) {
  std::vector<std::string> out;
  size_t start = 0;
  while (true) {
    const size_t comma = list.find(',', start);
    out.push_back(list.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
    if (out.back().empty()) throw Error(what + " " + quote_key(list) + " holds an empty name");
    if (comma == std::string::npos) return out;
    start = comma + 1;
  }
}

Model load_model_file(const std::string& path, const LoadOptions& options) {
  // Named before the file is read: its bytes would only be refused as a corrupt safetensors header.
  std::string ext = std::filesystem::path(path).extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(), [](unsigned char c) { return char(std::tolower(c)); });
  if (ext == ".onnx") throw Error(path + ": " + std::string(safetensors::kOnnxNotSafetensors));
  return model_from_safetensors(safetensors::File::open(path), options);
}

Model resolve_model(const std::string& path_or_zoo_name, const LoadOptions& options) {
  const std::string& arg = path_or_zoo_name;
  std::error_code ec;
  const auto status = std::filesystem::status(arg, ec);
  if (!ec && std::filesystem::exists(status)) {
    if (std::filesystem::is_directory(status)) throw Error(arg + ": is a directory, not a model file");
    return load_model_file(arg, options);
  }
  if (find_zoo(arg)) {
    // A zoo model has no tensor keys: prefixes or tensors to ignore can only be meant for a file.
    const auto refuse = [&](const std::string& what, const std::string& value) {
      return Error(quote_key(arg) + " is a zoo model, but " + what + " " + quote_key(value) +
                   " was given: key prefixes and tensors to ignore apply to a model file only");
    };
    if (!options.lstm_prefix.empty()) throw refuse("an LSTM prefix", options.lstm_prefix);
    if (!options.head_prefix.empty()) throw refuse("a head prefix", options.head_prefix);
    if (!options.ignore.empty()) throw refuse("a tensor to ignore", options.ignore[0]);
    if (auto m = zoo_model(arg)) return std::move(*m);
  }
  throw Error("no model file or zoo model named " + quote_key(arg) + " (hotpath models lists the zoo)");
}

std::map<std::string, std::string> model_metadata(const Model& model, const std::string& lstm_prefix,
                                                  const std::string& head_prefix) {
  const ModelConfig& c = model.config;
  std::map<std::string, std::string> meta{
      {"input_size", std::to_string(c.input_size)},
      {"hidden_size", std::to_string(c.hidden_size)},
      {"num_layers", std::to_string(c.num_layers)},
      {"output_size", std::to_string(c.output_size)},
      {"bias", c.lstm_bias ? "True" : "False"},
      {"lstm_prefix", lstm_prefix.empty() ? "lstm." : lstm_prefix},
      {"head_prefix", head_prefix.empty() ? "fc." : head_prefix},
  };
  if (c.window) meta["window"] = std::to_string(*c.window);
  if (model.input_scaler && !model.input_scaler->fitted_on.empty())
    meta[kScalerFitMetadataKey] = model.input_scaler->fitted_on;
  return meta;
}

std::vector<safetensors::OutTensor> model_tensors(const Model& model, DType dtype, const std::string& lstm_prefix,
                                                  const std::string& head_prefix) {
  model.validate();
  const std::string lp = lstm_prefix.empty() ? "lstm." : lstm_prefix;
  const std::string hp = head_prefix.empty() ? "fc." : head_prefix;
  const ModelConfig& c = model.config;
  const st::DType d = file_dtype(dtype);
  const int64_t h = c.hidden_size, g = 4 * h;
  std::vector<st::OutTensor> out;
  for (size_t k = 0; k < model.layers.size(); ++k) {
    const LstmLayer& l = model.layers[k];
    const std::string s = "_l" + std::to_string(k);
    out.push_back(st::make_tensor(lp + "weight_ih" + s, d, {g, c.layer_input_size(int(k))}, l.w_ih));
    out.push_back(st::make_tensor(lp + "weight_hh" + s, d, {g, h}, l.w_hh));
    if (c.lstm_bias) {
      out.push_back(st::make_tensor(lp + "bias_ih" + s, d, {g}, l.b_ih));
      out.push_back(st::make_tensor(lp + "bias_hh" + s, d, {g}, l.b_hh));
    }
  }
  out.push_back(st::make_tensor(hp + "weight", d, {c.output_size, h}, model.head_w));
  if (c.head_bias) out.push_back(st::make_tensor(hp + "bias", d, {c.output_size}, model.head_b));
  if (model.input_scaler) {
    // Not rounded to a half-precision weight dtype: a mean of order 1e3 would lose its units digit.
    const st::DType sd = dtype == DType::F64 ? st::DType::F64 : st::DType::F32;
    out.push_back(st::make_tensor(kScalerMeanKey, sd, {c.input_size}, model.input_scaler->mean));
    out.push_back(st::make_tensor(kScalerScaleKey, sd, {c.input_size}, model.input_scaler->scale));
  }
  return out;
}

void save_model_file(const Model& model, const std::string& path, DType dtype, const std::string& lstm_prefix,
                     const std::string& head_prefix) {
  safetensors::write_file(path, model_tensors(model, dtype, lstm_prefix, head_prefix),
                          model_metadata(model, lstm_prefix, head_prefix));
}

}  // namespace hotpath
