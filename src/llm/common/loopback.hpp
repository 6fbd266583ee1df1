// What counts as this machine: serve-sim binds only there, and the server view reads this machine's
// GPUs only for an endpoint there.
#pragma once
#include <arpa/inet.h>

#include <string>
#include <string_view>

namespace hotpath::llm {

// "localhost", "::1" (bracketed or not) or an IPv4 address in 127.0.0.0/8; exact spelling (callers
// that take a host from a URL lower-case it first).
inline bool is_loopback_host(std::string_view host) {
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  if (host == "localhost" || host == "::1") return true;
  in_addr a{};
  return inet_pton(AF_INET, std::string(host).c_str(), &a) == 1 && (ntohl(a.s_addr) >> 24) == 127;
}

}  // namespace hotpath::llm
