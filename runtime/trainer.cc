#include "runtime/trainer.h"

#include <sys/resource.h>
#include <unistd.h>

#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "graph/graph_io.h"
#include "graph/model_loader.h"
#include "graph/status_macros.h"
#include "passes/pass_manager.h"
#include "runtime/buffer_pool.h"
#include "runtime/checkpoint.h"
#include "runtime/data/batch_loader.h"
#include "runtime/data/datasets.h"
#include "runtime/json_writer.h"
#include "schedulers/executor.h"

namespace nereid {
namespace {

bool IsPlanned(const Graph& graph) {
  for (Node* n : graph.nodes()) {
    if (n->op() == "Feedback") return true;
  }
  return false;
}

std::string GraphAttr(const Graph& graph, const char* key) {
  auto it = graph.header().attr().find(key);
  return it == graph.header().attr().end() ? "" : it->second.s();
}

int64_t PeakRssBytes() {
  rusage usage;
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<int64_t>(usage.ru_maxrss) * 1024;
}

absl::StatusOr<FeedMap> FeedsOf(const data::Batch& batch) {
  FeedMap feeds;
  ASSIGN_OR_RETURN(Tensor images, Tensor::Allocate(DT_FLOAT, batch.image_dims));
  std::memcpy(images.raw(), batch.images.data(), images.num_bytes());
  ASSIGN_OR_RETURN(Tensor labels, Tensor::Allocate(DT_INT32, {batch.size}));
  std::memcpy(labels.raw(), batch.labels.data(), labels.num_bytes());
  feeds["images"] = std::move(images);
  feeds["labels"] = std::move(labels);
  return feeds;
}

// A progress bar redrawn in place on a terminal; a plain line every tenth of
// an epoch otherwise (logs, CI).
class Progress {
 public:
  Progress(std::FILE* out, int64_t epochs, int64_t steps_per_epoch)
      : out_(out), tty_(out != nullptr && isatty(fileno(out))), epochs_(epochs), steps_(steps_per_epoch) {}

  void Step(int64_t epoch, int64_t step, double loss, double samples_per_second) {
    if (out_ == nullptr) return;
    absl::Time now = absl::Now();
    bool last = step + 1 == steps_;
    if (tty_) {
      if (!last && now - last_draw_ < absl::Milliseconds(100)) return;
      last_draw_ = now;
      int width = 30, filled = static_cast<int>(width * (step + 1) / std::max<int64_t>(1, steps_));
      std::fprintf(out_, "\repoch %lld/%lld [%s%s] %lld/%lld loss %.4f %.0f samples/s ",
                   static_cast<long long>(epoch + 1), static_cast<long long>(epochs_),
                   std::string(filled, '=').c_str(), std::string(width - filled, ' ').c_str(),
                   static_cast<long long>(step + 1), static_cast<long long>(steps_), loss, samples_per_second);
      std::fflush(out_);
      return;
    }
    int64_t every = std::max<int64_t>(1, steps_ / 10);
    if ((step + 1) % every == 0 || last) {
      std::fprintf(out_, "epoch %lld/%lld step %lld/%lld loss %.4f %.0f samples/s\n",
                   static_cast<long long>(epoch + 1), static_cast<long long>(epochs_),
                   static_cast<long long>(step + 1), static_cast<long long>(steps_), loss, samples_per_second);
      std::fflush(out_);
    }
  }

  void EpochDone(const EpochMetrics& m) {
    if (out_ == nullptr) return;
    std::fprintf(out_, "%sepoch %lld: train loss %.4f, test accuracy %.2f%%, test loss %.4f, %.0f samples/s, %.1f s\n",
                 tty_ ? "\n" : "", static_cast<long long>(m.epoch + 1), m.train_loss, 100 * m.test_accuracy,
                 m.test_loss, m.samples_per_second, m.seconds);
    std::fflush(out_);
  }

