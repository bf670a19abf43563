"""SAC: soft actor-critic with a squashed Gaussian actor, twin critics and a tuned temperature.

Haarnoja et al. 2018 ("Soft Actor-Critic Algorithms and Applications", arXiv:1812.05905):
the actor maximises ``min_k Q_k(s, a) - alpha log pi(a|s)`` with ``a = tanh(u)``,
``u ~ N(mean(s), std(s))`` (log-probability corrected for the tanh, appendix C);
the twin critics regress on ``r + gamma (min_k Q'_k(s', a') - alpha log pi(a'|s'))``
with Polyak-averaged target critics; ``alpha`` is tuned so that the policy's entropy
stays near ``target_entropy`` (-|A| by default), or fixed. The replay machinery is
the shared :class:`rlgear.plugins.families.replay.replay_trainer.ReplayTrainer`; the network and
loss live in ``torch_policy``. On a Discrete action space the same policy entries build discrete SAC
(Christodoulou 2019: a categorical actor, one Q per action, exact expectations over actions) from
``discrete_torch_policy`` / ``discrete_tf_policy``.
"""

from rlgear.plugins.algorithms.sac.config import SACConfig
from rlgear.plugins.algorithms.sac.sac import SAC

__all__ = ["SAC", "SACConfig"]
