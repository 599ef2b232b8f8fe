#include "data/csv_dataset.h"

#include <sys/stat.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "data/gz_file.h"

namespace nereid {
namespace data {
namespace {

// Views into the line: no copy per cell.
std::vector<absl::string_view> Cells(absl::string_view line) {
  std::vector<absl::string_view> cells;
  for (absl::string_view cell : absl::StrSplit(line, ',')) cells.push_back(absl::StripAsciiWhitespace(cell));
  return cells;
}

enum class LineRead { kLine, kEnd, kTooLong };

// The next line (without its newline) into `line`, which grows with the line
// only up to kMaxCsvLineBytes: a longer one is refused before it is held
// whole.
LineRead NextLine(std::istream& in, std::string* line) {
  line->clear();
  bool any = false;
  char chunk[4096];
  for (;;) {
    const int next = in.peek();
    if (next == std::char_traits<char>::eof()) return any ? LineRead::kLine : LineRead::kEnd;
    if (next == '\n') {
      in.get();
      return LineRead::kLine;
    }
    in.get(chunk, sizeof(chunk), '\n');  // at least one character: the next is neither '\n' nor the end
    line->append(chunk, static_cast<size_t>(in.gcount()));
    any = true;
    if (line->size() > kMaxCsvLineBytes) return LineRead::kTooLong;
  }
}

}  // namespace

absl::StatusOr<Dataset> LoadCsvDataset(const std::string& dir, const std::string& split_name) {
  const std::string path = absl::StrCat(dir, "/", split_name, ".csv");
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open ", path, " (a csv dataset needs ", split_name, ".csv)"));
  struct stat st;
  if (stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode) || st.st_size > kMaxDataFileBytes) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": not a regular file of at most ", kMaxDataFileBytes, " bytes"));
  }
  Dataset ds;
  ds.name = absl::StrCat("csv/", split_name);
  int64_t columns = -1, label_column = -1;
  std::string text;
  for (int64_t row = 1;; ++row) {
    const LineRead read = NextLine(in, &text);
    if (read == LineRead::kEnd) break;
    if (read == LineRead::kTooLong) {
      return absl::InvalidArgumentError(absl::StrCat(path, ":", row, ": a line longer than ", kMaxCsvLineBytes,
                                                     " bytes (at most ", kMaxCsvLineBytes / 2,
                                                     " columns; is this a CSV file?)"));
    }
    absl::string_view line = text;
    absl::ConsumeSuffix(&line, "\r");
    if (absl::StripAsciiWhitespace(line).empty()) continue;
    std::vector<absl::string_view> cells = Cells(line);
    if (columns < 0) {
      columns = static_cast<int64_t>(cells.size());
      if (columns < 2) return absl::InvalidArgumentError(absl::StrCat(path, ": needs a label and at least one feature column"));
      double ignored;
      if (!absl::SimpleAtod(cells[0], &ignored)) {  // a header row
        for (int64_t c = 0; c < columns; ++c) {
          if (cells[c] == "label") label_column = c;
        }
        if (label_column < 0) return absl::InvalidArgumentError(absl::StrCat(path, ": the header has no column named 'label'"));
        continue;
      }
      label_column = columns - 1;
    }
    if (static_cast<int64_t>(cells.size()) != columns) {
      return absl::InvalidArgumentError(absl::StrCat(path, ":", row, ": ", cells.size(), " columns, expected ", columns));
    }
    for (int64_t c = 0; c < columns; ++c) {
      double v;
      if (!absl::SimpleAtod(cells[c], &v) || !std::isfinite(v)) {
        return absl::InvalidArgumentError(absl::StrCat(path, ":", row, ": column ", c + 1, " is '",
                                                       cells[c].substr(0, 40), "', not a finite number"));
      }
      if (c == label_column) {
        if (v != std::floor(v) || v < 0 || v > 65535) {
          return absl::InvalidArgumentError(absl::StrCat(path, ":", row, ": label '", cells[c],
                                                         "' is not a class number from 0"));
        }
        ds.labels.push_back(static_cast<int32_t>(v));
      } else {
        ds.images.push_back(static_cast<float>(v));
      }
    }
  }
  if (ds.labels.empty()) return absl::InvalidArgumentError(absl::StrCat(path, ": no examples"));
  ds.num_examples = static_cast<int64_t>(ds.labels.size());
  ds.channels = 1;
  ds.height = 1;
  ds.width = columns - 1;
  int32_t max_label = 0;
  for (int32_t l : ds.labels) max_label = std::max(max_label, l);
  ds.num_classes = max_label + 1;
  if (absl::Status valid = ds.Validate(); !valid.ok()) return valid;
  return ds;
}

}  // namespace data
}  // namespace nereid