 private:
  std::FILE* out_;
  bool tty_;
  int64_t epochs_, steps_;
  absl::Time last_draw_ = absl::InfinitePast();
};

struct Evaluation {
  double accuracy = 0;
  double loss = 0;
};

absl::StatusOr<Evaluation> EvaluateTestSet(Executor& executor, std::shared_ptr<const data::Dataset> test,
                                           const TrainOptions& options, const std::string& logits,
                                           const std::string& loss, StepInfo info) {
  data::LoaderOptions lo;
  lo.batch_size = options.eval_batch;
  lo.shuffle = false;
  lo.prefetch = 1;
  ASSIGN_OR_RETURN(std::unique_ptr<data::BatchLoader> loader, data::BatchLoader::Create(test, lo));
  loader->StartEpoch(0);
  info.training = false;
  int64_t correct = 0, seen = 0;
  double loss_sum = 0;
  while (std::optional<data::Batch> batch = loader->Next()) {
    ASSIGN_OR_RETURN(FeedMap feeds, FeedsOf(*batch));
    ASSIGN_OR_RETURN(std::vector<Tensor> out, executor.Evaluate(info, feeds, {logits, loss}));
    const Tensor& scores = out[0];
    int64_t k = scores.dim(1);
    for (int64_t i = 0; i < batch->size; ++i) {
      const float* row = scores.data<float>() + i * k;
      int64_t best = std::max_element(row, row + k) - row;
      correct += best == batch->labels[i];
    }
    loss_sum += out[1].data<float>()[0] * batch->size;
    seen += batch->size;
  }
  Evaluation e;
  if (seen > 0) {
    e.accuracy = static_cast<double>(correct) / seen;
    e.loss = loss_sum / seen;
  }
  return e;
}

}  // namespace

absl::StatusOr<TrainResult> Train(const TrainOptions& options) {
  if (options.workers != 1) {
    return absl::UnimplementedError(
        "--workers above 1 (data-parallel training over Gloo) is not built yet; run with --workers 1");
  }
  if (options.threads < 1 || options.batch < 1 || options.epochs < 1) {
    return absl::InvalidArgumentError("--threads, --batch and --epochs must be >= 1");
  }
  absl::Time start = absl::Now();
  TrainResult result;
  ASSIGN_OR_RETURN(std::unique_ptr<Graph> graph, LoadModel(options.model_path));
  if (!IsPlanned(*graph)) {
    ASSIGN_OR_RETURN(std::vector<PipelineStage> pipeline, ParsePipeline(options.passes));
    ASSIGN_OR_RETURN(std::vector<PassReport> reports, RunPipeline(*graph, pipeline));
    for (const PassReport& r : reports) result.plan_summary.emplace_back(r.pass, FormatReport(r));
  }
  result.model = GraphAttr(*graph, "name").empty() ? options.model_path : GraphAttr(*graph, "name");
  std::string logits = GraphAttr(*graph, "logits"), loss = GraphAttr(*graph, "loss");
  if (logits.empty() || loss.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(options.model_path, ": the graph attributes 'logits' and 'loss' must name the nodes to evaluate"));
  }

  std::string dataset_name = options.dataset.empty() ? GraphAttr(*graph, "dataset") : options.dataset;
  data::DatasetOptions dopts;
  dopts.dir = options.data_dir;
  if (dataset_name == "synthetic") {
    // Synthetic data takes the shape the model's images input declares.
    for (Node* n : graph->nodes()) {
      const auto& attr = n->def().attr();
      if (n->op() != "Input" || !attr.count("feed") || attr.at("feed").s() != "images") continue;
      const TensorShape& s = n->outputs()[0].shape;
      if (s.rank() == 4) {
        dopts.channels = s.dim(1);
        dopts.height = s.dim(2);
        dopts.width = s.dim(3);
      }
    }
    auto classes = graph->header().attr().find("num_classes");
    if (classes != graph->header().attr().end()) dopts.num_classes = static_cast<int>(classes->second.i());
  }
  dopts.seed = options.seed;
  dopts.limit = options.train_limit;
  ASSIGN_OR_RETURN(data::Dataset train_set, data::LoadNamedDataset(dataset_name, data::Split::kTrain, dopts));
  dopts.limit = options.test_limit;
  ASSIGN_OR_RETURN(data::Dataset test_set, data::LoadNamedDataset(dataset_name, data::Split::kTest, dopts));
  auto train = std::make_shared<const data::Dataset>(std::move(train_set));
  auto test = std::make_shared<const data::Dataset>(std::move(test_set));

  ExecutorOptions eopts;
  eopts.threads = options.threads;
  ASSIGN_OR_RETURN(std::unique_ptr<Executor> executor, Executor::Create(graph.get(), eopts));

  data::LoaderOptions lo;
  lo.batch_size = options.batch;
  lo.seed = options.seed;
  ASSIGN_OR_RETURN(std::unique_ptr<data::BatchLoader> loader, data::BatchLoader::Create(train, lo));
  int64_t steps_per_epoch = loader->batches_per_epoch();

  int64_t first_epoch = 0, step = 0;
  if (options.resume) {
    if (options.checkpoint_dir.empty()) return absl::InvalidArgumentError("--resume needs --checkpoint DIR");
    absl::StatusOr<Checkpoint> ckpt = LoadLatestCheckpoint(options.checkpoint_dir);
    if (ckpt.ok()) {
      for (const auto& [name, value] : ckpt->tensors) RETURN_IF_ERROR(executor->SetState(name, value));
      first_epoch = ckpt->epochs_completed;
      step = ckpt->step;
      if (options.progress != nullptr) {
        std::fprintf(options.progress, "resuming after epoch %lld (step %lld) from %s\n",
                     static_cast<long long>(first_epoch), static_cast<long long>(step),
                     options.checkpoint_dir.c_str());
      }
    } else if (!absl::IsNotFound(ckpt.status())) {
      return ckpt.status();
    }
  }

