#!/usr/bin/env bash
# scratch: first device run of the multi-block kernels
set -u
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
B=build-gpu
t0=$(date +%s)
cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DHOTPATH_BENCHMARKS=OFF -DHOTPATH_CUDA_PTXAS_VERBOSE=ON > $OUT/build.log 2>&1
ninja -C $B -j16 test_cuda_backend hotpath >> $OUT/build.log 2>&1 || { grep -E "error|FAILED" -A5 $OUT/build.log | head -40; exit 1; }
echo "build $(( $(date +%s) - t0 )) s"
T=$B/tests/cuda/test_cuda_backend
HP=$(find $B -name hotpath -type f -perm -u+x | head -1)
for tool in memcheck racecheck synccheck; do
  timeout 100 compute-sanitizer --tool $tool --error-exitcode 9 $T --gtest_filter="${SAN_FILTER:-Zoo/CudaFamily.*/lstm_s_cluster:Zoo/CudaFamily.*/lstm_s_grid}" > $OUT/san-$tool.log 2>&1
  echo "sanitizer $tool rc=$?"; grep -E "ERROR SUMMARY|FAILED|Invalid|Race|Barrier" $OUT/san-$tool.log | sort | uniq -c | head -5
done
timeout ${TEST_T:-200} $T --gtest_filter="${FILTER:-Zoo/CudaFamily.*:CudaFamilyChoice.*}" > $OUT/fam.log 2>&1; echo "family tests rc=$?"
grep -E "^\[family\]|FAILED|Failure|OK \]|exception" $OUT/fam.log | head -80
for m in ${BENCH_MODELS:-lstm_s:cluster lstm_m:cluster lstm_m:grid}; do
  model=${m%%:*}; k=${m##*:}
  timeout 60 $HP bench --model $model --backend cuda --ticks ${TICKS:-100000} --cpuset 2 --json $OUT/b-$model-$k.json ${EXTRA:-} > $OUT/b-$model-$k.log 2>&1
  echo "bench $model $k rc=$?"; grep -E "latency|pingpong|ping-pong|error|kernel|tick rate|precompute" $OUT/b-$model-$k.log | head -12
done
