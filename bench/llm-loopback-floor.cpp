// Loopback TCP one-way latency floor between two processes (blocking reads), median of 2000.
#include <arpa/inet.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>
int main(int argc, char** argv) {
  int gap_us = argc > 1 ? atoi(argv[1]) : 0;
  int l = socket(AF_INET, SOCK_STREAM, 0); sockaddr_in a{}; a.sin_family = AF_INET; a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(l, (sockaddr*)&a, sizeof a); listen(l, 1); socklen_t len = sizeof a; getsockname(l, (sockaddr*)&a, &len);
  if (fork() == 0) { int c = socket(AF_INET, SOCK_STREAM, 0); connect(c, (sockaddr*)&a, sizeof a); int one=1; setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    char b[8]; while (read(c, b, 8) == 8) write(c, b, 8); _exit(0); }
  int s = accept(l, nullptr, nullptr); int one=1; setsockopt(s, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  std::vector<double> v; char b[8] = {};
  for (int i = 0; i < 2000; ++i) { auto t = std::chrono::steady_clock::now(); write(s, b, 8); read(s, b, 8);
    v.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t).count()); if (gap_us) usleep(gap_us); }
  std::sort(v.begin(), v.end()); std::printf("gap %d us: RTT p50 %.1f us p90 %.1f p99 %.1f\n", gap_us, v[1000], v[1800], v[1980]);
  close(s);
}