  BufferPool::Global().ResetPeak();
  Progress progress(options.progress, options.epochs, steps_per_epoch);
  double train_seconds = 0;
  int64_t train_samples = 0;
  for (int64_t epoch = first_epoch; epoch < options.epochs; ++epoch) {
    absl::Time epoch_start = absl::Now();
    loader->StartEpoch(epoch);
    double loss_sum = 0;
    int64_t epoch_samples = 0, index = 0;
    while (std::optional<data::Batch> batch = loader->Next()) {
      if (options.max_steps > 0 && result.steps >= options.max_steps) break;
      ASSIGN_OR_RETURN(FeedMap feeds, FeedsOf(*batch));
      StepInfo info{epoch, step, index, steps_per_epoch, options.epochs, true};
      ASSIGN_OR_RETURN(std::vector<Tensor> out, executor->RunStep(info, feeds, {loss}));
      float value = out[0].data<float>()[0];
      if (!std::isfinite(value)) {
        return absl::InvalidArgumentError(absl::StrCat("the loss became ", value, " at epoch ", epoch + 1, ", step ",
                                                       step, ": training diverged (try a smaller learning rate)"));
      }
      loss_sum += static_cast<double>(value) * batch->size;
      epoch_samples += batch->size;
      ++step;
      ++index;
      ++result.steps;
      double elapsed = absl::ToDoubleSeconds(absl::Now() - epoch_start);
      progress.Step(epoch, index - 1, loss_sum / epoch_samples, elapsed > 0 ? epoch_samples / elapsed : 0);
    }
    EpochMetrics m;
    m.epoch = epoch;
    m.seconds = absl::ToDoubleSeconds(absl::Now() - epoch_start);
    m.train_loss = epoch_samples > 0 ? loss_sum / epoch_samples : 0;
    m.samples_per_second = m.seconds > 0 ? epoch_samples / m.seconds : 0;
    train_seconds += m.seconds;
    train_samples += epoch_samples;
    StepInfo eval_info{epoch, step, 0, steps_per_epoch, options.epochs, false};
    ASSIGN_OR_RETURN(Evaluation eval, EvaluateTestSet(*executor, test, options, logits, loss, eval_info));
    m.test_accuracy = eval.accuracy;
    m.test_loss = eval.loss;
    progress.EpochDone(m);
    result.per_epoch.push_back(m);
    if (!options.checkpoint_dir.empty()) {
      Checkpoint c{epoch + 1, step, executor->State()};
      RETURN_IF_ERROR(SaveCheckpoint(options.checkpoint_dir, c));
    }
    if (options.max_steps > 0 && result.steps >= options.max_steps) break;
  }
  result.epochs = static_cast<int64_t>(result.per_epoch.size());
  if (!result.per_epoch.empty()) {
    result.final_train_loss = result.per_epoch.back().train_loss;
    result.final_test_accuracy = result.per_epoch.back().test_accuracy;
  }
  result.samples_per_second = train_seconds > 0 ? train_samples / train_seconds : 0;
  result.wall_seconds = absl::ToDoubleSeconds(absl::Now() - start);
  result.peak_rss_bytes = PeakRssBytes();
  result.peak_tensor_bytes = BufferPool::Global().stats().peak_bytes_in_use;
  if (!options.metrics_json.empty()) {
    RETURN_IF_ERROR(WriteFileAtomically(options.metrics_json, MetricsJson(options, result)));
  }
  return result;
}

std::string MetricsJson(const TrainOptions& options, const TrainResult& r) {
  JsonWriter w;
  w.BeginObject();
  w.Member("model", r.model);
  w.Member("workers", int64_t{options.workers});
  w.Member("threads", int64_t{options.threads});
  w.Member("strategy", "single");
  w.Member("passes", options.passes);
  w.Member("epochs", r.epochs);
  w.Member("steps", r.steps);
  w.Member("batch_per_worker", options.batch);
  w.Member("seed", static_cast<int64_t>(options.seed));
  w.Member("final_train_loss", r.final_train_loss);
  w.Member("final_test_accuracy", r.final_test_accuracy);
  w.Member("samples_per_second", r.samples_per_second);
  w.Member("wall_seconds", r.wall_seconds);
  w.Member("peak_rss_bytes", r.peak_rss_bytes);
  w.Member("peak_tensor_bytes", r.peak_tensor_bytes);
  w.Key("per_epoch");
  w.BeginArray();
  for (const EpochMetrics& m : r.per_epoch) {
    w.BeginObject();
    w.Member("epoch", m.epoch + 1);
    w.Member("train_loss", m.train_loss);
    w.Member("test_accuracy", m.test_accuracy);
    w.Member("test_loss", m.test_loss);
    w.Member("samples_per_second", m.samples_per_second);
    w.Member("seconds", m.seconds);
    w.EndObject();
  }
  w.EndArray();
  w.EndObject();
  return w.Take() + "\n";
}

}  // namespace nereid
