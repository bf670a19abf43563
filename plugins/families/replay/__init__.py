"""The replay family: the replay training loop, and Ape-X with its replay shards."""
