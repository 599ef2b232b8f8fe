#ifndef NEREID_RUNTIME_RUN_METRICS_H_
#define NEREID_RUNTIME_RUN_METRICS_H_

// A run's figures as JSON: `--metrics-json` (MetricsJson, declared in
// trainer.h) and the step log's epoch lines.

#include "core/json.h"
#include "runtime/trainer.h"

namespace nereid {

// An epoch's figures as the metrics and the step log write them.
Json EpochJson(const EpochMetrics& m);

}  // namespace nereid

#endif  // NEREID_RUNTIME_RUN_METRICS_H_
