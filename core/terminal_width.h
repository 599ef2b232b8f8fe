#ifndef NEREID_CORE_TERMINAL_WIDTH_H_
#define NEREID_CORE_TERMINAL_WIDTH_H_

// How wide the terminal behind a file descriptor is, so that a line redrawn
// in place ('\r') fits on one row: a line that wraps cannot be redrawn, and
// every draw would leave a row behind.

#include <string>

namespace nereid {

// The terminal's columns (TIOCGWINSZ), else $COLUMNS, else 0 (unknown).
int TerminalColumns(int fd);

// `line` cut to at most `columns` - 1 characters (the last column left free:
// some terminals wrap when it is written); unchanged when `columns` is 0.
std::string FitToColumns(const std::string& line, int columns);

}  // namespace nereid

#endif  // NEREID_CORE_TERMINAL_WIDTH_H_
