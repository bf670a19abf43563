"""rlgear's offline algorithms (bc, cql, iql) against d3rlpy's on the same recorded datasets.

Stages, each resumable (finished work is skipped; the results file is rewritten atomically after
every unit, so a killed bench loses at most the unit it was in):

a. **Datasets**, recorded by rlgear with ``offline.output`` (no downloads), as Minari datasets
   under ``bench/data/minari`` (``MINARI_DATASETS_PATH``; git-ignored):
   ``<env>/replay-v0``: every episode of a SAC training run (random warm-up included);
   ``<env>/expert-v0``: episodes of SAC's final policy; ``<env>/medium-v0``: episodes of the SAC
   checkpoint whose greedy return is nearest halfway between a uniform-random policy's and the
   final policy's. Expert and medium are recorded by a SAC trainer restored from the checkpoint
   that only samples (its rollout worker acting with SAC's stochastic policy, as in training;
   no gradient step), so the recording is ``offline.output``'s own, ``action_logp`` included.
b. **rlgear**: ``bc``, ``cql``, ``iql`` on each dataset, ``--seeds`` seeds, ``--steps`` gradient
   steps; then greedy evaluation over ``--eval-episodes`` episodes with fixed env seeds.
c. **d3rlpy**: ``BC``, ``CQL``, ``IQL`` with matched settings on the same datasets, read with
   ``minari.load_dataset`` into ``d3rlpy.dataset.MDPDataset`` (terminations and truncations kept
   apart), evaluated by the same code with the same env seeds.
d. **Report**: per (env, dataset, algorithm, library) the interquartile mean (IQM) of the seeds'
   returns with a 95% bootstrap confidence interval, mean wall clock, the rlgear/d3rlpy wall-clock
   ratio, and whether rlgear's IQM is inside d3rlpy's interval or above it; the same per
   (algorithm, library) over the datasets with a stratified bootstrap.

Every unit runs in a fresh process (``nice``-able as a whole; one at a time; one torch thread), so
neither library starts with the other's imports or allocator warm. Wall clock: ``train_s`` is the
training loop alone (rlgear's ``trainer.train()`` calls, d3rlpy's ``fit``); ``total_s`` is the
whole process: imports, dataset reading, training, evaluation.

Usage:
    python bench/offline.py --smoke                # 1 seed, 500 steps, tiny datasets (bench/data/smoke)
    nohup nice -n 5 python bench/offline.py &      # the full run -> bench/results/offline.json
    python bench/offline.py --report               # only recompute the summary from the runs
    python bench/offline.py --profile              # cProfile of one rlgear cql run, into the results
Needs: torch, minari and d3rlpy==2.8.1, installed with gymnasium 1.4 put back over its 1.0.0 pin
(``pip install d3rlpy==2.8.1 && pip install "gymnasium[classic-control]==1.4.0"``; d3rlpy runs on it).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench._run import source_revision  # noqa: E402

DATASETS = ("expert", "medium", "replay")
ALGORITHMS = ("bc", "cql", "iql")
LIBRARIES = ("rlgear", "d3rlpy")
EVAL_SEED = 10_000  # evaluation episode i resets the env with seed EVAL_SEED + i, in both libraries
RANDOM_EPISODES = 10
TARGET_WALL_RATIO = 0.5

#: Shared learning settings: both libraries get these numbers (see ``d3rlpy_algo`` for the mapping).
SETTINGS: dict[str, Any] = {
    "hidden_sizes": [256, 256],
    "activation": "relu",
    "batch_size": 256,
    "lr": 3e-4,  # every optimizer of every algorithm (rlgear has one lr per algorithm)
    "adam_eps": 1e-8,  # d3rlpy's; rlgear's optimizer_epsilon set to it
    "gamma": 0.99,
    "tau": 0.005,
    "cql_min_q_weight": 5.0,  # rlgear's min_q_weight; d3rlpy's conservative_weight is 2x (see below)
    "cql_num_sampled_actions": 10,
    "cql_temperature": 1.0,
    "cql_initial_alpha": 1.0,  # SAC's entropy temperature, tuned towards -|A| in both
    "iql_expectile": 0.7,
    "iql_beta": 3.0,
    "iql_max_weight": 100.0,
}

#: Per env: the SAC run that records ``replay`` (rlgear's tuned file, shortened), and the size of
#: the acted datasets.
ENVS: dict[str, dict[str, Any]] = {
    "Pendulum-v1": {
        "slug": "pendulum",
        "sac_file": "configs/sac-pendulum.yaml",
        "sac_steps": 12_000,  # seed 0 reaches about -150 (greedy) by 8-10k env steps
        "record_steps": 30_000,
    },
    "LunarLanderContinuous-v3": {  # needs gymnasium[box2d]; not in the default run (docs say why)
        "slug": "lunarlandercontinuous",
        "sac_file": "configs/sac-lunarlander-continuous.yaml",
        "sac_steps": 300_000,
        "record_steps": 100_000,
    },
}


# ---------------------------------------------------------------------------------------------
# results file
# ---------------------------------------------------------------------------------------------
def load_results(path: Path) -> dict[str, Any]:
    if path.exists():
        return json.loads(path.read_text())
    return {"benchmark": "offline", "datasets": {}, "runs": {}}


def save_results(path: Path, results: dict[str, Any]) -> None:
    """Write to a temporary file beside ``path`` and rename it over: a kill leaves the old file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    tmp.write_text(json.dumps(results, indent=1) + "\n")
    os.replace(tmp, path)


