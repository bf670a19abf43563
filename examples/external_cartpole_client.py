"""An environment that connects to an rlgear policy server: gymnasium CartPole-v1 played over TCP.

    rlgear serve configs/ppo-cartpole-external.yaml        # the learner, waits for clients
    python examples/external_cartpole_client.py 127.0.0.1:9900   # x 8 (each seeds its env from its slot)
    python examples/external_cartpole_client.py 127.0.0.1:9900 --inference client   # acts locally (ONNX)

Only ``rlgear.external.client`` (numpy + standard library) talks to the server; the
environment could as well be a game engine or a robot.
"""

from __future__ import annotations

import argparse
import time

import gymnasium as gym

from rlgear.external.client import Client


def play(
    address: str,
    seed: int | None,
    token: str | None = None,
    max_steps: int | None = None,
    inference: str = "server",
    upload_every: int = 64,
) -> None:
    """Play episodes until the server goes away; ``seed=None`` seeds the env with 1 + the slot the
    server gave this client, so what each slot plays does not depend on the order clients connected in."""
    env = gym.make("CartPole-v1")
    client = Client(address, token=token, inference=inference, upload_every=upload_every)
    observation, _ = env.reset(seed=1 + client.slot if seed is None else seed)
    action = client.init(observation)
    steps = 0
    try:
        while max_steps is None or steps < max_steps:
            observation, reward, terminated, truncated, _ = env.step(action)
            steps += 1
            action = client.send(reward, observation, terminated, truncated)
            if action is None:  # the episode ended
                observation, _ = env.reset()
                action = client.init(observation)
    except ConnectionError as err:  # the server went away for good
        print(f"client in slot {client.slot} ({steps} steps played): {err}")
    finally:
        client.disconnect()
        env.close()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("address", help="host:port of the policy server")
    parser.add_argument(
        "--seed", type=int, default=None, help="seed of the env (default: 1 + the slot the server assigns)"
    )
    parser.add_argument("--token", default=None)
    parser.add_argument("--max-steps", type=int, default=None)
    parser.add_argument(
        "--inference",
        choices=("server", "client"),
        default="server",
        help="who runs the policy: the server (protocol 1) or this client, with ONNX (protocol 2)",
    )
    parser.add_argument("--upload-every", type=int, default=64, help="with --inference client")
    parser.add_argument("--delay", type=float, default=0.0, help="seconds to wait before connecting")
    args = parser.parse_args()
    time.sleep(args.delay)
    play(args.address, args.seed, args.token, args.max_steps, args.inference, args.upload_every)


if __name__ == "__main__":
    main()
