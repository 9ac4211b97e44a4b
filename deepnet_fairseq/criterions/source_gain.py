"""``--criterion label_smoothed_cross_entropy_with_source_gain``: fairseq's
``label_smoothed_cross_entropy`` (the same options, the same loss and gradients) that also
logs ``source_gain`` at every validation, in bits per target token: the nll of each target
given another sentence's source of its batch (the sources rolled by one, as
``deepnet-source-use`` exchanges them) minus its nll given its own.

A model can train to an "ok" end and ignore its source: a language model of the targets,
one fluent sentence for every input. Its loss keeps falling and does not say so; at a low
rate a model that does read its source can even lie above it (the multilingual study's
DeepNet 50L-50L). The source gain says it at once: near 0 for a model that ignores its
source, a bit or more for one that reads it.

Training is untouched: the second forward pass runs only with the model in eval mode (fairseq's
validation), on batches of two sentences or more that have sources. Validation costs about
twice as much.
"""

import math

from fairseq import metrics
from fairseq.criterions import register_criterion
from fairseq.criterions.label_smoothed_cross_entropy import (
    LabelSmoothedCrossEntropyCriterion, LabelSmoothedCrossEntropyCriterionConfig)

from . import SOURCE_GAIN as NAME


@register_criterion(NAME, dataclass=LabelSmoothedCrossEntropyCriterionConfig)
class SourceGainCriterion(LabelSmoothedCrossEntropyCriterion):
    """Label-smoothed cross-entropy; in eval mode also the nll with the batch's sources rolled
    by one (``nll_shuffled``, summed as fairseq sums ``nll_loss``)."""

    def forward(self, model, sample, reduce=True):
        loss, sample_size, logging_output = super().forward(model, sample, reduce=reduce)
        net_input = sample["net_input"]
        if model.training or not reduce or "src_tokens" not in net_input:
            return loss, sample_size, logging_output
        # the measured batches' own nll and tokens beside the shuffled nll. A batch of one
        # sentence has no other source to give it: zeros, never absent, because fairseq sums a
        # validation batch's outputs across workers key by key, and every worker must send
        # the same keys
        nll = logging_output["nll_loss"]
        measured = {"nll_shuffled": nll.new_zeros(()), "nll_measured": nll.new_zeros(()),
                    "ntokens_measured": 0}
        if net_input["src_tokens"].size(0) > 1:
            shuffled = {**net_input, "src_tokens": net_input["src_tokens"].roll(1, dims=0),
                        "src_lengths": net_input["src_lengths"].roll(1, dims=0)}
            _, nll_shuffled = self.compute_loss(model, model(**shuffled), sample, reduce=True)
            measured = {"nll_shuffled": nll_shuffled.data, "nll_measured": nll,
                        "ntokens_measured": sample["ntokens"]}
        logging_output.update(measured)
        return loss, sample_size, logging_output

    @classmethod
    def reduce_metrics(cls, logging_outputs) -> None:
        super().reduce_metrics(logging_outputs)
        tokens = sum(log.get("ntokens_measured", 0) for log in logging_outputs)
        if tokens > 0:
            gain = sum(log.get("nll_shuffled", 0) - log.get("nll_measured", 0)
                       for log in logging_outputs)
            metrics.log_scalar("source_gain", gain / tokens / math.log(2), tokens, round=3)
