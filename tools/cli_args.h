// A small "--name value" / "--flag" parser for the dist-moe command line. Unknown options,
// missing values and malformed numbers are errors that name the option.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace dist_moe::cli {

class Args {
 public:
  // `valued` names options that take a value; `flags` names boolean switches.
  Args(const std::vector<std::string>& argv, const std::set<std::string>& valued, const std::set<std::string>& flags);

  bool flag(const std::string& name) const { return flags_.count(name) != 0; }
  bool has(const std::string& name) const { return values_.count(name) != 0; }
  std::optional<std::string> str(const std::string& name) const;
  std::optional<int64_t> integer(const std::string& name) const;
  std::optional<double> real(const std::string& name) const;
  // The value of a required integer option, or an error naming it.
  int64_t required_integer(const std::string& name) const;
  // The value of an option that takes one of `values` (the first when absent), or an error naming
  // them: "--mode must be train or infer, got 'fast'".
  std::string choice(const std::string& name, const std::vector<std::string>& values) const;

 private:
  std::map<std::string, std::string> values_;
  std::set<std::string> flags_;
};

}  // namespace dist_moe::cli
