// A strict checker of the markup hotpath writes (the HTML report and its SVGs): stricter than HTML,
// so a pass means any browser and any XML parser reads the same tree.
#pragma once
#include <cctype>
#include <cstddef>
#include <map>
#include <regex>
#include <set>
#include <string>
#include <vector>

namespace hotpath::llm::test {

namespace detail {
inline bool name_char(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == ':' || c == '_';
}
// At s[i] == '&': the entity's length when it is one hotpath writes, else 0.
inline std::size_t entity(const std::string& s, std::size_t i) {
  for (const char* e : {"&lt;", "&gt;", "&amp;", "&quot;", "&#39;"})
    if (s.compare(i, std::char_traits<char>::length(e), e) == 0) return std::char_traits<char>::length(e);
  return 0;
}
}  // namespace detail

// "" when `s` is well formed: every element opened is closed, in order (void: <meta>; SVG elements
// may close themselves with "/>"); attribute values are double-quoted and hold no '<'; text holds
// no raw '<' or '>' and only the entities &lt; &gt; &amp; &quot; &#39;; no comments; <style> holds
// no '<'; no attribute is an event handler (on...) or a reference (src, href, xlink:href).
// Otherwise, what is wrong and where.
inline std::string check_markup(const std::string& s) {
  using detail::name_char;
  std::vector<std::string> stack;
  const auto at = [&](std::size_t i) { return " at byte " + std::to_string(i) + ": " + s.substr(i, 60); };
  std::size_t i = 0;
  if (s.compare(0, 15, "<!DOCTYPE html>") == 0) i = 15;
  while (i < s.size()) {
    const char c = s[i];
    if (c == '&') {
      const std::size_t n = detail::entity(s, i);
      if (!n) return "bare or unknown entity" + at(i);
      i += n;
      continue;
    }
    if (c == '>') return "raw '>' in text" + at(i);
    if (c != '<') {
      ++i;
      continue;
    }
    if (s.compare(i, 2, "<!") == 0) return "comment or declaration" + at(i);
    const bool closing = i + 1 < s.size() && s[i + 1] == '/';
    std::size_t k = i + 1 + (closing ? 1 : 0);
    const std::size_t name0 = k;
    while (k < s.size() && name_char(s[k])) ++k;
    if (k == name0) return "'<' that starts no tag" + at(i);
    const std::string name = s.substr(name0, k - name0);
    bool self_close = false;
    for (;;) {
      while (k < s.size() && std::isspace(static_cast<unsigned char>(s[k]))) ++k;
      if (k >= s.size()) return "unterminated tag" + at(i);
      if (s[k] == '>') {
        ++k;
        break;
      }
      if (s.compare(k, 2, "/>") == 0 && !closing) {
        self_close = true;
        k += 2;
        break;
      }
      if (closing) return "attribute on a closing tag" + at(i);
      const std::size_t a0 = k;
      while (k < s.size() && name_char(s[k])) ++k;
      if (k == a0) return "bad attribute name" + at(k);
      std::string attr = s.substr(a0, k - a0);
      for (char& ch : attr) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
      if (attr.rfind("on", 0) == 0 || attr == "src" || attr == "href" || attr == "xlink:href" || attr == "srcset")
        return "forbidden attribute " + attr + at(a0);
      if (k + 1 >= s.size() || s[k] != '=' || s[k + 1] != '"') return "attribute without a double-quoted value" + at(a0);
      const std::size_t q = s.find('"', k + 2);
      if (q == std::string::npos) return "unterminated attribute value" + at(a0);
      for (std::size_t v = k + 2; v < q; ++v) {
        if (s[v] == '<') return "'<' in an attribute value" + at(v);
        if (s[v] == '&' && !detail::entity(s, v)) return "bare '&' in an attribute value" + at(v);
      }
      k = q + 1;
    }
    if (closing) {
      if (stack.empty()) return "</" + name + "> closes nothing" + at(i);
      if (stack.back() != name) return "</" + name + "> closes <" + stack.back() + ">" + at(i);
      stack.pop_back();
    } else if (!self_close && name != "meta") {
      stack.push_back(name);
      if (name == "style") {
        const std::size_t e = s.find("</style>", k);
        if (e == std::string::npos) return "unclosed <style>" + at(i);
        if (s.find('<', k) < e) return "'<' inside <style>" + at(k);
        k = e;
      }
    }
    i = k;
  }
  if (!stack.empty()) return "unclosed <" + stack.back() + ">";
  return "";
}

// Whether `s` is valid UTF-8 (no overlong forms, surrogates or code points past U+10FFFF).
inline bool valid_utf8(const std::string& s) {
  for (std::size_t i = 0; i < s.size();) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    std::size_t n = 0;
    unsigned cp = 0;
    if (c < 0x80) n = 1, cp = c;
    else if ((c & 0xe0) == 0xc0) n = 2, cp = c & 0x1f;
    else if ((c & 0xf0) == 0xe0) n = 3, cp = c & 0x0f;
    else if ((c & 0xf8) == 0xf0) n = 4, cp = c & 0x07;
    else return false;
    if (i + n > s.size()) return false;
    for (std::size_t k = 1; k < n; ++k) {
      const unsigned char d = static_cast<unsigned char>(s[i + k]);
      if ((d & 0xc0) != 0x80) return false;
      cp = (cp << 6) | (d & 0x3f);
    }
    static constexpr unsigned kMin[] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < kMin[n] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return false;
    i += n;
  }
  return true;
}

// The tables of a run's section: metrics[key][quantile] and rows[key] as printed.
struct Tables {
  std::map<std::string, std::map<std::string, std::string>> metrics;
  std::map<std::string, std::string> rows;
};
inline Tables tables_of(const std::string& html) {
  Tables t;
  const std::regex metric_row("<tr data-metric=\"(\\w+)\">(.*?)</tr>");
  const std::regex q_cell("<td data-q=\"(\\w+)\">([^<]*)</td>");
  for (auto it = std::sregex_iterator(html.begin(), html.end(), metric_row); it != std::sregex_iterator(); ++it) {
    const std::string key = (*it)[1], cells = (*it)[2];
    for (auto c = std::sregex_iterator(cells.begin(), cells.end(), q_cell); c != std::sregex_iterator(); ++c)
      t.metrics[key][(*c)[1]] = (*c)[2];
  }
  const std::regex key_row("<tr data-key=\"([\\w.]+)\"><th class=\"t\">[^<]*</th><td>([^<]*)</td></tr>");
  for (auto it = std::sregex_iterator(html.begin(), html.end(), key_row); it != std::sregex_iterator(); ++it)
    t.rows[(*it)[1]] = (*it)[2];
  return t;
}

}  // namespace hotpath::llm::test
