"""Diagnostics of deep Transformers: why deep Post-LN fails and DeepNorm does not, measured.

* ``model_update``  -- ``deepnet-model-update``: the model update ||F(x, theta_t) - F(x, theta_0)||
  of several depths and methods over the first steps of training (the paper's Figure 5);
* ``deepnet_fairseq.tasks.monitored`` (a plugin task, registered with the models) -- the
  ``translation_monitored`` task: per-layer gradient norms, LayerNorm input norms (Figure 4)
  and update ratios for any ``fairseq-train`` run, logged by fairseq;
* ``plot_monitors`` -- ``deepnet-plot-monitors``: per-layer heat maps from those logs;
* ``source_use``    -- ``deepnet-source-use``: how much checkpoints' outputs depend on their source
  (NLL gain of the true source over another sentence's, each decoder sub-layer's branch share).

The depth study (``deepnet-depth-study``: Table 1's pattern at tiny scale) is a sweep of the
recipes (``deepnet_fairseq/recipes/depth_study.py``), not a pipeline of its own.

Importing this package imports neither torch nor fairseq, so that the tools' ``--help`` and
argument errors answer at once: each tool imports them, and registers the plugin with fairseq
(``deepnet_fairseq.register``), in the functions that build, train or load models.
"""
