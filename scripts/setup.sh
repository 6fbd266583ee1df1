#!/usr/bin/env bash
# Installs what hotpath needs from the distribution's packages (Debian/Ubuntu), only what is missing,
# then the project's Python venv .venv (numpy, pytest, nanobind, scikit-build-core from PyPI: the
# Python package's build and tests). Nothing is downloaded at build or run time. The CUDA toolkit is not
# installed here: with nvcc on PATH (or in /usr/local/cuda/bin) the CUDA backend is built, otherwise
# hotpath builds without it.
# --aarch64: also the cross compiler and qemu-user of the aarch64 job (scripts/test-aarch64.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
required=(cmake ninja-build g++ clang libclang-rt-dev libgtest-dev libgmock-dev libcli11-dev nlohmann-json3-dev
          prometheus-cpp-dev)
case "${1:-}" in
  --aarch64) required+=(g++-aarch64-linux-gnu qemu-user) ;;
  "") ;;
  *) echo "setup: unknown argument '$1' (scripts/setup.sh [--aarch64])"; exit 2 ;;
esac
# prometheus: Debian's Prometheus server and promtool, for the telemetry tests only (the alert rules' unit
# tests; the server scraping a live run). Where a service manager runs, installing it also starts a
# server on :9090.
optional=(libbenchmark-dev libcurl4-openssl-dev prometheus)
# A python3 that makes venvs and has its C headers (the distribution's, or one already on PATH).
python_ok() { python3 -c 'import ensurepip, os, sysconfig, venv; assert os.path.isfile(os.path.join(sysconfig.get_paths()["include"], "Python.h"))' 2>/dev/null; }
python_ok || required+=(python3 python3-venv python3-dev)
missing=()
for p in "${required[@]}" "${optional[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  sudo=""
  [ "$(id -u)" -ne 0 ] && command -v sudo >/dev/null && sudo="sudo"
  echo "setup: installing ${missing[*]}"
  if ! ($sudo apt-get update -qq && DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}") >/tmp/hotpath-setup.log 2>&1; then
    # Optional packages may be unavailable (an offline machine): the build then goes without them.
    for p in "${required[@]}"; do
      dpkg -s "$p" >/dev/null 2>&1 || [ -n "$(command -v "${p%-build}")" ] || {
        echo "setup: could not install $p (see /tmp/hotpath-setup.log)"; exit 1; }
    done
    echo "setup: some optional packages could not be installed; continuing without them"
  fi
fi
command -v nvcc >/dev/null || [ -x /usr/local/cuda/bin/nvcc ] || echo "setup: no nvcc found: building without the CUDA backend"

# The project venv: what `pip install .` and the Python tests need (python/requirements-dev.txt).
[ -x .venv/bin/python3 ] || python3 -m venv .venv
.venv/bin/python3 -m pip install -q --disable-pip-version-check -r python/requirements-dev.txt \
  || { echo "setup: could not install python/requirements-dev.txt into .venv (PyPI unreachable?)"; exit 1; }