def machine_load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def run_key(env: str, dataset: str, algo: str, library: str, seed: int) -> str:
    return f"{env}/{dataset}/{algo}/{library}/{seed}"


# ---------------------------------------------------------------------------------------------
# children: each unit of work in a fresh process
# ---------------------------------------------------------------------------------------------
RESULT_MARK = "@@offline-result@@ "


def spawn(job: dict[str, Any], data_root: Path, log: Path) -> dict[str, Any]:
    """Run ``job`` in a fresh process of this script; its output goes to ``log``; return its result."""
    env = {**os.environ, "MINARI_DATASETS_PATH": str(data_root / "minari"), "OMP_NUM_THREADS": "1"}
    env["RLGEAR_DISABLE_PLUGIN_AUTOLOAD"] = "1"
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("a") as out:
        out.write(f"\n=== {time.strftime('%H:%M:%S')} {json.dumps(job)}\n")
        out.flush()
        proc = subprocess.run(
            [sys.executable, __file__, "--child", json.dumps(job)],
            stdout=subprocess.PIPE,
            stderr=out,
            text=True,
            cwd=ROOT,
            env=env,
        )
    lines = [line for line in proc.stdout.splitlines() if line.startswith(RESULT_MARK)]
    if proc.returncode != 0 or not lines:
        raise RuntimeError(f"child {job['kind']} failed (exit {proc.returncode}); see {log}")
    return json.loads(lines[-1][len(RESULT_MARK) :])


def child_main(job: dict[str, Any]) -> None:
    start = time.perf_counter()
    import torch

    torch.set_num_threads(1)
    result = CHILDREN[job["kind"]](job)
    result["total_s"] = time.perf_counter() - start
    result["torch_threads"] = torch.get_num_threads()
    print(RESULT_MARK + json.dumps(result), flush=True)


def evaluate(act, env_id: str, episodes: int) -> list[float]:
    """Greedy returns of ``act(obs) -> action`` on ``episodes`` episodes seeded EVAL_SEED + i."""
    import gymnasium as gym

    env = gym.make(env_id)
    returns = []
    try:
        for i in range(episodes):
            obs, _ = env.reset(seed=EVAL_SEED + i)
            total, done = 0.0, False
            while not done:
                obs, reward, terminated, truncated, _ = env.step(np.asarray(act(obs), dtype=np.float32))
                total += float(reward)
                done = terminated or truncated
            returns.append(total)
    finally:
        env.close()
    return returns


# --- stage a ----------------------------------------------------------------------------------
def sac_raw(job: dict[str, Any], folder: Path) -> dict[str, Any]:
    import yaml

    raw = yaml.safe_load((ROOT / ENVS[job["env"]]["sac_file"]).read_text())
    raw["seed"] = job["seed"]
    raw.pop("stop", None)
    raw.pop("checkpoint", None)
    raw["logging"] = {"dir": str(folder / "runs"), "tensorboard": False, "progress": "none"}
    raw["training"]["evaluation_interval"] = 1
    raw["workers"] = {**raw.get("workers", {}), "num_cpus_for_driver": 1}
    return raw


def make_trainer(raw: dict[str, Any], logdir: Path):
    from rlgear import config as config_mod
    from rlgear.discovery import registry

    config = config_mod.resolve(raw)
    return registry.load_algorithm(raw["algorithm"])(config, logdir=logdir)


def child_sac(job: dict[str, Any]) -> dict[str, Any]:
    """Train SAC with ``offline.output`` (the replay dataset); a checkpoint and its greedy return
    after every iteration (``min_env_steps_per_iteration`` env steps)."""
    folder = Path(job["folder"])
    raw = sac_raw(job, folder)
    raw["offline"] = {
        "output": job["dataset_id"],
        "output_overwrite": True,
        "output_description": job["note"],
    }
    trainer = make_trainer(raw, folder / "runs")
    history = []
    train_start = time.perf_counter()
    try:
        while trainer.timesteps_total < job["steps"]:
            result = trainer.train()
            path = trainer.save(folder / "checkpoints" / f"steps-{trainer.timesteps_total:07d}")
            history.append(
                {
                    "env_steps": int(trainer.timesteps_total),
                    "eval_return": float(result["evaluation/episode_return_mean"]),
                    "checkpoint": str(Path(path).relative_to(folder)),
                }
            )
            print(json.dumps(history[-1]), file=sys.stderr, flush=True)
    finally:
        trainer.stop()  # completes the dataset
    return {"history": history, "train_s": time.perf_counter() - train_start}


