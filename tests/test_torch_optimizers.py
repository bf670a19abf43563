"""rlgear's foreach optimizers follow torch.optim's update rules exactly."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from rlgear.plugins.backends.torch.optimizers import SGD, Adam, RMSprop


def two_models(seed=0):
    torch.manual_seed(seed)
    a = torch.nn.Sequential(torch.nn.Linear(5, 16), torch.nn.Tanh(), torch.nn.Linear(16, 3))
    b = torch.nn.Sequential(torch.nn.Linear(5, 16), torch.nn.Tanh(), torch.nn.Linear(16, 3))
    b.load_state_dict(a.state_dict())
    return a, b


@pytest.mark.parametrize(
    ("ours", "reference"),
    [
        (lambda p: Adam(p, lr=1e-2, eps=1e-5), lambda p: torch.optim.Adam(p, lr=1e-2, eps=1e-5)),
        (lambda p: SGD(p, lr=1e-2), lambda p: torch.optim.SGD(p, lr=1e-2)),
        (lambda p: RMSprop(p, lr=1e-3), lambda p: torch.optim.RMSprop(p, lr=1e-3)),
    ],
)
def test_updates_match_torch_optim(ours, reference):
    a, b = two_models()
    opt_a, opt_b = ours(a.parameters()), reference(b.parameters())
    x = torch.randn(32, 5)
    for _ in range(25):
        for model, opt in ((a, opt_a), (b, opt_b)):
            opt.zero_grad()
            model(x).pow(2).mean().backward()
            opt.step()
    for pa, pb in zip(a.parameters(), b.parameters(), strict=True):
        torch.testing.assert_close(pa, pb, rtol=1e-5, atol=1e-6)


def test_state_round_trip_continues_identically():
    a, b = two_models(1)
    opt_a, opt_b = Adam(a.parameters(), lr=1e-2), Adam(b.parameters(), lr=1e-2)
    x = torch.randn(16, 5)
    for _ in range(3):
        opt_a.zero_grad()
        a(x).pow(2).mean().backward()
        opt_a.step()
    b.load_state_dict(a.state_dict())
    opt_b.load_state({k: v.clone() for k, v in opt_a.state_arrays().items()}, opt_a.state_meta())
    assert opt_b.steps == 3
    for model, opt in ((a, opt_a), (b, opt_b)):
        opt.zero_grad()
        model(x).pow(2).mean().backward()
        opt.step()
    for pa, pb in zip(a.parameters(), b.parameters(), strict=True):
        torch.testing.assert_close(pa, pb)


def test_loading_another_optimizers_state_is_refused():
    a, _ = two_models()
    with pytest.raises(ValueError, match="Adam"):
        SGD(a.parameters(), lr=0.1).load_state({}, Adam(a.parameters(), lr=0.1).state_meta())


def test_training_does_not_import_torch_dynamo():
    """torch.optim imports torch._dynamo (1.6-2 s); the reason these optimizers exist."""
    code = (
        "import sys, torch\n"
        "from rlgear.plugins.backends.torch.optimizers import Adam\n"
        "m = torch.nn.Linear(3, 2); opt = Adam(m.parameters(), lr=0.1)\n"
        "m(torch.ones(4, 3)).sum().backward(); torch.nn.utils.clip_grad_norm_(opt.params, 0.5); opt.step()\n"
        "print('torch._dynamo' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
