"""Labels and votes: every annotator's votes, the label rules, the labels written and
scored against the model's suggestions, the annotation queue and the team (overlap,
agreement, decisions, the Team page's vote columns).

Imports the store and corpus.
"""
