"""External environments: clients that connect to a training process over TCP.

- :mod:`~rlgear.external.wire`: the frame format of ``docs/protocol.md``;
- :mod:`~rlgear.external.client`: the Python client (numpy + standard library only);
- :mod:`~rlgear.external.serve`: ``rlgear serve CONFIG``, a training run whose envs are clients.

The server side, the ``external`` env adapter, is a plugin (``rlgear.plugins.envs.external``).
"""
