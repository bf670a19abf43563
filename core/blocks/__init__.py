"""Framework-free building blocks that learners and actors share, in numpy.

- :mod:`~rlgear.blocks.replay_buffers`: uniform and prioritized replay, n-step;
- :mod:`~rlgear.blocks.inference`, :mod:`~rlgear.blocks.conv_inference`,
  :mod:`~rlgear.blocks.lstm_inference`, :mod:`~rlgear.blocks.squashed_inference`: the numpy twins
  of the catalog models (acting without a framework);
- :mod:`~rlgear.blocks.schedules`, :mod:`~rlgear.blocks.target_network`;
- :mod:`~rlgear.blocks.minibatch_rows`: a learner batch's rows in a seeded random order.

They import only the contracts at the top of ``rlgear``.
"""