def child_record(job: dict[str, Any]) -> dict[str, Any]:
    """Act a SAC checkpoint (stochastic, as in training; no learning) with ``offline.output``."""
    from rlgear.distributed.rollout_ops import standard_metrics

    folder = Path(job["folder"])
    raw = sac_raw(job, folder)
    raw["training"]["learning_starts"] = 0  # act with the policy from the first step
    raw["offline"] = {
        "output": job["dataset_id"],
        "output_overwrite": True,
        "output_description": job["note"],
    }
    trainer = make_trainer(raw, folder / "runs-record")
    try:
        trainer.restore(folder / job["checkpoint"])
        trainer.reseed(job["seed"])  # its own env and action streams, not the checkpoint's
        worker = trainer.workers.local_worker
        sampled = 0
        while sampled < job["steps"]:
            _, count = worker.sample_with_count()
            standard_metrics(trainer)  # hands the finished episodes to the dataset writer
            sampled += count
    finally:
        trainer.stop()
    return {"sampled_steps": sampled}


def dataset_stats(dataset_id: str) -> dict[str, Any]:
    """Episodes, steps and returns of a recorded dataset, read back with Minari."""
    import minari

    dataset = minari.load_dataset(dataset_id)
    returns, lengths, terminated = [], [], 0
    for episode in dataset.iterate_episodes():
        returns.append(float(np.sum(episode.rewards)))
        lengths.append(len(episode.rewards))
        terminated += int(episode.terminations[-1])
    return {
        "id": dataset_id,
        "episodes": len(returns),
        "steps": int(np.sum(lengths)),
        "mean_return": float(np.mean(returns)),
        "std_return": float(np.std(returns)),
        "min_return": float(np.min(returns)),
        "max_return": float(np.max(returns)),
        "terminated_episodes": terminated,
    }


def child_dataset_stats(job: dict[str, Any]) -> dict[str, Any]:
    return dataset_stats(job["dataset_id"])


def child_random(job: dict[str, Any]) -> dict[str, Any]:
    """A uniform-random policy's return on the evaluation seeds (the low end of 'medium')."""
    import gymnasium as gym

    space = gym.make(job["env"]).action_space
    space.seed(0)
    returns = evaluate(lambda obs: space.sample(), job["env"], RANDOM_EPISODES)
    return {"returns": returns, "mean_return": float(np.mean(returns))}


# --- stage b: rlgear ---------------------------------------------------------------------------
def rlgear_raw(job: dict[str, Any], logdir: Path, per_iteration: int) -> dict[str, Any]:
    s = SETTINGS
    training: dict[str, Any] = {
        "lr": s["lr"],
        "optimizer_epsilon": s["adam_eps"],
        "train_batch_size": s["batch_size"],
        "num_gradient_steps_per_iteration": per_iteration,
        "evaluation_interval": 0,  # evaluated after training by evaluate(), as d3rlpy is
        "gamma": s["gamma"],
    }
    if job["algo"] in ("cql", "iql"):
        training["ope_interval"] = 0
        training["tau"] = s["tau"]
    if job["algo"] == "cql":
        training.update(
            min_q_weight=s["cql_min_q_weight"],
            num_sampled_actions=s["cql_num_sampled_actions"],
            temperature=s["cql_temperature"],
            initial_alpha=s["cql_initial_alpha"],
            tune_alpha=True,
        )
    if job["algo"] == "iql":
        training.update(expectile=s["iql_expectile"], beta=s["iql_beta"], max_weight=s["iql_max_weight"])
    return {
        "algorithm": job["algo"],
        "backend": "torch",
        "seed": job["seed"],
        "env": {"name": job["env"]},  # checks the dataset's spaces; no evaluation during training
        "offline": {"input": job["dataset_id"]},
        "model": {"hidden_sizes": s["hidden_sizes"], "activation": s["activation"]},
        "training": training,
        "workers": {"num_cpus_for_driver": 1},
        "logging": {"dir": str(logdir), "tensorboard": False, "progress": "none"},
    }


def child_rlgear(job: dict[str, Any]) -> dict[str, Any]:
    import rlgear

    steps = job["steps"]
    per_iteration = min(steps, 500)
    if steps % per_iteration:
        raise SystemExit(f"--steps: expected a multiple of 500 (or less than 500), got {steps}")
    with tempfile.TemporaryDirectory() as tmp:
        trainer = make_trainer(rlgear_raw(job, Path(tmp), per_iteration), Path(tmp) / "run")
        try:
            profile = _profiler(job)
            train_start = time.perf_counter()
            if profile:
                profile.enable()
            while trainer.num_gradient_steps < steps:
                result = trainer.train()
            if profile:
                profile.disable()
            train_s = time.perf_counter() - train_start
            checkpoint = trainer.save(Path(tmp) / "checkpoint")
        finally:
            trainer.stop()
        policy = rlgear.load(checkpoint)
        returns = evaluate(lambda obs: policy.compute_single_action(obs), job["env"], job["eval_episodes"])
    out = {
        "train_s": train_s,
        "returns": returns,
        "gradient_steps": int(result["learner/num_gradient_steps"]),
    }
    if profile:
        out["profile"] = _profile_summary(profile, train_s)
    return out


def _profiler(job: dict[str, Any]):
    if not job.get("profile"):
        return None
    import cProfile

    return cProfile.Profile()


