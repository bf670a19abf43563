"""Finding plugins: entry points for named drivers (stevedore) and callback hooks (pluggy).

- :mod:`~rlgear.discovery.registry`: the entry-point groups, lazy listing and loading,
  errors that name the plugin and what to install;
- :mod:`~rlgear.discovery.hooks`: the plugin manager that calls the hooks of
  :mod:`rlgear.hookspecs`.
"""
