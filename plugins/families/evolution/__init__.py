"""The evolution family: the population evaluation and the ES/ARS training step."""
