#include "runtime/run_metrics.h"

#include "absl/strings/str_cat.h"
#include "core/version.h"

namespace nereid {

Json EpochJson(const EpochMetrics& m) {
  Json epoch;
  epoch["epoch"] = m.epoch + 1;
  epoch["train_loss"] = m.train_loss;
  epoch["test_accuracy"] = m.test_accuracy;
  epoch["test_loss"] = m.test_loss;
  epoch["step"] = m.step;
  epoch["samples_per_second"] = m.samples_per_second;
  if (m.test_bits_per_token > 0) {
    epoch["tokens_per_second"] = m.tokens_per_second;
    epoch["test_bits_per_token"] = m.test_bits_per_token;
  }
  epoch["seconds"] = m.seconds;
  for (const auto& [key, value] : m.strategy.items()) epoch[key] = value;
  return epoch;
}

std::string MetricsJson(const TrainOptions& options, const TrainResult& r) {
  Json j;
  j["model"] = r.model;
  j["version"] = kNereidVersion;
  if (!options.revision.empty()) j["revision"] = options.revision;
  j["finished_unix_seconds"] = absl::ToDoubleSeconds(absl::Now() - absl::UnixEpoch());
  j["workers"] = int64_t{options.workers};
  j["rank"] = int64_t{options.rank};
  j["threads"] = int64_t{options.threads};
  j["strategy"] = r.strategy;
  if (!r.transport.empty()) j["transport"] = r.transport;
  j["dataset"] = r.dataset;
  j["normalization"] = r.normalization;
  j["passes"] = r.passes;
  j["pipeline_width"] = r.pipeline_width;
  j["compression"] = r.compression;
  j["epochs"] = r.epochs;
  j["steps"] = r.steps;
  j["batch_per_worker"] = options.batch;
  j["seed"] = static_cast<int64_t>(options.seed);
  j["final_train_loss"] = r.final_train_loss;
  j["final_test_accuracy"] = r.final_test_accuracy;
  j["samples_per_second"] = r.samples_per_second;
  if (r.tokens_per_second > 0) j["tokens_per_second"] = r.tokens_per_second;
  j["wall_seconds"] = r.wall_seconds;
  j["peak_rss_bytes"] = r.peak_rss_bytes;
  j["peak_tensor_bytes"] = r.peak_tensor_bytes;
  j["rank_peak_tensor_bytes"] = r.rank_peak_tensor_bytes;
  j["rank_state_bytes"] = r.rank_state_bytes;
  j["bytes_sent_per_step"] = r.bytes_sent_per_step;
  j["bytes_received_per_step"] = r.bytes_received_per_step;
  j["comm_seconds_per_step"] = r.comm_seconds_per_step;
  j["codec_seconds_per_step"] = r.codec_seconds_per_step;
  j["parameter_fingerprint"] = absl::StrCat(absl::Hex(r.parameter_fingerprint, absl::kZeroPad16));
  j["state_fingerprint"] = absl::StrCat(absl::Hex(r.state_fingerprint, absl::kZeroPad16));
  j["model_parallel"] = r.model_parallel;
  j["state_bytes"] = r.state_bytes;
  j["per_rank_state_bytes"] = r.per_rank_state_bytes;
  for (const auto& [key, value] : r.strategy_metrics.items()) j[key] = value;
  Json losses = Json::array();
  for (float l : r.step_losses) losses.push_back(l);
  j["step_losses"] = std::move(losses);
  j["step_finished_seconds"] = r.step_finished_seconds;
  j["loss_not_improving"] = r.loss_not_improving;
  Json layers = Json::array();
  for (const LayerBytes& l : r.layer_bytes) {
    Json layer;
    layer["name"] = l.name;
    layer["method"] = l.method;
    layer["collective"] = l.collective;
    layer["elements"] = l.elements;
    layer["payload_bytes"] = l.payload_bytes;
    layer["payload_is_bound"] = l.payload_is_bound;
    layer["sent_bytes"] = l.sent_bytes;
    layer["uncompressed_sent_bytes"] = l.uncompressed_sent_bytes;
    layers.push_back(std::move(layer));
  }
  j["layer_bytes"] = std::move(layers);
  Json epochs = Json::array();
  for (const EpochMetrics& m : r.per_epoch) {
    epochs.push_back(EpochJson(m));
  }
  j["per_epoch"] = std::move(epochs);
  Json evaluations = Json::array();
  for (const EpochMetrics& m : r.interval_evaluations) evaluations.push_back(EpochJson(m));
  j["evaluations"] = std::move(evaluations);
  return JsonLine(j) + "\n";
}

}  // namespace nereid
