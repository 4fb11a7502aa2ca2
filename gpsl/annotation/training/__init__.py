"""Model versions and how they are made: the training pipeline and its run files, the
refit's warm start, the pool's predictions and query scores, the held-out evaluation
and the Confidence page's summaries, the joint crowd rule, and the jobs that run the
workers (a local process or Dask).

Imports the store, corpus and labeling (a run writes the queue's scores and reads the
team's training rule).
"""
