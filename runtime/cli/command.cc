#include "runtime/cli/command.h"

#include "absl/strings/str_cat.h"

namespace nereid {

CommandRegistry& CommandRegistry::Global() {
  static CommandRegistry* registry = new CommandRegistry();
  return *registry;
}

absl::Status CommandRegistry::Register(Command command) {
  if (command.name == nullptr || *command.name == '\0' || command.run == nullptr || !command.help) {
    return absl::InvalidArgumentError("a command needs a name, a help text and an entry point");
  }
  std::string name = command.name;
  if (!commands_.emplace(name, std::move(command)).second) {
    return absl::AlreadyExistsError(absl::StrCat("command '", name, "' is registered twice"));
  }
  return absl::OkStatus();
}

const Command* CommandRegistry::Find(absl::string_view name) const {
  auto it = commands_.find(name);
  return it == commands_.end() ? nullptr : &it->second;
}

std::vector<const Command*> CommandRegistry::All() const {
  std::vector<const Command*> all;
  for (const auto& [name, command] : commands_) all.push_back(&command);
  return all;
}

}  // namespace nereid
