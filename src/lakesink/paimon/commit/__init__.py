"""Commits: `PaimonTarget` (the protocol's `CommitTarget`), the pypaimon commit every snapshot goes
through, manifest merging, commit identity, in-place intents, and the cached manifest reads a commit
plans on. Nothing here imports `maintenance`, the layer above (it installs itself in `target`)."""
