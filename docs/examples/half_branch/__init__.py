"""A new method in one declaration: Post-LN with the residual branch halved, LN(x + G(x) / 2).

Use it as fairseq's user dir (it loads deepnet_fairseq itself):

    fairseq-train DATA --user-dir docs/examples/half_branch --arch half_branch_transformer ...
"""

import deepnet_fairseq  # noqa: F401  (fairseq is loaded: this registers the plugin)
from deepnet_fairseq.nn.method_layers import MethodLayer, layer_rule
from deepnet_fairseq.methods import Method
from deepnet_fairseq.models.method_transformers import register_method


@layer_rule
class HalfBranch(MethodLayer):
    """The layer rule: fairseq's Post-LN layer with its residual_connection hook overridden."""

    def residual_connection(self, x, residual):
        return residual + 0.5 * x  # x: the branch G(x) after dropout; residual: the skip path


register_method(Method(
    name="half_branch", summary="LN(x + G(x)/2)", paper="docs/methods.md (an example)",
    layer_norm="post", layers="HalfBranch"))
