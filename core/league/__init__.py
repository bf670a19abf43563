"""League self-play for two-player games: the league's state (:mod:`rlgear.league.league`), its game
results (:mod:`rlgear.league.ratings`) and the env its players see (:mod:`rlgear.league.env`)."""