def _profile_summary(profile, train_s: float, top: int = 30) -> dict[str, Any]:
    """The functions with the most time of their own, and the most time including callees."""
    import pstats

    stats = pstats.Stats(profile)
    rows = []
    for (filename, line, name), (_, calls, tottime, cumtime, _) in stats.stats.items():
        where = filename.replace(str(ROOT) + "/", "")
        if "site-packages/" in where:
            where = where.split("site-packages/", 1)[1]
        rows.append(
            {"function": f"{where}:{line}({name})", "calls": calls, "tottime": tottime, "cumtime": cumtime}
        )

    def shaped(key: str) -> list[dict[str, Any]]:
        best = sorted(rows, key=lambda r: r[key], reverse=True)[:top]
        return [{**r, "tottime": round(r["tottime"], 3), "cumtime": round(r["cumtime"], 3)} for r in best]

    return {
        "train_s_profiled": round(train_s, 2),
        "by_tottime": shaped("tottime"),
        "by_cumtime": shaped("cumtime"),
    }


# --- stage c: d3rlpy ---------------------------------------------------------------------------
def minari_to_mdp(dataset_id: str):
    """``minari.load_dataset`` -> ``d3rlpy.dataset.MDPDataset``: observations without each
    episode's final one, terminations as ``terminals`` and truncations as ``timeouts``.

    d3rlpy keeps an episode's observations only, so the last transition of a truncated episode
    (whose next observation is the dropped final one) is not learned from; a terminated episode's
    last transition is (its next value is 0 whatever the observation).
    """
    import d3rlpy
    import minari

    dataset = minari.load_dataset(dataset_id)
    parts: dict[str, list[np.ndarray]] = {"obs": [], "act": [], "rew": [], "term": [], "trunc": []}
    for episode in dataset.iterate_episodes():
        parts["obs"].append(np.asarray(episode.observations)[:-1])
        parts["act"].append(np.asarray(episode.actions))
        parts["rew"].append(np.asarray(episode.rewards))
        parts["term"].append(np.asarray(episode.terminations))
        parts["trunc"].append(np.asarray(episode.truncations))
    joined = {key: np.concatenate(value) for key, value in parts.items()}
    space = dataset.action_space
    return (
        d3rlpy.dataset.MDPDataset(
            observations=joined["obs"].astype(np.float32),
            actions=joined["act"].astype(np.float32),
            rewards=joined["rew"].astype(np.float32),
            terminals=joined["term"].astype(np.float32),
            timeouts=joined["trunc"].astype(np.float32),
        ),
        space,
    )


def d3rlpy_algo(algo: str, action_space):
    """d3rlpy's config with the shared settings.

    - Actions: ``MinMaxActionScaler`` to [-1, 1] from the env's bounds (rlgear scales Box actions
      itself); no observation or reward scaling in either library.
    - Networks: d3rlpy's default encoder is ``hidden_units=[256, 256]``, ReLU.
    - CQL: rlgear's critic loss is ``0.5 * sum_k mean((Q_k - y)^2) + min_q_weight * sum_k penalty_k``,
      d3rlpy's ``sum_k mean((Q_k - y)^2) + alpha * conservative_weight * sum_k (penalty_k - threshold)``:
      with alpha fixed at 1 (``alpha_learning_rate=0``) and ``conservative_weight = 2 * min_q_weight``
      d3rlpy's critic loss is exactly twice rlgear's, which Adam's steps do not see (up to eps).
      The penalty is the same CQL(H) logsumexp over 10 uniform, 10 actor-at-s and 10 actor-at-s'
      actions, importance-weighted, all at ``s``.
    - IQL: the same losses (d3rlpy's critic MSE without 0.5 is Adam-invisible; V's and the critics'
      parameters are disjoint); d3rlpy's actor is a tanh-mean Gaussian in the scaled space, rlgear's a
      Gaussian in the env's action space.
    - BC: each library's own BC. d3rlpy's (default ``policy_type='deterministic'``) regresses a
      deterministic tanh policy on the actions (MSE); rlgear's maximises a Gaussian's log-likelihood
      and acts with its mean.
    """
    import d3rlpy

    s = SETTINGS
    adam = d3rlpy.optimizers.AdamFactory(eps=s["adam_eps"])
    encoder = d3rlpy.models.VectorEncoderFactory(hidden_units=s["hidden_sizes"], activation=s["activation"])
    scaler = d3rlpy.preprocessing.MinMaxActionScaler(
        minimum=np.asarray(action_space.low, np.float32), maximum=np.asarray(action_space.high, np.float32)
    )
    common = {"batch_size": s["batch_size"], "action_scaler": scaler}
    if algo == "bc":
        return d3rlpy.algos.BCConfig(
            learning_rate=s["lr"], optim_factory=adam, encoder_factory=encoder, **common
        )
    if algo == "cql":
        return d3rlpy.algos.CQLConfig(
            actor_learning_rate=s["lr"],
            critic_learning_rate=s["lr"],
            temp_learning_rate=s["lr"],
            alpha_learning_rate=0.0,
            actor_optim_factory=adam,
            critic_optim_factory=adam,
            temp_optim_factory=adam,
            actor_encoder_factory=encoder,
            critic_encoder_factory=encoder,
            gamma=s["gamma"],
            tau=s["tau"],
            n_critics=2,
            initial_temperature=s["cql_initial_alpha"],
            initial_alpha=1.0,
            conservative_weight=2.0 * s["cql_min_q_weight"],
            n_action_samples=s["cql_num_sampled_actions"],
            **common,
        )
    if algo == "iql":
        return d3rlpy.algos.IQLConfig(
            actor_learning_rate=s["lr"],
            critic_learning_rate=s["lr"],
            actor_optim_factory=adam,
            critic_optim_factory=adam,
            actor_encoder_factory=encoder,
            critic_encoder_factory=encoder,
            value_encoder_factory=encoder,
            gamma=s["gamma"],
            tau=s["tau"],
            n_critics=2,
            expectile=s["iql_expectile"],
            weight_temp=s["iql_beta"],
            max_weight=s["iql_max_weight"],
            **common,
        )
    raise ValueError(f"unknown algorithm {algo!r}")


