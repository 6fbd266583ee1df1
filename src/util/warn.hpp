// The library's warnings: "hotpath: warning: TEXT" on stderr, each distinct text once per process. A
// front end that warns its own way (Python's warnings module) turns stderr off and reports what the
// backend says in its facts instead.
#pragma once
#include <string>

namespace hotpath::util {
// Returns whether it was written now (false: shown before, or stderr warnings are off).
bool warn_once(const std::string& text);
void set_stderr_warnings(bool on);
// Forgets which texts were shown (tests).
void forget_warnings();
}  // namespace hotpath::util
