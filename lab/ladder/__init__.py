"""The rungs: the registry (every rung's facts, from one source each), the extension build, and the
child process a profiler runs (`python -m lab.ladder.target`)."""
