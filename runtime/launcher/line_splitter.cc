#include "runtime/launcher/line_splitter.h"

#include <utility>

namespace nereid {
namespace launcher {

void LineSplitter::Append(absl::string_view bytes, std::vector<std::string>* lines, std::vector<bool>* returns) {
  auto end_line = [&](bool by_return) {
    lines->push_back(std::exchange(partial_, std::string()));
    if (returns != nullptr) returns->push_back(by_return);
  };
  for (char c : bytes) {
    const bool newline_ends_nothing = line_just_ended_;
    line_just_ended_ = false;
    if (c == '\n') {
      if (!newline_ends_nothing) end_line(false);
    } else if (c == '\r') {
      if (!partial_.empty()) end_line(true);
      line_just_ended_ = true;
    } else {
      partial_.push_back(c);
      if (partial_.size() >= max_line_) {
        end_line(false);
        line_just_ended_ = true;
      }
    }
  }
}

void LineSplitter::Flush(std::vector<std::string>* lines) {
  if (!partial_.empty()) lines->push_back(std::exchange(partial_, std::string()));
  line_just_ended_ = false;
}

}  // namespace launcher
}  // namespace nereid
