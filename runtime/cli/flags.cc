#include "runtime/cli/flags.h"

#include <CLI/CLI.hpp>

#include <algorithm>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace nereid {

namespace {

// Where the help's descriptions start.
constexpr int kHelpColumn = 24;

// Levenshtein distance, for "did you mean" (CLI11 2.1 has no suggestions).
size_t EditDistance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = up;
    }
  }
  return row[b.size()];
}

std::string OptionNames(const std::string& short_name, const std::string& name) {
  return short_name.empty() ? "--" + name : absl::StrCat("-", short_name, ",--", name);
}

}  // namespace

Flags& Flags::Value(const std::string& names, const std::string& value_name, const std::string& help) {
  std::vector<std::string> parts = absl::StrSplit(names, ',');
  Declared d;
  d.short_name = parts.size() == 2 ? parts[0] : "";
  d.name = parts.back();
  d.value_name = value_name.empty() ? "VALUE" : value_name;
  d.help = help;
  d.section = section_;
  declared_.push_back(std::move(d));
  return *this;
}

Flags& Flags::Switch(const std::string& name, const std::string& help) {
  declared_.push_back(Declared{"", name, "", help, section_});
  return *this;
}

Flags& Flags::Section(const std::string& title) {
  section_ = title;
  return *this;
}

Flags& Flags::Epilogue(const std::string& text) {
  epilogue_ = text;
  return *this;
}

const Flags::Declared* Flags::Find(const std::string& name) const {
  for (const Declared& d : declared_) {
    if (d.name == name) return &d;
  }
  return nullptr;
}

absl::Status Flags::UnknownFlag(const std::string& arg) const {
  if (!absl::StartsWith(arg, "--")) {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown flag ", arg, ": flags start with -- (-", arg, "?)"));
  }
  const std::string name = std::string(absl::StripPrefix(arg.substr(0, arg.find('=')), "--"));
  std::string nearest;
  size_t best = 3;  // suggest only close names
  std::vector<std::string> all;
  for (const Declared& d : declared_) {
    all.push_back(d.name);
    const size_t distance = EditDistance(name, d.name);
    if (distance < best) {
      best = distance;
      nearest = d.name;
    }
  }
  return absl::InvalidArgumentError(absl::StrCat("unknown flag --", name,
                                                 nearest.empty() ? "" : absl::StrCat(" (did you mean --", nearest, "?)"),
                                                 "; flags are --", absl::StrJoin(all, ", --")));
}

absl::Status Flags::Parse(const std::vector<std::string>& args) {
  for (const std::string& arg : args) {
    // CLI11 would read -output as -o with the value "utput": a single dash
    // starts a one-letter flag or a number only.
    double number;
    if (arg.size() > 2 && arg[0] == '-' && arg[1] != '-' && !absl::SimpleAtod(arg, &number)) return UnknownFlag(arg);
    const size_t eq = arg.find('=');
    if (!absl::StartsWith(arg, "--") || eq == std::string::npos) continue;
    const Declared* d = Find(arg.substr(2, eq - 2));
    const std::string value = arg.substr(eq + 1);
    // Our rule for switches, stricter than CLI11's (which also takes yes/no/on/off).
    if (d != nullptr && d->value_name.empty() && value != "true" && value != "false") {
      return absl::InvalidArgumentError(absl::StrCat(arg, ": a switch is true or false"));
    }
    // CLI11 would take the next argument for an empty `--name=`.
    if (d != nullptr && !d->value_name.empty() && value.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(arg, " needs a value after ="));
    }
  }

  CLI::App app;
  app.set_help_flag();  // `nereid COMMAND --help` is answered before parsing
  std::vector<std::string> positional;
  app.add_option("positional", positional);
  std::vector<CLI::Option*> options;
  for (const Declared& d : declared_) {
    const std::string names = OptionNames(d.short_name, d.name);
    CLI::Option* option = d.value_name.empty() ? app.add_flag(names) : app.add_option(names);
    option->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);  // a repeated flag: the last wins
    options.push_back(option);
  }
  // CLI11 takes the arguments in reverse order.
  std::vector<std::string> reversed(args.rbegin(), args.rend());
  try {
    app.parse(std::move(reversed));
  } catch (const CLI::ExtrasError&) {
    for (const std::string& arg : app.remaining()) {
      if (absl::StartsWith(arg, "-")) return UnknownFlag(arg);
    }
    return absl::InvalidArgumentError(absl::StrCat("unexpected arguments: ", absl::StrJoin(app.remaining(), " ")));
  } catch (const CLI::ArgumentMismatch& e) {
    // "--epochs: 1 required N missing": the value is missing at the end.
    const std::string what = e.what();
    return absl::InvalidArgumentError(absl::StrCat(what.substr(0, what.find(':')), " needs a value"));
  } catch (const CLI::ParseError& e) {
    return absl::InvalidArgumentError(e.what());
  }

  for (size_t i = 0; i < declared_.size(); ++i) {
    const Declared& d = declared_[i];
    CLI::Option* option = options[i];
    if (option->count() == 0) continue;
    if (d.value_name.empty()) {
      if (option->as<bool>()) values_[d.name] = "true";
      continue;
    }
    const std::string value = option->results().back();
    // CLI11 takes the next argument whatever it is: a flag there means the
    // value was forgotten.
    if (absl::StartsWith(value, "--")) {
      return absl::InvalidArgumentError(absl::StrCat("--", d.name, " needs a value (got the flag ", value, ")"));
    }
    values_[d.name] = value;
  }
  positional_ = std::move(positional);
  return absl::OkStatus();
}

std::string Flags::Help() const {
  std::ostringstream out;
  out << "Usage: " << usage_ << "\n\n" << about_ << "\n";
  std::string section = "\x01";  // none yet
  for (const Declared& d : declared_) {
    if (d.section != section) {
      section = d.section;
      out << "\n";
      if (!section.empty()) out << section << ":\n";
    }
    std::string name = OptionNames(d.short_name, d.name);
    if (!d.value_name.empty()) name += " " + d.value_name;
    CLI::detail::format_help(out, name, d.help, kHelpColumn);
  }
  if (!epilogue_.empty()) out << "\n" << epilogue_;
  return out.str();
}

std::string Flags::String(const std::string& name, const std::string& fallback) const {
  auto it = values_.find(name);
  return it == values_.end() ? fallback : it->second;
}

absl::StatusOr<int64_t> Flags::Int(const std::string& name, int64_t fallback) const {
  auto it = values_.find(name);
  if (it == values_.end()) return fallback;
  int64_t v;
  if (!absl::SimpleAtoi(it->second, &v)) {
    return absl::InvalidArgumentError(absl::StrCat("--", name, "=", it->second, " is not an integer"));
  }
  return v;
}

}  // namespace nereid
