"""The rungs: the registry (every rung's facts, from one source each), the rung files it reads, the
workspace that adds the user's rungs, its scaffolding (`lab init`, `lab new`), and the extension build."""
