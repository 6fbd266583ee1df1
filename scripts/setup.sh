#!/usr/bin/env bash
# Installs what hotpath needs from the distribution's packages (Debian/Ubuntu), only what is missing.
# Nothing is downloaded at build or run time. The CUDA toolkit is not installed here: with nvcc on PATH
# (or in /usr/local/cuda/bin) the CUDA backend is built, otherwise hotpath builds without it.
set -euo pipefail
required=(cmake ninja-build g++ clang libclang-rt-dev libgtest-dev libgmock-dev libcli11-dev nlohmann-json3-dev)
optional=(libbenchmark-dev libcurl4-openssl-dev)
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
