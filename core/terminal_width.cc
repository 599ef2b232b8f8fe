#include "core/terminal_width.h"

#include <sys/ioctl.h>

#include <cstdlib>

namespace nereid {

int TerminalColumns(int fd) {
  winsize size{};
  if (::ioctl(fd, TIOCGWINSZ, &size) == 0 && size.ws_col > 0) return size.ws_col;
  if (const char* columns = std::getenv("COLUMNS"); columns != nullptr) {
    const int n = std::atoi(columns);
    if (n > 0 && n < 100000) return n;
  }
  return 0;
}

std::string FitToColumns(const std::string& line, int columns) {
  if (columns <= 1 || static_cast<int>(line.size()) < columns) return line;
  return line.substr(0, static_cast<size_t>(columns - 1));
}

}  // namespace nereid