def child_d3rlpy(job: dict[str, Any]) -> dict[str, Any]:
    import d3rlpy

    dataset, action_space = minari_to_mdp(job["dataset_id"])
    d3rlpy.seed(job["seed"])
    algo = d3rlpy_algo(job["algo"], action_space).create(device="cpu:0")
    train_start = time.perf_counter()
    algo.fit(
        dataset,
        n_steps=job["steps"],
        n_steps_per_epoch=job["steps"],
        show_progress=False,
        logger_adapter=d3rlpy.logging.NoopAdapterFactory(),
        save_interval=job["steps"] + 1,
    )
    train_s = time.perf_counter() - train_start
    returns = evaluate(
        lambda obs: algo.predict(obs[None].astype(np.float32))[0], job["env"], job["eval_episodes"]
    )
    return {"train_s": train_s, "returns": returns, "gradient_steps": job["steps"]}


CHILDREN = {
    "sac": child_sac,
    "record": child_record,
    "dataset_stats": child_dataset_stats,
    "random": child_random,
    "rlgear": child_rlgear,
    "d3rlpy": child_d3rlpy,
}


# ---------------------------------------------------------------------------------------------
# stage d: statistics
# ---------------------------------------------------------------------------------------------
def iqm(scores: np.ndarray) -> float:
    """Interquartile mean: the mean of the middle half (``scipy.stats.trim_mean(x, 0.25)``, rliable's)."""
    x = np.sort(np.asarray(scores, dtype=float).ravel())
    cut = int(0.25 * x.size)
    return float(x[cut : x.size - cut].mean())


def iqm_ci(groups: list[np.ndarray], reps: int = 5000, seed: int = 0) -> tuple[float, float, float]:
    """IQM over all runs and its 95% percentile interval from a stratified bootstrap: each
    resample draws, within every group (task), as many runs as it has, with replacement."""
    rng = np.random.default_rng(seed)
    point = iqm(np.concatenate(groups))
    stats = np.empty(reps)
    for r in range(reps):
        stats[r] = iqm(np.concatenate([g[rng.integers(0, g.size, g.size)] for g in groups]))
    low, high = np.percentile(stats, [2.5, 97.5])
    return point, float(low), float(high)


