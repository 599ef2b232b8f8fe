#include "data/datasets.h"

#include <sys/stat.h>

#include <cstdlib>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/status_macros.h"
#include "data/cifar_reader.h"
#include "data/csv_dataset.h"
#include "data/gz_file.h"
#include "data/idx_reader.h"
#include "data/npz_dataset.h"
#include "data/normalize.h"
#include "data/synthetic.h"
#include "data/text_dataset.h"

namespace nereid {
namespace data {
namespace {

constexpr char kFashionMnist[] = "fashion-mnist";
constexpr absl::string_view kNpyPrefix = "npy:";
constexpr absl::string_view kCsvPrefix = "csv:";
constexpr absl::string_view kTextPrefix = "text:";
constexpr absl::string_view kFortunes = "fortunes";
constexpr absl::string_view kFortunesDir = "/usr/share/games/fortunes";
constexpr char kCifar10[] = "cifar10";
constexpr char kSynthetic[] = "synthetic";

struct Source {
  const char* env_var;
  const char* default_dir;
  const char* how_to_get;  // appended to "file not found"
};

constexpr Source kFashionMnistSource = {
    "NEREID_FASHION_MNIST_DIR", "/usr/share/datasets/fashion-mnist",
    "install Debian's dataset-fashion-mnist (./setup.sh does), or point "
    "NEREID_FASHION_MNIST_DIR at a directory holding the four IDX .gz files"};
constexpr Source kCifar10Source = {
    "NEREID_CIFAR10_DIR", "/usr/share/datasets/cifar10",
    "unpack the CIFAR-10 binary version (cifar-10-binary.tar.gz from "
    "https://www.cs.toronto.edu/~kriz/cifar.html) there, or point NEREID_CIFAR10_DIR at the "
    "directory holding data_batch_1..5.bin and test_batch.bin"};

std::string ResolveDir(const DatasetOptions& opts, const Source& source) {
  if (!opts.dir.empty()) return opts.dir;
  const char* env = std::getenv(source.env_var);
  if (env != nullptr && env[0] != '\0') return env;
  return source.default_dir;
}

// NotFound naming the first missing file and how to obtain it.
absl::Status CheckFilesExist(absl::string_view dataset, const std::vector<std::string>& paths,
                             const Source& source) {
  for (const std::string& path : paths) {
    struct stat st;
    if (::stat(path.c_str(), &st) != 0) {
      return absl::NotFoundError(absl::StrCat(path, ": no such file (needed for dataset '", dataset,
                                              "'); ", source.how_to_get));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckLimit(const DatasetOptions& opts) {
  if (opts.limit < 0) {
    return absl::InvalidArgumentError(absl::StrCat("dataset limit must be >= 0, got ", opts.limit));
  }
  return absl::OkStatus();
}

absl::StatusOr<Dataset> LoadFashionMnist(Split split, const DatasetOptions& opts) {
  const std::string dir = ResolveDir(opts, kFashionMnistSource);
  const char* prefix = split == Split::kTrain ? "train" : "t10k";
  const std::string images = absl::StrCat(dir, "/", prefix, "-images-idx3-ubyte.gz");
  const std::string labels = absl::StrCat(dir, "/", prefix, "-labels-idx1-ubyte.gz");
  RETURN_IF_ERROR(CheckFilesExist(kFashionMnist, {images, labels}, kFashionMnistSource));
  ASSIGN_OR_RETURN(Dataset ds, LoadIdx(images, labels, /*num_classes=*/10, IdxLimits{opts.limit}));
  ds.Truncate(opts.limit);
  ds.name = absl::StrCat(kFashionMnist, "/", SplitName(split));
  RETURN_IF_ERROR(ApplyNormalization(&ds, opts.normalize, {0.2860f}, {0.3530f}));
  return ds;
}

absl::StatusOr<Dataset> LoadCifar10Split(Split split, const DatasetOptions& opts) {
  const std::string dir = ResolveDir(opts, kCifar10Source);
  std::vector<std::string> paths;
  if (split == Split::kTrain) {
    for (int i = 1; i <= 5; ++i) paths.push_back(absl::StrCat(dir, "/data_batch_", i, ".bin"));
  } else {
    paths.push_back(absl::StrCat(dir, "/test_batch.bin"));
  }
  RETURN_IF_ERROR(CheckFilesExist(kCifar10, paths, kCifar10Source));
  ASSIGN_OR_RETURN(Dataset ds, LoadCifar10(paths));
  ds.Truncate(opts.limit);
  ds.name = absl::StrCat(kCifar10, "/", SplitName(split));
  RETURN_IF_ERROR(
      ApplyNormalization(&ds, opts.normalize, {0.4914f, 0.4822f, 0.4465f}, {0.2470f, 0.2435f, 0.2616f}));
  return ds;
}

absl::StatusOr<Dataset> LoadSynthetic(Split split, const DatasetOptions& opts) {
  constexpr int64_t kMaxSide = 65536;
  constexpr int64_t kMaxFloats = kMaxDataFileBytes / static_cast<int64_t>(sizeof(float));
  if (opts.num_examples <= 0 || opts.channels <= 0 || opts.height <= 0 || opts.width <= 0 ||
      opts.num_classes <= 0 || opts.channels > kMaxSide || opts.height > kMaxSide ||
      opts.width > kMaxSide || opts.num_classes > kMaxSide) {
    return absl::InvalidArgumentError(absl::StrCat(
        "synthetic dataset: need positive sizes (channels, height, width, num_classes at most ",
        kMaxSide, "), got num_examples=", opts.num_examples, " channels=", opts.channels,
        " height=", opts.height, " width=", opts.width, " num_classes=", opts.num_classes));
  }
  const int64_t num =
      opts.limit > 0 && opts.limit < opts.num_examples ? opts.limit : opts.num_examples;
  const int64_t plane = opts.height * opts.width;  // <= 2^32
  if (opts.channels > kMaxFloats / plane || num > kMaxFloats / (opts.channels * plane) ||
      opts.num_classes > kMaxFloats / (opts.channels * plane)) {
    return absl::ResourceExhaustedError(
        absl::StrCat("synthetic dataset: ", num, " examples (and ", opts.num_classes,
                     " prototypes) of ", opts.channels, "x", opts.height, "x", opts.width,
                     " exceed the ", kMaxFloats, "-float limit"));
  }
  Dataset ds = MakeSynthetic(num, opts.channels, opts.height, opts.width, opts.num_classes,
                             opts.seed, /*draw=*/split == Split::kTrain ? 0 : 1);
  ds.name = absl::StrCat(kSynthetic, "/", SplitName(split));
  RETURN_IF_ERROR(ApplyNormalization(&ds, opts.normalize, {}, {}));
  return ds;
}

}  // namespace

absl::string_view SplitName(Split split) { return split == Split::kTrain ? "train" : "test"; }

std::vector<std::string> KnownDatasetNames() {
  return {kCifar10, "csv:DIR", kFashionMnist, std::string(kFortunes), "npy:DIR", kSynthetic, "text:PATH"};
}

bool IsTextDataset(absl::string_view name) { return name == kFortunes || absl::StartsWith(name, kTextPrefix); }

absl::StatusOr<Dataset> LoadNamedDataset(absl::string_view name, Split split,
                                         const DatasetOptions& opts) {
  RETURN_IF_ERROR(CheckLimit(opts));
  if (name == kFashionMnist) return LoadFashionMnist(split, opts);
  if (name == kCifar10) return LoadCifar10Split(split, opts);
  if (name == kSynthetic) return LoadSynthetic(split, opts);
  if (absl::StartsWith(name, kCsvPrefix)) {
    ASSIGN_OR_RETURN(Dataset ds, LoadCsvDataset(std::string(name.substr(kCsvPrefix.size())), std::string(SplitName(split))));
    ds.Truncate(opts.limit);
    RETURN_IF_ERROR(ApplyNormalization(&ds, opts.normalize, {}, {}));
    return ds;
  }
  if (IsTextDataset(name)) {
    const std::string path = name == kFortunes ? std::string(kFortunesDir) : std::string(name.substr(kTextPrefix.size()));
    ASSIGN_OR_RETURN(Dataset ds, LoadTextDataset(path, std::string(SplitName(split)), opts.sequence_length));
    ds.Truncate(opts.limit);
    return ds;
  }
  if (absl::StartsWith(name, kNpyPrefix)) {
    ASSIGN_OR_RETURN(Dataset ds, LoadNpzDataset(std::string(name.substr(kNpyPrefix.size())), std::string(SplitName(split))));
    ds.Truncate(opts.limit);
    RETURN_IF_ERROR(ApplyNormalization(&ds, opts.normalize, {}, {}));
    return ds;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown dataset '", name, "'; known: ", absl::StrJoin(KnownDatasetNames(), ", ")));
}

}  // namespace data
}  // namespace nereid
