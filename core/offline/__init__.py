"""Offline RL data: record any run to a Minari dataset, and read Minari datasets.

Datasets are Minari's own format (``minari.load_dataset`` reads what rlgear writes, rlgear reads
what Minari writes): :mod:`rlgear.offline.dataset` reads (``offline.input``),
:mod:`rlgear.offline.recorder` writes (``offline.output``), :mod:`rlgear.offline.location` says
where a dataset id or path lives, and :mod:`rlgear.offline.gym_spaces` converts spaces between
rlgear and gymnasium. Minari (and gymnasium, h5py) are imported only when a run uses a dataset.
"""
