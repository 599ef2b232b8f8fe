#include "data/text_dataset.h"

#include <dirent.h>
#include <sys/stat.h>

#include <algorithm>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "core/file_io.h"
#include "core/status_macros.h"

namespace nereid {
namespace data {
namespace {

// The files a path names: itself, or a directory's regular files by name.
absl::StatusOr<std::vector<std::string>> TextFiles(const std::string& path) {
  struct stat st;
  if (stat(path.c_str(), &st) != 0) {
    return absl::NotFoundError(absl::StrCat("text dataset: cannot open ", path,
                                            path == "/usr/share/games/fortunes" ? " (./setup.sh installs Debian's fortunes)" : ""));
  }
  if (!S_ISDIR(st.st_mode)) return std::vector<std::string>{path};
  DIR* dir = opendir(path.c_str());
  if (dir == nullptr) return absl::NotFoundError(absl::StrCat("text dataset: cannot read the directory ", path));
  std::vector<std::string> files;
  while (dirent* e = readdir(dir)) {
    const std::string name = e->d_name;
    if (name.empty() || name[0] == '.' || absl::EndsWith(name, ".dat")) continue;
    const std::string full = absl::StrCat(path, "/", name);
    struct stat entry;
    if (lstat(full.c_str(), &entry) == 0 && S_ISREG(entry.st_mode)) files.push_back(full);
  }
  closedir(dir);
  std::sort(files.begin(), files.end());
  if (files.empty()) return absl::NotFoundError(absl::StrCat("text dataset: no text files in ", path));
  return files;
}

}  // namespace

absl::StatusOr<Dataset> LoadTextDataset(const std::string& path, const std::string& split_name,
                                        int64_t sequence_length) {
  if (sequence_length < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("text dataset ", path, ": the model's images Input must be [-1, T] (token ids of T positions): "
                     "the text is cut into windows of T characters"));
  }
  ASSIGN_OR_RETURN(std::vector<std::string> files, TextFiles(path));
  std::string text;
  for (const std::string& file : files) {
    ASSIGN_OR_RETURN(std::string contents, ReadFileToString(file));
    if (static_cast<int64_t>(text.size() + contents.size()) > kMaxTextBytes) {
      return absl::ResourceExhaustedError(absl::StrCat("text dataset ", path, ": more than ", kMaxTextBytes,
                                                       " bytes of text (the limit)"));
    }
    text += contents;
  }
  const int64_t cut = static_cast<int64_t>(static_cast<double>(text.size()) * kTextTrainShare);
  const bool train = split_name == "train";
  const std::string_view part = train ? std::string_view(text).substr(0, cut) : std::string_view(text).substr(cut);
  const int64_t windows = part.size() > 0 ? (static_cast<int64_t>(part.size()) - 1) / sequence_length : 0;
  if (windows < 1) {
    return absl::InvalidArgumentError(absl::StrCat("text dataset ", path, ": the ", split_name, " split holds ",
                                                   part.size(), " bytes, less than one window of ", sequence_length,
                                                   " and its next character"));
  }
  Dataset ds;
  ds.name = absl::StrCat("text/", split_name);
  ds.num_examples = windows;
  ds.channels = 1;
  ds.height = 1;
  ds.width = sequence_length;
  ds.num_classes = 256;
  ds.labels_per_example = sequence_length;
  const int64_t n = windows * sequence_length;
  ds.images.resize(n);
  ds.labels.resize(n);
  for (int64_t i = 0; i < n; ++i) {
    ds.images[i] = static_cast<float>(static_cast<unsigned char>(part[i]));
    ds.labels[i] = static_cast<unsigned char>(part[i + 1]);
  }
  RETURN_IF_ERROR(ds.Validate());
  return ds;
}

}  // namespace data
}  // namespace nereid
