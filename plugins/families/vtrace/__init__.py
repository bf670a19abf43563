"""The V-trace family: the asynchronous IMPALA/APPO learner."""
