// What the host sides of the persistent kernels share: mapped pinned memory laid out in whole cache lines (a
// line the host writes is never one the device writes), the heartbeat's period, how long a stop waits.
#pragma once
#include <chrono>
#include <cstddef>

namespace hotpath::cuda {

inline constexpr size_t kHostLine = 64;
inline constexpr size_t round_to_line(size_t n) { return (n + kHostLine - 1) / kHostLine * kHostLine; }
inline constexpr auto kHeartbeatPeriod = std::chrono::milliseconds(20);  // a lease is many of them
inline constexpr auto kStopWait = std::chrono::seconds(2);  // how long a stop waits for the kernel to leave

}  // namespace hotpath::cuda
