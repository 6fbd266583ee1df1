// hotpath from C++: the same as examples/c/main.c through the RAII wrapper, whose failures throw
// hotpath::error (status() and the library's message).
//   example_cpp [MODEL [BACKEND [WINDOW]]]
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <vector>

#include <hotpath/hotpath.hpp>

int main(int argc, char** argv) {
  try {
    std::printf("hotpath %s\n", hotpath::version().c_str());
    const hotpath::model model = hotpath::model::open(argc > 1 ? argv[1] : "lstm_s");
    const hotpath_model_info m = model.info();
    std::printf("model %s: I=%d H=%d L=%d O=%d\n", m.name, m.input_size, m.hidden_size, m.num_layers, m.output_size);

    hotpath::engine_options options;
    options.backend = argc > 2 ? argv[2] : "auto";
    options.window = argc > 3 ? std::atoi(argv[3]) : 0;
    hotpath::engine engine(model, options);
    std::printf("engine: %s (%s, %s), %s mode, W=%d\n", engine.backend().c_str(), engine.variant().c_str(),
                engine.precision().c_str(), engine.mode().c_str(), engine.window());

    std::vector<float> x(engine.input_size()), out(engine.output_size());
    for (int t = 0; t < 5; ++t) {
      for (size_t i = 0; i < x.size(); ++i) x[i] = float(std::sin(0.1 * double(t * int(x.size()) + int(i))));
      engine.step(x.data(), x.size(), out.data(), out.size());  // zero copy: straight into `out`
      std::printf("tick %d:", t);
      for (float z : out) std::printf(" %.6f", z);
      std::printf("\n");
    }

    x[0] = std::numeric_limits<float>::quiet_NaN();
    try {
      engine.step(x, out);
      std::fprintf(stderr, "a NaN tick was accepted\n");
      return 1;
    } catch (const hotpath::error& e) {
      std::printf("NaN tick: %s: %s\n", hotpath_status_name(e.status()), e.what());
      if (e.status() != HOTPATH_ERROR_TICK) return 1;
    }
    std::printf("ticks consumed: %lld\n", static_cast<long long>(engine.ticks()));
    return engine.ticks() == 5 ? 0 : 1;
  } catch (const hotpath::error& e) {
    std::fprintf(stderr, "hotpath error (%s): %s\n", hotpath_status_name(e.status()), e.what());
    return 1;
  }
}
