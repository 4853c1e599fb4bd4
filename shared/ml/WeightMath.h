#pragma once
// Arithmetic on whole weight sets, for the coordinator's aggregation rules. Each operation works tensor by
// tensor on the bundles' flat buffers in place (vectorised by libtorch, no copies), so folding a
// 5-million-parameter upload into the server weights costs a few milliseconds. Inputs passed by const
// reference are only read, never detached: other threads may read the same (implicitly shared) bundles
// meanwhile. No exception escapes.

#include "Result.h"
#include "tensor/TensorBundle.h"

namespace gleaner::ml::WeightMath {

// Same tensor names, dtypes and shapes (order may differ). The message names the first difference.
Status checkCompatible(const TensorBundle& reference, const TensorBundle& other);

// VC-ASGD's fold: server <- alpha * server + (1 - alpha) * client for every floating-point tensor (parameters
// and BatchNorm running statistics alike). Integer tensors are counters (BatchNorm's num_batches_tracked) and
// take the larger of the two values: averaging a count means nothing. alpha must lie in [0, 1].
Status blend(TensorBundle& server, const TensorBundle& client, double alpha);

// Which floating-point tensors an operation below touches. BatchNorm's running means and variances (tensors
// named "...running_mean" / "...running_var") are statistics of the data, not parameters a gradient moves:
// rules that work on pseudo-gradients treat them apart.
enum class Part
{
    Parameters, // floating-point tensors that are not running statistics
    Statistics, // running statistics only
    Floating,   // every floating-point tensor
};
bool isRunningStatistic(QStringView name);

// target += scale * (a - b) for the chosen floating-point tensors; the three bundles must be compatible.
Status addScaledDifference(TensorBundle& target, const TensorBundle& a, const TensorBundle& b, double scale,
                           Part part);
// y = alpha * y + beta * x for the chosen floating-point tensors; the bundles must be compatible.
Status scaleAdd(TensorBundle& y, double alpha, const TensorBundle& x, double beta, Part part);
// Integer tensors (counters such as num_batches_tracked) take the larger of the two values.
Status takeLargerCounters(TensorBundle& target, const TensorBundle& other);
// A bundle with the tensors of `like` (names, dtypes, shapes), every value zero.
TensorBundle zerosLike(const TensorBundle& like);

// True when every floating-point value is finite; otherwise `where` gets the first offending tensor's name.
// Fails closed: false (with a critical log message) also when the check itself fails.
bool allFinite(const TensorBundle& weights, QString* where = nullptr);

// Euclidean norm over the chosen floating-point values (all by default), accumulated in float64; NaN (with a
// critical log message) when it cannot be computed.
double l2Norm(const TensorBundle& weights, Part part = Part::Floating);
// Euclidean norm of (a - b) over the chosen floating-point tensors (all by default); the bundles must be
// compatible.
Result<double> l2Distance(const TensorBundle& a, const TensorBundle& b, Part part = Part::Floating);

} // namespace gleaner::ml::WeightMath
