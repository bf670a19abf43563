"""DDPG and TD3: one deterministic-actor code path; TD3's changes are config switches.

DDPG (Lillicrap et al. 2016): a deterministic actor ``a = tanh(mu(s))`` climbing
``Q(s, mu(s))``, a critic regressing on ``r + gamma Q'(s', mu'(s'))`` with
Polyak-averaged target actor and critic, exploration by Gaussian or
Ornstein-Uhlenbeck noise on the action. TD3 (Fujimoto et al. 2018) is the same
code with ``twin_q`` (the target takes the smaller of two critics), ``policy_delay``
(the actor and the targets move every d-th critic step) and ``target_noise``
(target policy smoothing): ``td3``'s config class differs from ``ddpg``'s only in
its defaults. The replay machinery is the shared
:class:`rlgear.plugins.families.replay.replay_trainer.ReplayTrainer`.
"""

from rlgear.plugins.algorithms.ddpg.config import DDPGConfig, TD3Config
from rlgear.plugins.algorithms.ddpg.ddpg import DDPG, TD3

__all__ = ["DDPG", "TD3", "DDPGConfig", "TD3Config"]