def summarize(results: dict[str, Any], envs: list[str]) -> dict[str, Any]:
    """IQMs, intervals and wall clocks per (env, dataset, algorithm, library) and per (env,
    algorithm, library) over the datasets.

    Where both libraries have runs of an (env, algorithm), only the (dataset, seed) pairs both
    finished count, so a bench stopped part-way compares like with like. The wall-clock ratio is
    given twice: of the mean training seconds, and the median over those pairs of rlgear's over
    d3rlpy's (the two run one after the other, so each pair shares the machine's load of the moment).
    """
    runs = results["runs"]
    cells: list[dict[str, Any]] = []
    aggregate: list[dict[str, Any]] = []

    def seeds_of(env: str, dataset: str, algo: str, library: str) -> dict[int, dict[str, Any]]:
        prefix = f"{env}/{dataset}/{algo}/{library}/"
        return {int(k[len(prefix) :]): r for k, r in runs.items() if k.startswith(prefix)}

    for env in envs:
        for algo in ALGORITHMS:
            found = {(d, lib): seeds_of(env, d, algo, lib) for d in DATASETS for lib in LIBRARIES}
            both = all(any(found[d, lib] for d in DATASETS) for lib in LIBRARIES)
            per_lib: dict[str, dict[str, Any]] = {}
            ratios: list[float] = []
            for dataset in DATASETS:
                common = set(found[dataset, LIBRARIES[0]]).intersection(found[dataset, LIBRARIES[1]])
                ratios += [
                    found[dataset, "rlgear"][s]["train_s"] / found[dataset, "d3rlpy"][s]["train_s"]
                    for s in common
                ]
            for library in LIBRARIES:
                groups, walls = [], []
                for dataset in DATASETS:
                    mine = found[dataset, library]
                    other = found[dataset, LIBRARIES[1 - LIBRARIES.index(library)]]
                    chosen = [mine[s] for s in sorted(mine) if not both or s in other]
                    if not chosen:
                        continue
                    scores = np.array([r["mean_return"] for r in chosen])
                    point, low, high = iqm_ci([scores])
                    cells.append(
                        {
                            "env": env,
                            "dataset": dataset,
                            "algorithm": algo,
                            "library": library,
                            "seeds": len(chosen),
                            "iqm_return": round(point, 1),
                            "ci95": [round(low, 1), round(high, 1)],
                            "mean_return": round(float(scores.mean()), 1),
                            "train_s_mean": round(float(np.mean([r["train_s"] for r in chosen])), 2),
                            "total_s_mean": round(float(np.mean([r["total_s"] for r in chosen])), 2),
                        }
                    )
                    groups.append(scores)
                    walls.extend(r["train_s"] for r in chosen)
                if groups:
                    point, low, high = iqm_ci(groups)
                    per_lib[library] = {
                        "env": env,
                        "algorithm": algo,
                        "library": library,
                        "datasets": len(groups),
                        "runs": int(sum(g.size for g in groups)),
                        "iqm_return": round(point, 1),
                        "ci95": [round(low, 1), round(high, 1)],
                        "train_s_mean": round(float(np.mean(walls)), 2),
                    }
            if set(per_lib) == set(LIBRARIES):
                compare(per_lib["rlgear"], per_lib["d3rlpy"])
                per_lib["rlgear"]["wall_ratio_paired_median"] = round(float(np.median(ratios)), 3)
            aggregate.extend(per_lib.values())
    for cell in cells:
        if cell["library"] != "rlgear":
            continue
        other = next(
            (
                c
                for c in cells
                if c["library"] == "d3rlpy" and all(c[k] == cell[k] for k in ("env", "dataset", "algorithm"))
            ),
            None,
        )
        if other is not None:
            compare(cell, other)
    return {"per_dataset": cells, "over_datasets": aggregate}


def compare(ours: dict[str, Any], theirs: dict[str, Any]) -> None:
    """Mark ``ours`` (rlgear's row) against ``theirs`` (d3rlpy's): returns and wall clock."""
    low, high = theirs["ci95"]
    ours["vs_d3rlpy"] = (
        "above" if ours["iqm_return"] > high else "within" if ours["iqm_return"] >= low else "below"
    )
    ours["wall_ratio_vs_d3rlpy"] = round(ours["train_s_mean"] / theirs["train_s_mean"], 3)
    ours["meets_return_target"] = ours["vs_d3rlpy"] != "below"
    ours["meets_wall_target"] = ours["wall_ratio_vs_d3rlpy"] <= TARGET_WALL_RATIO


