"""Small custom torch models for ``model.custom`` tests (imported as ``custom_models:<Class>``).

Tests put this folder on ``sys.path`` (``monkeypatch.syspath_prepend``) so that
the backend's ``resolve_object("custom_models:TinyActorCritic")`` finds it.
"""

from __future__ import annotations

import torch
from torch import nn

from rlgear.spaces import flat_dim


class TinyActorCritic(nn.Module):
    """One shared hidden layer of ``hidden`` units; records what it was built with."""

    built_with: list[dict] = []

    def __init__(self, observation_space, action_space, num_outputs, model_config, hidden=4, scale=1.0):
        super().__init__()
        self.hidden = hidden
        self.scale = scale
        self.num_outputs = num_outputs
        TinyActorCritic.built_with.append(
            {"num_outputs": num_outputs, "hidden": hidden, "scale": scale, "model_config": model_config}
        )
        self.body = nn.Linear(flat_dim(observation_space), hidden)
        self.pi = nn.Linear(hidden, num_outputs)
        self.vf = nn.Linear(hidden, 1)

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = torch.tanh(self.body(obs))
        return self.scale * self.pi(h), self.vf(h).squeeze(-1)


class NotAModule:
    """Has the constructor signature of a model but is not a torch.nn.Module."""

    def __init__(self, observation_space, action_space, num_outputs, model_config):
        pass
