#include "cli_args.h"

#include <cmath>

#include "dist_moe/error.h"

namespace dist_moe::cli {

Args::Args(const std::vector<std::string>& argv, const std::set<std::string>& valued,
           const std::set<std::string>& flags) {
  for (size_t i = 0; i < argv.size(); ++i) {
    std::string a = argv[i];
    if (a.rfind("--", 0) != 0) detail::fail(ErrorCode::kInvalidValue, "unexpected argument '", a, "'");
    a = a.substr(2);
    std::optional<std::string> inline_value;
    if (auto eq = a.find('='); eq != std::string::npos) {
      inline_value = a.substr(eq + 1);
      a = a.substr(0, eq);
    }
    if (flags.count(a)) {
      if (inline_value) detail::fail(ErrorCode::kInvalidValue, "option --", a, " takes no value");
      flags_.insert(a);
    } else if (valued.count(a)) {
      if (inline_value) {
        values_[a] = *inline_value;
      } else {
        if (i + 1 >= argv.size()) detail::fail(ErrorCode::kInvalidValue, "option --", a, " needs a value");
        values_[a] = argv[++i];
      }
    } else {
      detail::fail(ErrorCode::kInvalidValue, "unknown option --", a);
    }
  }
}

std::optional<std::string> Args::str(const std::string& name) const {
  auto it = values_.find(name);
  if (it == values_.end()) return std::nullopt;
  return it->second;
}

std::optional<int64_t> Args::integer(const std::string& name) const {
  auto s = str(name);
  if (!s) return std::nullopt;
  size_t used = 0;
  int64_t v = 0;
  try {
    v = std::stoll(*s, &used, 10);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != s->size())
    detail::fail(ErrorCode::kInvalidValue, "option --", name, " expects an integer, got '", *s, "'");
  return v;
}

std::optional<double> Args::real(const std::string& name) const {
  auto s = str(name);
  if (!s) return std::nullopt;
  size_t used = 0;
  double v = 0;
  try {
    v = std::stod(*s, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != s->size())
    detail::fail(ErrorCode::kInvalidValue, "option --", name, " expects a number, got '", *s, "'");
  return v;
}

int64_t Args::required_integer(const std::string& name) const {
  auto v = integer(name);
  if (!v) detail::fail(ErrorCode::kInvalidValue, "missing required option --", name);
  return *v;
}

std::string Args::choice(const std::string& name, const std::vector<std::string>& values) const {
  const std::string v = str(name).value_or(values.front());
  for (const std::string& allowed : values)
    if (v == allowed) return v;
  std::string list;
  for (size_t i = 0; i < values.size(); ++i)
    list += (i == 0 ? "" : i + 1 == values.size() ? " or " : ", ") + values[i];
  detail::fail(ErrorCode::kInvalidValue, "--", name, " must be ", list, ", got '", v, "'");
}

}  // namespace dist_moe::cli
