#ifndef NEREID_DATA_DATASETS_H_
#define NEREID_DATA_DATASETS_H_

// The datasets Nereid knows by name, loaded and normalised ready for training.
//
//   "fashion-mnist"  IDX files from Debian's dataset-fashion-mnist package:
//                    {train,t10k}-{images-idx3,labels-idx1}-ubyte.gz, 1x28x28,
//                    10 classes; x/255 then (x - 0.2860) / 0.3530.
//                    Directory: opts.dir, else $NEREID_FASHION_MNIST_DIR, else
//                    /usr/share/datasets/fashion-mnist.
//   "cifar10"        CIFAR-10 binary version: data_batch_1..5.bin (train) or
//                    test_batch.bin (test), 3x32x32, 10 classes; x/255 then
//                    per-channel mean (0.4914, 0.4822, 0.4465), stddev
//                    (0.2470, 0.2435, 0.2616). Directory: opts.dir, else
//                    $NEREID_CIFAR10_DIR, else /usr/share/datasets/cifar10.
//   "synthetic"      MakeSynthetic (synthetic.h) with the shape, size and seed
//                    in `opts`; the test split uses draw 1 (same prototypes,
//                    fresh noise). Not normalised further.
//   "npy:DIR"        the user's arrays: DIR/train.npz and DIR/test.npz
//                    (data/npz_dataset.h), fed as they are.
//   "csv:DIR"        tabular data: DIR/train.csv and DIR/test.csv
//                    (data/csv_dataset.h), fed as they are.
//   "text:PATH"      a text file or directory of them as windows of
//                    `sequence_length` byte ids with next-byte labels, the
//                    first 90% train and the last 10% test
//                    (data/text_dataset.h).
//   "fortunes"       text:/usr/share/games/fortunes (Debian's fortunes:
//                    2.6 million characters, 114 distinct).
// DatasetOptions::normalize (`--normalize`) replaces the standardisation
// above with none or the user's own, for every dataset alike.
//
// A missing file is NotFound naming its path and how to obtain it; an unknown
// name is InvalidArgument listing the known names.

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "data/dataset.h"
#include "data/normalize.h"

namespace nereid {
namespace data {

enum class Split { kTrain, kTest };

absl::string_view SplitName(Split split);  // "train" / "test"

struct DatasetOptions {
  // Directory holding the files; empty = the environment variable or default.
  std::string dir;
  // Keep only the first `limit` examples (0 = all); handy for fast tests.
  int64_t limit = 0;
  // The standardisation (`--normalize`); default: each dataset's own, below.
  NormalizationSpec normalize;

  // Text datasets: the window length T (the model's images Input [-1, T]).
  int64_t sequence_length = 0;

  // "synthetic" only.
  int64_t channels = 1;
  int64_t height = 28;
  int64_t width = 28;
  int num_classes = 10;
  int64_t num_examples = 1024;
  uint64_t seed = 0;
};

// The names LoadNamedDataset accepts, sorted.
std::vector<std::string> KnownDatasetNames();

// Whether `name` is a text dataset ("fortunes", "text:PATH"), whose windows
// are as long as DatasetOptions::sequence_length.
bool IsTextDataset(absl::string_view name);

absl::StatusOr<Dataset> LoadNamedDataset(absl::string_view name, Split split,
                                         const DatasetOptions& opts);

}  // namespace data
}  // namespace nereid

#endif  // NEREID_DATA_DATASETS_H_
