/* Compiled as C89 with -pedantic-errors (tests/capi/CMakeLists.txt): the C ABI's header must stay
   usable from plain old C. */
#include "hotpath/hotpath.h"

int hotpath_c89_header_check(void);
int hotpath_c89_header_check(void) {
  hotpath_engine_options options = HOTPATH_ENGINE_OPTIONS_INIT;
  hotpath_model_info info;
  hotpath_metrics_snapshot metrics;
  info.struct_size = sizeof info;
  metrics.struct_size = sizeof metrics;
  return (int)options.struct_size + (int)info.struct_size + (int)metrics.struct_size + (int)HOTPATH_OK;
}
