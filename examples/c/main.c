/* hotpath from C: open a model, run a few ticks, print the outputs, and show two refusals (a NaN tick,
 * a wrong buffer length) that leave the engine as it was.
 *   example_c [MODEL [BACKEND [WINDOW]]]   MODEL: a safetensors file or a zoo name (default lstm_s),
 *                                          BACKEND: auto (default), cpu, ref, cuda; WINDOW: 0 = the model's */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include <hotpath/hotpath.h>

/* Prints the failure and says whether the call succeeded. */
static int ok(hotpath_status status, const char* what) {
  if (status == HOTPATH_OK) return 1;
  fprintf(stderr, "%s failed (%s): %s\n", what, hotpath_status_name(status), hotpath_last_error());
  return 0;
}

int main(int argc, char** argv) {
  const char* model_name = argc > 1 ? argv[1] : "lstm_s";
  hotpath_engine_options options = HOTPATH_ENGINE_OPTIONS_INIT;
  hotpath_model* model = NULL;
  hotpath_engine* engine = NULL;
  hotpath_model_info model_info;
  hotpath_engine_info info;
  float* x = NULL;
  float* out = NULL;
  int64_t ticks = 0;
  int t, i, result = 1;
  hotpath_status status;

  options.backend = argc > 2 ? argv[2] : "auto";
  options.window = argc > 3 ? atoi(argv[3]) : 0;
  printf("hotpath %s\n", hotpath_version());

  if (!ok(hotpath_model_open(model_name, NULL, NULL, &model), "hotpath_model_open")) goto done;
  model_info.struct_size = sizeof model_info;
  if (!ok(hotpath_model_get_info(model, &model_info), "hotpath_model_get_info")) goto done;
  printf("model %s: I=%d H=%d L=%d O=%d\n", model_info.name, model_info.input_size, model_info.hidden_size,
         model_info.num_layers, model_info.output_size);

  if (!ok(hotpath_engine_open(model, &options, &engine), "hotpath_engine_open")) goto done;
  info.struct_size = sizeof info;
  if (!ok(hotpath_engine_get_info(engine, &info), "hotpath_engine_get_info")) goto done;
  printf("engine: %s (%s, %s), %s mode, W=%d\n", info.backend, info.variant, info.precision, info.mode, info.window);

  /* Caller-owned buffers: the engine reads x and writes out in place. */
  x = malloc(sizeof(float) * (size_t)info.input_size);
  out = malloc(sizeof(float) * (size_t)info.output_size);
  if (!x || !out) goto done;
  for (t = 0; t < 5; ++t) {
    for (i = 0; i < info.input_size; ++i) x[i] = (float)sin(0.1 * (t * info.input_size + i));
    if (!ok(hotpath_engine_step(engine, x, (size_t)info.input_size, out, (size_t)info.output_size),
            "hotpath_engine_step"))
      goto done;
    printf("tick %d:", t);
    for (i = 0; i < info.output_size; ++i) printf(" %.6f", out[i]);
    printf("\n");
  }

  /* A NaN tick is refused with HOTPATH_ERROR_TICK and changes nothing. */
  x[0] = (float)NAN;
  status = hotpath_engine_step(engine, x, (size_t)info.input_size, out, (size_t)info.output_size);
  printf("NaN tick: %s: %s\n", hotpath_status_name(status), hotpath_last_error());
  if (status != HOTPATH_ERROR_TICK) goto done;
  /* So is a buffer of the wrong length. */
  status = hotpath_engine_step(engine, x, (size_t)info.input_size + 1, out, (size_t)info.output_size);
  printf("wrong length: %s: %s\n", hotpath_status_name(status), hotpath_last_error());
  if (status != HOTPATH_ERROR_INVALID_ARGUMENT) goto done;
  if (!ok(hotpath_engine_ticks(engine, &ticks), "hotpath_engine_ticks")) goto done;
  printf("ticks consumed: %ld\n", (long)ticks);
  result = ticks == 5 ? 0 : 1;

done:
  free(x);
  free(out);
  hotpath_engine_close(engine);
  hotpath_model_close(model);
  return result;
}
