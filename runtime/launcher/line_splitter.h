#ifndef NEREID_RUNTIME_LAUNCHER_LINE_SPLITTER_H_
#define NEREID_RUNTIME_LAUNCHER_LINE_SPLITTER_H_

// LineSplitter cuts a byte stream that arrives in arbitrary chunks into lines.
// '\n', '\r' and "\r\n" each end a line, so a carriage-return progress bar
// ("step 1\rstep 2\rstep 3\n") becomes one line per update, which reads well
// in a log file or behind a prefix. An empty line ended by '\r' is dropped;
// an empty line ended by '\n' is kept. A line longer than `max_line` bytes is
// emitted in pieces of `max_line` so a worker that never ends a line cannot
// grow the buffer without bound. Flush() hands back an unterminated rest
// (the partial last line of a worker that exited).

#include <cstddef>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace nereid {
namespace launcher {

class LineSplitter {
 public:
  explicit LineSplitter(size_t max_line = 64 * 1024) : max_line_(max_line < 1 ? 1 : max_line) {}

  // Appends to *lines every line that `bytes` completes, without terminators;
  // with `returns`, whether each was ended by '\r' (a redrawn progress bar).
  void Append(absl::string_view bytes, std::vector<std::string>* lines, std::vector<bool>* returns = nullptr);

  // Appends the unterminated rest, if any, to *lines and clears it.
  void Flush(std::vector<std::string>* lines);

 private:
  size_t max_line_;
  std::string partial_;
  // The last byte was '\r' or filled a max_line piece: a '\n' right after it
  // ends nothing (so "\r\n" is one line end and a cut line adds no empty line).
  bool line_just_ended_ = false;
};

}  // namespace launcher
}  // namespace nereid

#endif  // NEREID_RUNTIME_LAUNCHER_LINE_SPLITTER_H_
