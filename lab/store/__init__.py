"""The run store: `runs` (profiles/<run-id>/, written atomically, read back) and `export`. Imports
without torch or a GPU."""
