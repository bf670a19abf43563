"""Known-bad edits for ``bench/mutation_check.py``: each one a plausible bug the fast suite must catch.

A mutation replaces ``old`` (which must occur exactly once in ``path``) by
``new``. ``tests`` are the test files run first (the ones that should catch
it); the whole fast suite runs after them unless ``--targeted``. The first
block is issue 12's list (bugs that once passed every fast test); the rest
guard the other options each loss has.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Mutation:
    name: str
    path: str
    old: str
    new: str
    description: str
    tests: tuple[str, ...] = ()


PPO_TESTS = ("tests/test_ppo_loss_reference.py",)
AC_TESTS = ("tests/test_actor_critic_loss_reference.py",)
DQN_TESTS = ("tests/test_dqn_loss_reference.py", "tests/test_trainer_wiring.py", "tests/test_dqn.py")
IMPALA_TESTS = ("tests/test_impala_loss_reference.py",)
WIRING_TESTS = ("tests/test_trainer_wiring.py", "tests/test_evaluator.py")

_PPO_TORCH = "plugins/algorithms/ppo/torch_policy.py"
_PPO_TF = "plugins/algorithms/ppo/tf_policy.py"
_AC_TORCH = "plugins/backends/torch/losses.py"
_AC_TF = "plugins/backends/tf/losses.py"
_DQN_TORCH = "plugins/algorithms/dqn/torch_policy.py"
_DQN_TF = "plugins/algorithms/dqn/tf_policy.py"
_IMPALA_TF = "plugins/algorithms/impala/tf_policy.py"
_VTRACE_TORCH = "plugins/backends/torch/vtrace.py"  # V-trace and the sequence unroll IMPALA uses
_VTRACE_TF = "plugins/backends/tf/vtrace.py"

MUTATIONS: list[Mutation] = [
    # --- issue 12's list --------------------------------------------------------------------
    Mutation(
        "ppo_surrogate_without_min_torch",
        "plugins/backends/torch/losses.py",  # the clipped surrogate PPO and APPO share
        "return torch.min(advantages * ratio, advantages * torch.clamp(ratio, 1.0 - clip, 1.0 + clip))",
        "return advantages * torch.clamp(ratio, 1.0 - clip, 1.0 + clip)",
        "PPO's surrogate without the min (clipped term only)",
        PPO_TESTS,
    ),
    Mutation(
        "ppo_surrogate_without_min_tf",
        "plugins/backends/tf/losses.py",
        "return tf.minimum(advantages * ratio,",
        "return tf.maximum(advantages * ratio,",
        "PPO's surrogate with max for min (TF)",
        PPO_TESTS,
    ),
    Mutation(
        "ppo_value_clip_min_torch",
        _PPO_TORCH,
        "vf_loss = torch.max(vf_loss, (clipped - targets) ** 2)",
        "vf_loss = torch.min(vf_loss, (clipped - targets) ** 2)",
        "PPO's value clipping with min instead of max",
        PPO_TESTS,
    ),
    Mutation(
        "ppo_value_clip_min_tf",
        _PPO_TF,
        "vf_loss = tf.maximum(vf_loss, (clipped - targets) ** 2)",
        "vf_loss = tf.minimum(vf_loss, (clipped - targets) ** 2)",
        "PPO's value clipping with min instead of max (TF)",
        PPO_TESTS,
    ),
    Mutation(
        "ppo_ignores_normalize_advantages_torch",
        _PPO_TORCH,
        "        if training.normalize_advantages:\n",
        "        if True:\n",
        "PPO always normalises advantages",
        PPO_TESTS,
    ),
    Mutation(
        "ppo_ignores_normalize_advantages_tf",
        _PPO_TF,
        "        if training.normalize_advantages:\n",
        "        if False:\n",
        "PPO never normalises advantages (TF)",
        PPO_TESTS,
    ),
    Mutation(
        "ppo_ignores_clip_schedule_torch",
        _PPO_TORCH,
        "if training.clip_param_schedule:",
        "if False:",
        "PPO ignores clip_param_schedule",
        PPO_TESTS,
    ),
    Mutation(
        "ppo_ignores_clip_schedule_tf",
        _PPO_TF,
        "if training.clip_param_schedule:",
        "if False:",
        "PPO ignores clip_param_schedule (TF)",
        PPO_TESTS,
    ),
    Mutation(
        "actor_critic_entropy_sign_torch",
        _AC_TORCH,
        "loss = policy_loss + vf_loss_coeff * vf_loss - entropy_coeff * entropy",
        "loss = policy_loss + vf_loss_coeff * vf_loss + entropy_coeff * entropy",
        "A2C/A3C entropy bonus with its sign flipped",
        AC_TESTS,
    ),
    Mutation(
        "actor_critic_entropy_sign_tf",
        _AC_TF,
        "loss = policy_loss + vf_loss_coeff * vf_loss - entropy_coeff * entropy",
        "loss = policy_loss + vf_loss_coeff * vf_loss + entropy_coeff * entropy",
        "A2C/A3C entropy bonus with its sign flipped (TF)",
        AC_TESTS,
    ),
    Mutation(
        "ppo_entropy_sign_torch",
        _PPO_TORCH,
        "loss = policy_loss + training.vf_loss_coeff * vf_loss - training.entropy_coeff * entropy",
        "loss = policy_loss + training.vf_loss_coeff * vf_loss + training.entropy_coeff * entropy",
        "PPO's entropy bonus with its sign flipped",
        PPO_TESTS,
    ),
    Mutation(
        "ppo_ignores_vf_loss_coeff_torch",
        _PPO_TORCH,
        "loss = policy_loss + training.vf_loss_coeff * vf_loss - training.entropy_coeff * entropy",
        "loss = policy_loss + 0.5 * vf_loss - training.entropy_coeff * entropy",
        "PPO ignores vf_loss_coeff (uses the default 0.5)",
        PPO_TESTS,
    ),
    Mutation(
        "ppo_ignores_vf_loss_coeff_tf",
        _PPO_TF,
        "loss = policy_loss + training.vf_loss_coeff * vf_loss - training.entropy_coeff * entropy",
        "loss = policy_loss + 0.5 * vf_loss - training.entropy_coeff * entropy",
        "PPO ignores vf_loss_coeff (TF)",
        PPO_TESTS,
    ),
    Mutation(
        "actor_critic_ignores_vf_loss_coeff_torch",
        _AC_TORCH,
        "loss = policy_loss + vf_loss_coeff * vf_loss - entropy_coeff * entropy",
        "loss = policy_loss + 0.5 * vf_loss - entropy_coeff * entropy",
        "A2C/A3C ignore vf_loss_coeff",
        AC_TESTS,
    ),
    Mutation(
        "dqn_drops_importance_weights",
        "plugins/algorithms/dqn/dqn.py",
        "minibatch = replay(self.replay_buffer, training.train_batch_size, **sample_kwargs)",
        "minibatch = replay(self.replay_buffer, training.train_batch_size, **sample_kwargs)\n"
        "            minibatch.pop('weights', None)",
        "DQN's training step drops the prioritized-replay importance weights",
        DQN_TESTS,
    ),
    Mutation(
        "metrics_window_never_drops_episodes",
        "core/sampling/metrics.py",
        "deque(maxlen=size)",
        "deque()",
        "the metrics window keeps every episode",
        WIRING_TESTS,
    ),
    Mutation(
        "bootstrap_row_reaches_the_learner",
        "core/sampling/postprocessing.py",
        "    body = steps.shape[0] - 1\n",
        "    body = steps.shape[0]\n",
        "trainable_rows keeps the fragment's bootstrap row",
        WIRING_TESTS,
    ),
    Mutation(
        "last_rows_reach_the_learner",
        "core/sampling/postprocessing.py",
        "    mask = steps[:body] != StepType.LAST\n",
        "    mask = steps[:body] >= 0\n",
        "trainable_rows keeps the LAST rows",
        WIRING_TESTS,
    ),
    # --- the other options of each loss ---------------------------------------------------------
    Mutation(
        "lr_schedule_ignored_torch",
        "plugins/backends/torch/policy.py",
        "        if training.lr_schedule:\n",
        "        if False:\n",
        "the torch backend ignores lr_schedule",
        PPO_TESTS + AC_TESTS,
    ),
    Mutation(
        "lr_schedule_ignored_tf",
        "plugins/backends/tf/policy.py",
        "        if training.lr_schedule:\n",
        "        if False:\n",
        "the TF backend ignores lr_schedule",
        PPO_TESTS + AC_TESTS,
    ),
    Mutation(
        "apply_gradients_without_clip_torch",
        "plugins/backends/torch/gradients.py",
        "        if grad_clip is not None:\n            clip_gradients(",
        "        if False:\n            clip_gradients(",
        "A3C's learner applies unclipped gradients",
        AC_TESTS,
    ),
    Mutation(
        "pg_ignores_grad_clip_torch",
        "plugins/algorithms/pg/torch_policy.py",
        "    loss_columns = (SB.OBS, SB.ACTIONS, SB.ADVANTAGES, SB.VALUE_TARGETS)\n",
        "    loss_columns = (SB.OBS, SB.ACTIONS, SB.ADVANTAGES, SB.VALUE_TARGETS)\n\n"
        "    def learn_on_batch(self, batch):\n"
        "        training = self.config.training\n"
        "        clip, training.grad_clip = training.grad_clip, None\n"
        "        try:\n"
        "            return super().learn_on_batch(batch)\n"
        "        finally:\n"
        "            training.grad_clip = clip\n",
        "PG's torch step ignores grad_clip (steps on the unclipped gradient)",
        AC_TESTS,
    ),
    Mutation(
        "pg_value_term_without_baseline_torch",
        "plugins/algorithms/pg/torch_policy.py",
        "        if training.use_baseline:\n",
        "        if True:\n",
        "PG trains the value head even without a baseline",
        AC_TESTS,
    ),
    Mutation(
        "pg_ignores_normalize_advantages_tf",
        "plugins/algorithms/pg/tf_policy.py",
        "        if training.normalize_advantages:\n",
        "        if False:\n",
        "PG never normalises advantages (TF)",
        AC_TESTS,
    ),
    Mutation(
        "a2c_ignores_normalize_advantages_torch",
        "plugins/algorithms/a2c/torch_policy.py",
        "        if training.normalize_advantages:\n",
        "        if False:\n",
        "A2C never normalises advantages",
        AC_TESTS,
    ),
    Mutation(
        "dqn_huber_is_mse_torch",
        _DQN_TORCH,
        'if training.td_error_loss_fn == "huber":',
        "if False:",
        "DQN uses MSE when Huber is asked for",
        DQN_TESTS,
    ),
    Mutation(
        "dqn_ignores_lr_schedule_torch",
        _DQN_TORCH,
        "    def learn_on_batch(self, batch: SB) -> dict[str, float]:\n",
        "    def _current_lr(self) -> float:\n"
        "        return float(self.config.training.lr)\n\n"
        "    def learn_on_batch(self, batch: SB) -> dict[str, float]:\n",
        "DQN's torch policy steps with lr, ignoring lr_schedule",
        DQN_TESTS,
    ),
    Mutation(
        "dqn_double_q_selects_with_target_torch",
        _DQN_TORCH,
        "next_actions = next_q_online.argmax(dim=1, keepdim=True)",
        "next_actions = next_q_target.argmax(dim=1, keepdim=True)",
        "double Q picks the next action with the target network",
        DQN_TESTS,
    ),
    Mutation(
        "dqn_dueling_without_mean_tf",
        _DQN_TF,
        "return self.value(features) + advantages - tf.reduce_mean(advantages, axis=-1, keepdims=True), None",
        "return self.value(features) + advantages, None",
        "dueling head without the mean subtraction (TF)",
        DQN_TESTS,
    ),
    Mutation(
        "dqn_loss_ignores_importance_weights_tf",
        _DQN_TF,
        "            per_row = per_row * tf.cast(batch[WEIGHTS], per_row.dtype)\n",
        "            per_row = per_row * 1.0\n",
        "DQN's TF loss ignores the importance weights",
        DQN_TESTS,
    ),
    Mutation(
        "n_step_discount_is_gamma",
        "core/blocks/replay_buffers.py",
        "out[SampleBatch.DISCOUNTS] = (gamma ** k.astype(np.float64) * env_discounts[next_t, rows_b])",
        "out[SampleBatch.DISCOUNTS] = (gamma * env_discounts[next_t, rows_b])",
        "n-step transitions discount by gamma instead of gamma**n",
        DQN_TESTS,
    ),
    Mutation(
        "impala_learns_last_steps_torch",
        _VTRACE_TORCH,
        "return (self.time_major(batch, SB.STEP_TYPES)[:-1] != _LAST).to(dtype)",
        "return (self.time_major(batch, SB.STEP_TYPES)[:-1] >= 0).to(dtype)",
        "IMPALA learns the LAST steps",
        IMPALA_TESTS,
    ),
    Mutation(
        "impala_entropy_sign_tf",
        _IMPALA_TF,
        "loss = policy_loss + training.vf_loss_coeff * vf_loss - training.entropy_coeff * mean_entropy",
        "loss = policy_loss + training.vf_loss_coeff * vf_loss + training.entropy_coeff * mean_entropy",
        "IMPALA's entropy bonus with its sign flipped (TF)",
        IMPALA_TESTS,
    ),
    Mutation(
        "impala_ignores_lr_schedule_tf",
        _IMPALA_TF,
        "class IMPALATFPolicy(MinibatchSGD, VTraceTFPolicy):\n",
        "class IMPALATFPolicy(MinibatchSGD, VTraceTFPolicy):\n"
        "    def _current_lr(self) -> float:\n"
        "        return float(self.config.training.lr)\n\n",
        "IMPALA's TF policy steps with lr, ignoring lr_schedule",
        IMPALA_TESTS,
    ),
    Mutation(
        "impala_vtrace_rho_clip_ignored_tf",
        _VTRACE_TF,
        "deltas = clipped(clip_rho_threshold) * (rewards[1:] + discounts[1:] * values[1:] - values[:-1])",
        "deltas = rhos * (rewards[1:] + discounts[1:] * values[1:] - values[:-1])",
        "V-trace value targets ignore rho-bar (TF)",
        IMPALA_TESTS,
    ),
    Mutation(
        "impala_vtrace_lambda_ignored_torch",
        _VTRACE_TORCH,
        "cs = lambda_ * clipped(clip_c_threshold)",
        "cs = clipped(clip_c_threshold)",
        "V-trace ignores lambda",
        IMPALA_TESTS,
    ),
    Mutation(
        "impala_gamma_ignored_torch",
        _VTRACE_TORCH,
        "discounts=self.time_major(batch, SB.DISCOUNTS).to(values.dtype) * training.gamma,",
        "discounts=self.time_major(batch, SB.DISCOUNTS).to(values.dtype),",
        "IMPALA ignores gamma",
        IMPALA_TESTS,
    ),
    Mutation(
        "impala_pg_rho_uses_rho_bar_torch",
        _VTRACE_TORCH,
        "pg_advantages = clipped(clip_pg_rho_threshold) *",
        "pg_advantages = clipped(clip_rho_threshold) *",
        "policy-gradient advantages clipped with rho-bar instead of pg-rho-bar",
        IMPALA_TESTS,
    ),
    Mutation(
        "impala_c_clip_ignored_tf",
        _VTRACE_TF,
        "cs = lambda_ * clipped(clip_c_threshold)",
        "cs = lambda_ * rhos",
        "V-trace trace coefficients ignore c-bar (TF)",
        IMPALA_TESTS,
    ),
]
