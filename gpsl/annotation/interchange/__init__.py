"""Files in and out: uploads in the formats of other tools, exports, every annotator's
vote files and crowd folders.

Imports the store, corpus and labeling.
"""
