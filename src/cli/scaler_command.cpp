// `hotpath scaler fit`: an input scaler fitted on the first T ticks of a recorded series only, written
// into a copy of the model file (tensors input_scaler.mean / input_scaler.scale, F32 [I]).
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <iostream>
#include <memory>

#include "cli/commands.hpp"
#include "engine/engine.hpp"
#include "model/loader.hpp"
#include "model/npy.hpp"
#include "model/safetensors.hpp"
#include "scaling/input_scaler.hpp"
#include "util/cli_number.hpp"
#include "util/error.hpp"
#include "util/output_paths.hpp"

namespace hotpath::cli {
namespace {

namespace st = hotpath::safetensors;

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// The series [rows, cols] in float64 from a .npy file or a safetensors tensor.
std::vector<double> read_series(const std::string& path, const std::string& key, size_t* rows, size_t* cols) {
  if (ends_with(path, ".npy")) {
    npy::Array a = npy::read_file(path);
    if (a.shape.size() != 2)
      throw Error(path + ": .npy array has " + std::to_string(a.shape.size()) +
                  " dimensions; scaler fit takes one series [T, I]");
    *rows = size_t(a.shape[0]);
    *cols = size_t(a.shape[1]);
    return std::move(a.values);
  }
  if (!ends_with(path, ".safetensors"))
    throw Error("--inputs '" + path + "': expected a .npy or .safetensors file");
  const st::File file = st::File::open(path);
  const st::TensorInfo* t = file.find(key);
  if (!t) throw Error(path + ": no tensor " + st::quote_key(key) + "; name it with --key");
  if (!st::is_float(t->dtype))
    throw Error(path + ": tensor " + st::quote_key(key) + " has dtype " + st::dtype_name(t->dtype) + ", expected a float tensor");
  if (t->shape.size() != 2)
    throw Error(path + ": tensor " + st::quote_key(key) + " has " + std::to_string(t->shape.size()) +
                " dimensions, expected 2 ([T, I])");
  *rows = size_t(t->shape[0]);
  *cols = size_t(t->shape[1]);
  return file.read_f64(*t);
}

}  // namespace

void add_scaler_command(CLI::App& app) {
  auto* scaler = app.add_subcommand("scaler", "Input scaling stored with a model (input_scaler.mean/.scale)");
  scaler->require_subcommand(1);
  auto* cmd = scaler->add_subcommand(
      "fit", "Fit mean and std on ticks [0, T) of a series only, and write them into a copy of the model");
  struct Flags {
    std::string model, inputs, key = "inputs", out;
    LoadOptions load;
    int64_t until = 0;
  };
  auto f = std::make_shared<Flags>();
  cmd->add_option("--model", f->model, "Model file (safetensors state_dict) or zoo name")->required();
  add_load_options(cmd, f->load);
  cmd->add_option("--inputs", f->inputs, "Series [T, I]: .npy (float32/float64, C order) or .safetensors")->required();
  cmd->add_option("--key", f->key, "Tensor of a .safetensors --inputs")->capture_default_str();
  util::add_int_option(cmd, "--until", f->until, "Fit on ticks [0, T) only; rows at or after T are never read", 0,
                       INT64_MAX)
      ->required();
  cmd->add_option("--out", f->out, "Output model file (.safetensors)")->required();
  cmd->callback([f] {
    const util::FileArg ins[] = {{"--model", f->model}, {"--inputs", f->inputs}}, outs[] = {{"--out", f->out}};
    util::check_output_files(ins, outs);
    // The model: a file is copied tensor for tensor (bytes unchanged), a zoo model written as `export` does.
    std::error_code ec;
    const bool is_file = std::filesystem::exists(f->model, ec);
    std::vector<st::OutTensor> tensors;
    std::map<std::string, std::string> meta;
    Model m;
    if (is_file) {
      const st::File file = st::File::open(f->model);
      m = model_from_safetensors(file, f->load);
      for (const auto& t : file.tensors()) {
        if (t.name == kScalerMeanKey || t.name == kScalerScaleKey) continue;  // replaced below
        const auto raw = file.raw(t);
        tensors.push_back({t.name, t.dtype, t.shape, std::vector<uint8_t>(raw.begin(), raw.end())});
      }
      meta = file.metadata();
    } else {
      m = open_model(f->model, f->load);
      tensors = model_tensors(m, DType::F32, "lstm.", "fc.");
      std::erase_if(tensors, [](const st::OutTensor& t) { return t.name == kScalerMeanKey || t.name == kScalerScaleKey; });
      meta = model_metadata(m);
    }
    const size_t I = size_t(m.config.input_size);

    size_t rows = 0, cols = 0;
    const std::vector<double> series = read_series(f->inputs, f->key, &rows, &cols);
    if (cols != I)
      throw Error(f->inputs + ": the series has " + std::to_string(cols) + " features per tick, the model takes " +
                  std::to_string(I));
    if (f->until < 2) throw Error("--until " + std::to_string(f->until) + ": a standard deviation needs T >= 2 ticks");
    if (uint64_t(f->until) > rows)
      throw Error("--until " + std::to_string(f->until) + " is past the end of the series (" + std::to_string(rows) +
                  " ticks in '" + f->inputs + "')");
    const size_t T = size_t(f->until);
    for (size_t k = 0; k < T * I; ++k)
      if (!std::isfinite(series[k]))
        throw Error(f->inputs + ": tick " + std::to_string(k / I) + ", feature " + std::to_string(k % I) + " is " +
                    (std::isnan(series[k]) ? "NaN" : "Inf") + " (within the fitted ticks [0, " + std::to_string(T) + "))");

    std::vector<size_t> constant;
    InputNormalization n = fit_normalization(std::span<const double>(series).first(T * I), T, I, &constant);
    // Stored as F32: each value must survive the rounding (a float64 series can hold 1e300).
    for (size_t i = 0; i < I; ++i) {
      const float mean = float(n.mean[i]), scale = float(n.scale[i]);
      if (!std::isfinite(mean) || !std::isfinite(scale) || !(scale > 0))
        throw Error(f->inputs + ": feature " + std::to_string(i) + ": mean " + std::to_string(n.mean[i]) + ", std " +
                    std::to_string(n.scale[i]) + " do not fit in float32");
      n.mean[i] = mean;
      n.scale[i] = scale;
    }
    if (!constant.empty()) {
      std::string list;
      for (size_t k = 0; k < constant.size() && k < 16; ++k) list += (k ? ", " : "") + std::to_string(constant[k]);
      if (constant.size() > 16) list += ", ...";
      std::cerr << "hotpath scaler fit: " << constant.size() << " feature(s) constant over ticks [0, " << T
                << "): standard deviation 0, scale 1 (features " << list << ")\n";
    }
    const std::string fitted_on = f->inputs + " ticks [0, " + std::to_string(T) + ") of " + std::to_string(rows);
    tensors.push_back(st::make_tensor(kScalerMeanKey, st::DType::F32, {int64_t(I)}, n.mean));
    tensors.push_back(st::make_tensor(kScalerScaleKey, st::DType::F32, {int64_t(I)}, n.scale));
    meta[kScalerFitMetadataKey] = fitted_on;
    // Checked as a model before it is written: what this writes, hotpath loads.
    m.input_scaler = n;
    m.validate();
    st::write_file(f->out, tensors, meta);
    std::cerr << "hotpath scaler fit: mean and std of " << I << " features over " << fitted_on << " -> " << f->out
              << "\n";
  });
}

}  // namespace hotpath::cli
