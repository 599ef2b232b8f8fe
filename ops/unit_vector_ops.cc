// UnitVector: a tensor scaled to unit Euclidean norm as a whole (power
// gossip's normalised power-iteration vector).

#include "ops/op_registry.h"
#include "ops/shape_fns.h"

namespace nereid {
namespace {

NEREID_REGISTER_OP(OpDefBuilder("UnitVector")
                       .Summary("x / ||x||_2 over all its elements (0 where x is all zeros); the norm is summed "
                                "in order, so equal inputs give equal outputs on every rank.")
                       .Input("x", kFloatTypes)
                       .Output("y")
                       .SetShapeFn(shape_fns::UnchangedShape)
                       .SetCostFn(cost_fns::OneFlopPerOutput)
                       .NoGradient("inserted after autodiff (power_gossip)"));

}  // namespace
}  // namespace nereid