def markdown(results: dict[str, Any]) -> str:
    """The docs' tables (docs/benchmarks.md#offline) from the summary."""
    summary = results.get("summary") or {"per_dataset": [], "over_datasets": []}
    lines = [
        "| dataset | algorithm | rlgear IQM [95% CI] | d3rlpy IQM [95% CI] | seeds | rlgear vs d3rlpy CI "
        "| train s rlgear / d3rlpy | ratio |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    cells = summary["per_dataset"]
    for cell in cells:
        if cell["library"] != "rlgear":
            continue
        other = next(
            (
                c
                for c in cells
                if c["library"] == "d3rlpy" and all(c[k] == cell[k] for k in ("env", "dataset", "algorithm"))
            ),
            None,
        )
        theirs = f"{other['iqm_return']} [{other['ci95'][0]}, {other['ci95'][1]}]" if other else "-"
        seeds = f"{cell['seeds']}/{other['seeds']}" if other else f"{cell['seeds']}/0"
        walls = (
            f"{cell['train_s_mean']} / {other['train_s_mean']}" if other else f"{cell['train_s_mean']} / -"
        )
        lines.append(
            f"| {cell['dataset']} | {cell['algorithm']} | {cell['iqm_return']} [{cell['ci95'][0]}, "
            f"{cell['ci95'][1]}] | {theirs} | {seeds} | {cell.get('vs_d3rlpy', '-')} | {walls} "
            f"| {cell.get('wall_ratio_vs_d3rlpy', '-')} |"
        )
    lines += [
        "",
        "| algorithm | library | runs | IQM over datasets [95% CI] | train s (mean) | vs d3rlpy "
        "| ratio of means | median paired ratio |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for row in summary["over_datasets"]:
        lines.append(
            f"| {row['algorithm']} | {row['library']} | {row['runs']} | {row['iqm_return']} "
            f"[{row['ci95'][0]}, {row['ci95'][1]}] | {row['train_s_mean']} | {row.get('vs_d3rlpy', '')} "
            f"| {row.get('wall_ratio_vs_d3rlpy', '')} | {row.get('wall_ratio_paired_median', '')} |"
        )
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------
# the driver
# ---------------------------------------------------------------------------------------------
#: The recorded datasets the committed results were measured on, one tarball per env (Minari's
#: folders ``<slug>/<kind>-v0``). Why committed: a SAC run is not bit-reproducible across machines
#: (29 Nov 2026: the same seed gave a checkpoint with greedy return -173.9 where an earlier machine
#: got -169.1), so recording again would change the data under half-finished results.
DATASET_ARCHIVES = ROOT / "bench" / "datasets"


def restore_datasets(slug: str, minari_root: Path, info: dict[str, Any]) -> None:
    """Unpack ``bench/datasets/<slug>.tar.gz`` when the results describe its datasets and they are
    not on disk yet (a fresh clone): the bench then continues on the data its results came from."""
    import tarfile

    archive = DATASET_ARCHIVES / f"{slug}.tar.gz"
    if not archive.exists() or (minari_root / slug).exists() or not info.get("replay"):
        return
    minari_root.mkdir(parents=True, exist_ok=True)
    with tarfile.open(archive) as tar:
        tar.extractall(minari_root, filter="data")  # the data filter: no absolute paths or links out
    print(f"[{slug}] datasets restored from {archive.relative_to(ROOT)}", flush=True)


def ensure_datasets(env: str, args: argparse.Namespace, results: dict[str, Any]) -> None:
    """Stage a for ``env``: SAC with the replay recording, then medium and expert by acting."""
    spec = ENVS[env]
    slug = spec["slug"]
    data_root = args.data
    folder = data_root / slug
    minari_root = data_root / "minari"
    info = results["datasets"].setdefault(env, {})
    sac_steps = args.sac_steps or spec["sac_steps"]
    record_steps = args.record_steps or spec["record_steps"]
    log = data_root / "logs" / f"{slug}-datasets.log"

    def done(kind: str) -> bool:
        return (minari_root / slug / f"{kind}-v0" / "data" / "metadata.json").exists() and kind in info

    restore_datasets(slug, minari_root, info)

    if "random" not in info:
        info["random"] = spawn({"kind": "random", "env": env}, data_root, log)
        save_results(args.results, results)
    if not done("replay"):
        print(f"[{env}] SAC, {sac_steps} env steps, recording replay ...", flush=True)
        job = {
            "kind": "sac",
            "env": env,
            "seed": 0,
            "steps": sac_steps,
            "folder": str(folder),
            "dataset_id": f"{slug}/replay-v0",
            "note": f"rlgear SAC training run ({sac_steps} env steps, seed 0): every episode",
        }
        load_before = machine_load()
        out = spawn(job, data_root, log)
        info["sac"] = {
            "config": spec["sac_file"],
            "env_steps": sac_steps,
            "train_s": round(out["train_s"], 1),
            "history": out["history"],
            "load_before": load_before,
        }
        info["replay"] = {**spawn({"kind": "dataset_stats", "dataset_id": job["dataset_id"]}, data_root, log)}
        info["replay"]["source"] = job["note"]
        save_results(args.results, results)
    history = info["sac"]["history"]
    expert = history[-1]
    low = info["random"]["mean_return"]
    target = low + 0.5 * (expert["eval_return"] - low)
    medium = min(history[:-1], key=lambda h: abs(h["eval_return"] - target))
    info["sac"]["medium_target_return"] = round(target, 1)
    for kind, point, seed in (("expert", expert, 2), ("medium", medium, 1)):
        if done(kind):
            continue
        note = (
            f"rlgear SAC checkpoint at {point['env_steps']} env steps (greedy return "
            f"{point['eval_return']:.1f}), stochastic actions, {record_steps} env steps"
        )
        print(f"[{env}] recording {kind}: {note}", flush=True)
        job = {
            "kind": "record",
            "env": env,
            "seed": seed,
            "steps": record_steps,
            "folder": str(folder),
            "checkpoint": point["checkpoint"],
            "dataset_id": f"{slug}/{kind}-v0",
            "note": note,
        }
        spawn(job, data_root, log)
        info[kind] = {**spawn({"kind": "dataset_stats", "dataset_id": job["dataset_id"]}, data_root, log)}
        info[kind]["source"] = note
        info[kind]["checkpoint_greedy_return"] = point["eval_return"]
        save_results(args.results, results)


def run_all(args: argparse.Namespace, results: dict[str, Any]) -> None:
    runs = results["runs"]
    # Cheapest algorithm first (bc, iql, then cql: CQL's 30 extra Q evaluations per row make it
    # ~10x IQL's step), all seeds of one algorithm before the next: a bench stopped part-way holds
    # complete 5-seed cells of the algorithms it finished; the two libraries alternate within a
    # (seed, dataset) so that drifting machine load hits both alike.
    todo = [
        (env, dataset, algo, library, seed)
        for algo in args.algos
        for seed in args.seeds
        for env in args.envs
        for dataset in args.datasets
        for library in args.libraries
    ]
    for index, (env, dataset, algo, library, seed) in enumerate(todo):
        key = run_key(env, dataset, algo, library, seed)
        if key in runs:
            continue
        job = {
            "kind": library,
            "env": env,
            "dataset_id": f"{ENVS[env]['slug']}/{dataset}-v0",
            "algo": algo,
            "seed": seed,
            "steps": args.steps,
            "eval_episodes": args.eval_episodes,
        }
        load_before = machine_load()
        started = time.perf_counter()
        out = spawn(job, args.data, args.data / "logs" / "runs.log")
        out.update(
            mean_return=float(np.mean(out["returns"])),
            load_before=load_before,
            load_after=machine_load(),
            wall_s=time.perf_counter() - started,
        )
        runs[key] = out
        results["summary"] = summarize(results, args.envs)
        save_results(args.results, results)
        print(
            f"[{index + 1}/{len(todo)}] {key}: return {out['mean_return']:.1f}, "
            f"train {out['train_s']:.1f} s, total {out['total_s']:.1f} s, load {load_before[0]}",
            flush=True,
        )


def header(args: argparse.Namespace) -> dict[str, Any]:
    import importlib.metadata as md

    versions = {}
    for name in ("torch", "d3rlpy", "minari", "gymnasium", "numpy"):
        try:
            versions[name] = md.version(name)
        except md.PackageNotFoundError:
            versions[name] = None
    return {
        "revision": source_revision(),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores",
        "versions": versions,
        "settings": {
            **SETTINGS,
            "gradient_steps": args.steps,
            "eval_episodes": args.eval_episodes,
            "eval_env_seeds": [EVAL_SEED, EVAL_SEED + args.eval_episodes - 1],
            "torch_threads": 1,
            "command": " ".join(["python", "bench/offline.py", *sys.argv[1:]]),
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--envs", nargs="+", default=["Pendulum-v1"], choices=sorted(ENVS))
    parser.add_argument("--datasets", nargs="+", default=list(DATASETS), choices=DATASETS)
    parser.add_argument("--algos", nargs="+", default=["bc", "iql", "cql"], choices=ALGORITHMS)
    parser.add_argument("--libraries", nargs="+", default=list(LIBRARIES), choices=LIBRARIES)
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2, 3, 4])
    parser.add_argument("--steps", type=int, default=10_000, help="gradient steps per run (both libraries)")
    parser.add_argument("--eval-episodes", type=int, default=10)
    parser.add_argument("--sac-steps", type=int, default=None, help="env steps of the SAC run (replay)")
    parser.add_argument("--record-steps", type=int, default=None, help="env steps of expert and medium")
    parser.add_argument("--data", type=Path, default=ROOT / "bench" / "data")
    parser.add_argument("--results", type=Path, default=ROOT / "bench" / "results" / "offline.json")
    parser.add_argument(
        "--smoke", action="store_true", help="1 seed, 500 steps, small datasets in bench/data/smoke"
    )
    parser.add_argument("--report", action="store_true", help="only recompute the summary")
    parser.add_argument("--profile", action="store_true", help="cProfile one rlgear cql run (seed 0, replay)")
    parser.add_argument("--profile-steps", type=int, default=200, help="gradient steps of --profile's run")
    parser.add_argument("--datasets-only", action="store_true", help="stage a only: record the datasets")
    args = parser.parse_args()
    if args.child:
        child_main(json.loads(args.child))
        return
    if args.smoke:
        args.seeds, args.steps, args.eval_episodes = [0], 500, 2
        args.sac_steps, args.record_steps = args.sac_steps or 2000, args.record_steps or 2000
        args.data = args.data / "smoke"
        if args.results == parser.get_default("results"):
            args.results = args.data / "offline-smoke.json"
    results = load_results(args.results)
    if args.report:
        results["summary"] = summarize(results, args.envs)
        save_results(args.results, results)
        print(markdown(results))
        return
    previous = results.get("settings", {}).get("gradient_steps")
    if previous is not None and results.get("runs") and previous != args.steps:
        raise SystemExit(
            f"--steps: {args.results} holds runs of {previous} gradient steps, got {args.steps} "
            "(pass another --results to start a new file)"
        )
    for env in args.envs:
        if env.startswith("LunarLander"):
            import importlib.util

            if importlib.util.find_spec("Box2D") is None:
                raise SystemExit(f"--envs {env}: needs Box2D (pip install 'gymnasium[box2d]')")
    runs_so_far = results.get("runs", {})
    results.update(header(args))
    results["runs"] = runs_so_far
    results.setdefault("load_at_start", machine_load())
    save_results(args.results, results)
    for env in args.envs:
        ensure_datasets(env, args, results)
    if args.datasets_only:
        return
    if args.profile:
        job = {
            "kind": "rlgear",
            "env": args.envs[0],
            "dataset_id": f"{ENVS[args.envs[0]]['slug']}/replay-v0",
            "algo": "cql",
            "seed": 0,
            "steps": args.profile_steps,
            "eval_episodes": 1,
            "profile": True,
        }
        results["profile_cql"] = {
            "load_before": machine_load(),
            **spawn(job, args.data, args.data / "logs" / "profile.log"),
        }
        save_results(args.results, results)
        print(json.dumps(results["profile_cql"]["profile"]["by_tottime"][:15], indent=1))
        return
    run_all(args, results)
    results["load_at_end"] = machine_load()
    results["summary"] = summarize(results, args.envs)
    save_results(args.results, results)
    print(json.dumps(results["summary"]["over_datasets"], indent=1))


if __name__ == "__main__":
    main()
