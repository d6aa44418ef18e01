"""The lab: the experiment machinery behind ``st-magnitude compare`` and ``st-magnitude replicate``.

Built on the library and never imported by it (``tests/test_import_graph.py``): :mod:`.engine` is the one engine
both use (base models, seeds, training, evaluation, locks, resumable output), :mod:`.compare` the similarity-variant
comparison, :mod:`.replication` the paper claims with their verdicts.
"""
