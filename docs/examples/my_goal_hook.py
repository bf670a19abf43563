"""goal_rate: a hook plugin reporting how often episodes reach the goal (``custom_metrics/reached_goal_mean``).

The hooks are module-level functions, so the entry point names the module
(``rlgear.hooks = goal_rate = my_goal_hook``) and code passes the module itself
(``rlgear.train(config, hooks=[my_goal_hook])``). Registered as an entry point it
runs in every run (``RLGEAR_DISABLE_PLUGIN_AUTOLOAD=1`` turns entry-point hooks
off), so it acts only where it makes sense: runs of an env that reports
``reached_goal``.
"""

from __future__ import annotations

import rlgear


@rlgear.hookimpl
def on_episode_end(worker, episode):
    # worker: the RolloutWorker that ran the episode (worker.config is the run's RunConfig).
    # episode.last_info: this env's info at the episode's final step.
    if "reached_goal" not in episode.last_info:
        return  # another env: stay out of its results
    episode.custom_metrics["reached_goal"] = float(episode.last_info["reached_goal"])


@rlgear.hookimpl
def on_train_result(trainer, result):
    # Keys added here are logged like the built-in ones; the window's mean is already in `result`.
    rate = result.get("custom_metrics/reached_goal_mean")
    if rate is not None:
        result["custom_metrics/missed_goal_fraction"] = 1.0 - rate
