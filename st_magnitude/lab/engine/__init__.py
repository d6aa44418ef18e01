"""The one experiment engine of the lab: what ``compare`` and ``replicate`` both use to load a base model, seed,
train, evaluate, lock an output folder, survive a kill and write their records."""
